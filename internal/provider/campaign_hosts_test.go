package provider

// Hosts: the machines the simulated processes run on, as the release lock sees them (its
// lock.Machine). Every command of the schedule runs on this host; another apply of the same
// release (a second CI job) runs on another host whose clock may be minutes off, or in a
// container on this host: the same hostname and boot, another PID namespace, whose pid
// number may name a live process here or none. A process that ends frees its pid, which
// another process may take at once (with a later start time). The world decides what each
// process's /proc shows, so the lock's judgement of a holder is the schedule's to test.

import (
	"fmt"
	"io/fs"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/lock"
)

// The machines of a schedule.
const (
	thisHost      = "ci-runner-1"
	thisPIDNS     = "4026531836"
	thisBoot      = "6f1d7c2e-0b7a-4f49-9a43-1c2b3d4e5f60"
	otherHost     = "ci-runner-2"
	otherBoot     = "0c9e8d7f-6a5b-4c3d-8e2f-1a0b9c8d7e6f"
	containerNS   = "4026532871"
	otherHostNS   = "4026531837"
	ticksPerSec   = 100 // USER_HZ: /proc's start times count these since boot
	firstPid      = 4100
	containerPid  = 7 // a CI job's process in a fresh container
	localInitPid  = 1 // always alive in this host's PID namespace
	pidReuseOdds  = 300
	otherKindSeed = "other host kind"
)

// otherRun is where another apply of the release runs, drawn once per schedule.
type otherRun struct {
	kind string
	// host, pidNS and boot place its processes; skew is how far its clock is off.
	host, pidNS, boot string
	skew              time.Duration
	// pid is the fixed pid of a containerised run (0: numbered as on a host).
	pid int
}

// otherRuns are the places another apply may run from.
var otherRuns = []otherRun{
	{kind: "another host, clock in step", host: otherHost, pidNS: otherHostNS, boot: otherBoot},
	{kind: "another host, clock 5 min behind", host: otherHost, pidNS: otherHostNS, boot: otherBoot, skew: -5 * time.Minute},
	{kind: "another host, clock 5 min ahead", host: otherHost, pidNS: otherHostNS, boot: otherBoot, skew: 5 * time.Minute},
	{kind: "a container on this host, its pid free here", host: thisHost, pidNS: containerNS, boot: thisBoot, pid: containerPid},
	{kind: "a container on this host, its pid alive here", host: thisHost, pidNS: containerNS, boot: thisBoot, pid: localInitPid},
}

// pidSpace is one PID namespace of one host.
type pidSpace struct{ host, pidNS string }

// campaignHosts is the process table of every machine of a schedule.
type campaignHosts struct {
	seed  int64
	boots map[string]time.Time // by boot id: when the host booted, for start times
	mu    sync.Mutex
	// live holds the start time of every live process, by PID namespace and pid.
	live    map[pidSpace]map[int]uint64
	nextPid map[pidSpace]int
	exits   int
	other   otherRun
}

func newCampaignHosts(seed int64) *campaignHosts {
	now := time.Now()
	h := &campaignHosts{
		seed:    seed,
		boots:   map[string]time.Time{thisBoot: now.Add(-3 * time.Hour), otherBoot: now.Add(-50 * time.Minute)},
		live:    map[pidSpace]map[int]uint64{},
		nextPid: map[pidSpace]int{},
		other:   otherRuns[int(keyedCoin(seed, otherKindSeed)*float64(len(otherRuns)))],
	}
	// This host's init, which a container's pid 1 names here too.
	h.live[pidSpace{thisHost, thisPIDNS}] = map[int]uint64{localInitPid: 1}
	return h
}

// ticks is a start time: clock ticks since the boot.
func (h *campaignHosts) ticks(boot string) uint64 {
	return uint64(time.Since(h.boots[boot]) * ticksPerSec / time.Second)
}

// simulatedMachine is the lock.Machine of one process.
type simulatedMachine struct {
	hosts *campaignHosts
	space pidSpace
	boot  string
	self  lock.Process
	// skew is how far the host's clock is off: the Lease times it writes and reads.
	skew time.Duration
}

// start starts a process on this host (other false) or where another apply runs.
func (h *campaignHosts) start(other bool) *simulatedMachine {
	place := otherRun{host: thisHost, pidNS: thisPIDNS, boot: thisBoot}
	if other {
		place = h.other
	}
	space := pidSpace{place.host, place.pidNS}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.live[space] == nil {
		h.live[space] = map[int]uint64{}
	}
	pid := place.pid
	if pid == 0 || h.live[space][pid] != 0 {
		if h.nextPid[space] == 0 {
			h.nextPid[space] = firstPid
		}
		pid = h.nextPid[space]
		h.nextPid[space] += 1 + int(keyedCoin(h.seed, fmt.Sprintf("pid gap %s %d", space, pid))*40)
	}
	m := &simulatedMachine{hosts: h, space: space, boot: place.boot, skew: place.skew,
		self: lock.Process{Pid: pid, PIDNamespace: place.pidNS, BootID: place.boot, Start: h.ticks(place.boot)}}
	h.live[space][pid] = m.self.Start
	return m
}

// exit ends a process: its pid is free, or, at a keyed chance, taken by another process at
// once (a later start time).
func (h *campaignHosts) exit(m *simulatedMachine) (reused bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.exits++
	if h.live[m.space][m.self.Pid] != m.self.Start {
		return false
	}
	delete(h.live[m.space], m.self.Pid)
	if keyedCoin(h.seed, fmt.Sprintf("pid reuse %d", h.exits)) < pidReuseOdds/1000.0 {
		h.live[m.space][m.self.Pid] = h.ticks(m.boot) + 1
		return true
	}
	return false
}

func (m *simulatedMachine) Hostname() (string, error) { return m.space.host, nil }

func (m *simulatedMachine) Self() (lock.Process, bool) { return m.self, true }

// Stat is /proc/<pid>/stat in the process's PID namespace.
func (m *simulatedMachine) Stat(pid int) (string, uint64, error) {
	m.hosts.mu.Lock()
	defer m.hosts.mu.Unlock()
	start, ok := m.hosts.live[m.space][pid]
	if !ok {
		return "", 0, fmt.Errorf("/proc/%d/stat: %w", pid, fs.ErrNotExist)
	}
	return "S", start, nil
}

// fromProcess is a request as the API server receives it: the Lease times a process writes
// are its host's clock's.
func (p *simulatedProcess) fromProcess(action k8stesting.Action) k8stesting.Action {
	if p.machine == nil || p.machine.skew == 0 || action.GetResource() != leasesResource {
		return action
	}
	switch a := action.(type) {
	case k8stesting.CreateActionImpl:
		a.Object = shiftLeaseTimes(a.Object, p.machine.skew)
		return a
	case k8stesting.UpdateActionImpl:
		a.Object = shiftLeaseTimes(a.Object, p.machine.skew)
		return a
	}
	return action
}

// toProcess is an answer as the process reads it: Lease times against its own clock.
func (p *simulatedProcess) toProcess(obj runtime.Object) runtime.Object {
	if p.machine == nil || p.machine.skew == 0 {
		return obj
	}
	return shiftLeaseTimes(obj, -p.machine.skew)
}

// shiftLeaseTimes is a Lease whose acquire and renew times are moved by d.
func shiftLeaseTimes(obj runtime.Object, d time.Duration) runtime.Object {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj
	}
	lease = lease.DeepCopy()
	for _, t := range []**metav1.MicroTime{&lease.Spec.AcquireTime, &lease.Spec.RenewTime} {
		if *t != nil {
			*t = &metav1.MicroTime{Time: (*t).Add(d)}
		}
	}
	return lease
}
