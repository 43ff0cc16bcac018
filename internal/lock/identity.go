package lock

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// liveness is what this host can prove about a holder's process.
type liveness int

const (
	// unknown: another host, another PID namespace or boot, or an identity without them.
	// Only watching the Lease tells whether its holder is alive.
	unknown liveness = iota
	// running: the holder's process exists here.
	running
	// dead: the holder's process is gone, so nobody renews its Lease.
	dead
)

// Process pins a process down beyond its pid, which means nothing in another PID namespace
// and is reused after the process ends.
type Process struct {
	Pid          int
	PIDNamespace string // inode of the PID namespace
	BootID       string
	Start        uint64 // clock ticks after boot, field 22 of /proc/<pid>/stat
}

// Machine is what a lock learns from the machine its process runs on: the names it writes
// into the Lease, and whether a holder of the same host is alive. Options.Machine nil is this
// machine (its hostname and /proc); a simulation gives its own, to decide them.
type Machine interface {
	Hostname() (string, error)
	// Self is this process; ok is false where the machine cannot pin it down beyond its
	// pid (then no holder is ever judged from it).
	Self() (p Process, ok bool)
	// Stat is the state ("R", "S", "Z", ...) and start time of process pid of this process's
	// PID namespace; an error wrapping fs.ErrNotExist when there is none.
	Stat(pid int) (state string, start uint64, err error)
}

// localMachine is this machine, read through the hostname and /proc.
type localMachine struct{}

func (localMachine) Hostname() (string, error) { return os.Hostname() }

func (localMachine) Self() (Process, bool) {
	p, ok := self()
	p.Pid = os.Getpid()
	return p, ok
}

func (localMachine) Stat(pid int) (string, uint64, error) { return procStat(pid) }

// self is this process, or ok false where /proc cannot tell (not Linux, or a /proc mounted
// for another PID namespace): then no holder is ever judged from this host.
var self = sync.OnceValues(func() (Process, bool) {
	// /proc/self names this process as the mounted /proc numbers it; if that is not our own
	// pid, /proc/<pid> would read other processes than the holders' pids mean.
	if link, err := os.Readlink("/proc/self"); err != nil || link != strconv.Itoa(os.Getpid()) {
		return Process{}, false
	}
	ns, err := os.Readlink("/proc/self/ns/pid") // "pid:[4026531836]"
	if err != nil || !strings.HasPrefix(ns, "pid:[") || !strings.HasSuffix(ns, "]") {
		return Process{}, false
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return Process{}, false
	}
	_, start, err := procStat(os.Getpid())
	if err != nil {
		return Process{}, false
	}
	return Process{Pid: os.Getpid(), PIDNamespace: ns[len("pid:[") : len(ns)-1], BootID: strings.TrimSpace(string(boot)), Start: start}, true
})

// newIdentity names this run for whoever finds the Lease held: process, host, a random id
// that tells apart two runs of one process, and what lets a run on this host prove the
// process dead (PID namespace, boot, start time).
func newIdentity(m Machine) string {
	host, err := m.Hostname()
	if err != nil {
		host = "unknown"
	}
	runID := make([]byte, 4)
	_, _ = rand.Read(runID) // crypto/rand.Read never fails
	p, ok := m.Self()
	id := fmt.Sprintf("terraform-provider-canary pid %d on host %s (run %s", p.Pid, host, hex.EncodeToString(runID))
	if ok {
		id += fmt.Sprintf(", pidns %s, boot %s, start %d", p.PIDNamespace, p.BootID, p.Start)
	}
	return id + ")"
}

// holderPattern reads an identity made by newIdentity. Older ones lack the pidns, boot and
// start, and so are never judged: their Leases are waited out.
var holderPattern = regexp.MustCompile(`^terraform-provider-canary pid (\d+) on host (\S+) \(run [0-9a-f]+, pidns (\d+), boot ([0-9a-f-]+), start (\d+)\)$`)

// judgeOn tells what machine m can prove about holder's process. A pid is only compared in the
// PID namespace and boot it was taken in: the same hostname alone (host network, a fixed
// --hostname) may be another container whose pids mean other processes.
func judgeOn(m Machine, holder string) liveness {
	match := holderPattern.FindStringSubmatch(holder)
	me, ok := m.Self()
	if match == nil || !ok || match[3] != me.PIDNamespace || match[4] != me.BootID {
		return unknown
	}
	if host, err := m.Hostname(); err != nil || match[2] != host {
		return unknown
	}
	pid, err1 := strconv.Atoi(match[1])
	start, err2 := strconv.ParseUint(match[5], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return unknown
	}
	state, started, err := m.Stat(pid)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return dead
	case err != nil:
		return unknown
	case started != start:
		return dead // the pid now names a later process
	case state == "Z" || state == "X":
		return dead // killed, and not yet reaped
	}
	return running
}

// procStat reads the state and start time of process pid from /proc/<pid>/stat.
func procStat(pid int) (state string, start uint64, err error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, err
	}
	// The command name, field 2, may hold spaces and parentheses: count from the last ')'.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 20 {
		return "", 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name, want at least 20", pid, len(fields))
	}
	start, err = strconv.ParseUint(fields[19], 10, 64) // field 22; fields[0] is field 3
	return fields[0], start, err
}
