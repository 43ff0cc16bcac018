package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// providerComm is the provider binary's name as /proc/<pid>/stat shows it (15 bytes at most).
const providerComm = "terraform-provider-canary"

// parseVmHWM returns the peak resident set size in KiB from the text of /proc/<pid>/status.
func parseVmHWM(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != "VmHWM" {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmHWM line %q", sc.Text())
		}
		return strconv.ParseInt(fields[0], 10, 64)
	}
	return 0, errors.New("no VmHWM line")
}

// procStat is what the bench reads from /proc/<pid>/stat.
type procStat struct {
	comm string
	ppid int
	// cpuTicks is user + system time in clock ticks (USER_HZ, 100 per second on Linux).
	cpuTicks int64
}

// clockTick is the length of one USER_HZ tick.
const clockTick = 10 * time.Millisecond

// parseStat reads /proc/<pid>/stat. The command name sits in parentheses and may itself hold
// spaces or parentheses; the fields after it start with the state (field 3 of proc(5)).
func parseStat(stat []byte) (procStat, error) {
	open, closing := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || closing < open {
		return procStat{}, fmt.Errorf("malformed stat %q", stat)
	}
	rest := strings.Fields(string(stat[closing+1:]))
	// rest[0] is field 3 (state), so field n is rest[n-3]: ppid 4, utime 14, stime 15.
	if len(rest) < 13 {
		return procStat{}, fmt.Errorf("malformed stat %q", stat)
	}
	ppid, err1 := strconv.Atoi(rest[1])
	utime, err2 := strconv.ParseInt(rest[11], 10, 64)
	stime, err3 := strconv.ParseInt(rest[12], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return procStat{}, fmt.Errorf("malformed stat %q: %w", stat, err)
	}
	return procStat{comm: string(stat[open+1 : closing]), ppid: ppid, cpuTicks: utime + stime}, nil
}

// isProvider matches the (possibly truncated) command name of the provider binary.
func isProvider(comm string) bool {
	return len(comm) >= 15 && strings.HasPrefix(providerComm, comm)
}

// rssWatcher polls the provider processes that a terraform process starts (one per plan or
// apply walk) and keeps their peak RSS.
type rssWatcher struct {
	mu       sync.Mutex
	peakKB   map[int]int64
	cpuTicks map[int]int64 // last seen, per process
	onNew    func(pid int)
}

// watchProviderRSS polls every interval until ctx ends.
func watchProviderRSS(ctx context.Context, parent int, interval time.Duration, onNew func(pid int)) *rssWatcher {
	w := &rssWatcher{peakKB: map[int]int64{}, cpuTicks: map[int]int64{}, onNew: onNew}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			w.poll(parent)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *rssWatcher) poll(parent int) {
	for pid, st := range childProviders(parent) {
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			continue
		}
		kb, err := parseVmHWM(status)
		if err != nil {
			continue
		}
		w.mu.Lock()
		_, seen := w.peakKB[pid]
		w.peakKB[pid] = max(w.peakKB[pid], kb)
		w.cpuTicks[pid] = max(w.cpuTicks[pid], st.cpuTicks)
		w.mu.Unlock()
		if !seen && w.onNew != nil {
			w.onNew(pid)
		}
	}
}

// peakMB is the highest peak RSS of any provider process seen, in MiB.
func (w *rssWatcher) peakMB() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var peak int64
	for _, kb := range w.peakKB {
		peak = max(peak, kb)
	}
	return float64(peak) / 1024
}

// cpu is the CPU time of the provider processes, as last polled (a process's final
// milliseconds before exit can be missed).
func (w *rssWatcher) cpu() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ticks int64
	for _, t := range w.cpuTicks {
		ticks += t
	}
	return time.Duration(ticks) * clockTick
}

// processes is the number of provider processes seen.
func (w *rssWatcher) processes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.peakKB)
}

// childProviders lists the provider processes whose parent is pid.
func childProviders(parent int) map[int]procStat {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := map[int]procStat{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		st, err := parseStat(stat)
		if err == nil && st.ppid == parent && isProvider(st.comm) {
			out[pid] = st
		}
	}
	return out
}
