package provider

// Faults: every request of a simulated process is a possible kill point, every write a possible
// 409, 500, timeout or lost response, and every request a moment at which the schedule may act
// behind the release's back. Each decision is a keyed coin: a hash of the seed and of the
// request's key (process, verb, resource, name, and how many such requests came before), so a
// seed replays whatever order the goroutines run in.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// errProcessKilled is what the requests of a killed process, or of one that ended, meet:
// nothing leaves a dead process. It is not transient, so no retry spins on it.
var errProcessKilled = errors.New("the process was killed (simulated SIGKILL)")

// faultKind is what a write meets.
type faultKind int

const (
	faultNone faultKind = iota
	faultConflict
	faultServerError
	faultTimeout
	// faultLostResponse: the write lands, and the client hears a timeout.
	faultLostResponse
)

var faultNames = map[faultKind]string{faultConflict: "409", faultServerError: "500", faultTimeout: "504 timeout", faultLostResponse: "lost response"}

// faultPlan is how hostile one process's API server is, per thousand requests.
type faultPlan struct {
	killPerMille  int
	faultPerMille int
}

// keyedCoin is a number in [0, 1) that depends on the seed and the key only.
func keyedCoin(seed int64, key string) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	x := h.Sum64() ^ (uint64(seed) * 0x9E3779B97F4A7C15)
	// splitmix64's finaliser spreads neighbouring keys over the whole range.
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// processFaults decides the fate of one process's requests.
type processFaults struct {
	c       *campaign
	process string
	plan    faultPlan
	// cancel ends the process's run context: a kill cancels it.
	cancel context.CancelFunc
	// machine is where the process runs; nil for the harness's clients.
	machine *simulatedMachine
	// started is when the process started, exitedAt when it ended.
	started, exitedAt time.Time

	mu       sync.Mutex
	requests map[string]int
	killed   bool
	// exited is set once the process ended, killed or not: it holds nothing any more.
	exited bool
	// injected counts the faults this process met; the invariants give retries their time.
	injected int
	// writes counts the process's landed writes by object; killAfter names the write after
	// which its next request is killed (campaign_moments_test.go).
	writes    map[string]int
	killAfter string
}

func (c *campaign) newProcessFaults(process string, plan faultPlan) *processFaults {
	return &processFaults{c: c, process: process, plan: plan, cancel: func() {}, requests: map[string]int{}, started: time.Now()}
}

// requestKey names a request independently of when it runs: verb, resource and name.
func requestKey(action k8stesting.Action) string {
	resource := action.GetResource().Resource
	if sub := action.GetSubresource(); sub != "" {
		resource += "/" + sub
	}
	name := ""
	switch a := action.(type) {
	case interface{ GetName() string }: // get, delete, patch
		name = a.GetName()
	case interface{ GetObject() runtime.Object }: // create, update
		name = objectName(a.GetObject())
	}
	return action.GetVerb() + " " + resource + "/" + name
}

// informerRequest reports a request of an informer: a watch, or a list by field selector (the
// engine's own lists select by label).
func informerRequest(action k8stesting.Action) bool {
	if action.GetVerb() == "watch" {
		return true
	}
	list, ok := action.(k8stesting.ListAction)
	return ok && list.GetListRestrictions().Fields != nil && !list.GetListRestrictions().Fields.Empty()
}

func isWriteVerb(verb string) bool {
	switch verb {
	case "create", "update", "delete", "patch":
		return true
	}
	return false
}

// beforeRequest decides one request's fate: it may kill the process there, let the schedule
// act, or answer a write with a fault (faultLostResponse answers after the write landed).
func (f *processFaults) beforeRequest(action k8stesting.Action) (faultKind, error) {
	key := requestKey(action)
	f.mu.Lock()
	if f.killed || f.exited {
		f.mu.Unlock()
		return faultNone, errProcessKilled
	}
	n := f.requests[key]
	f.requests[key] = n + 1
	f.mu.Unlock()
	at := fmt.Sprintf("%s: %s #%d", f.process, key, n)
	// An informer lists and watches from goroutines of its own, at moments that race the
	// run's: no kill or event happens there, so that a seed replays exactly.
	if !informerRequest(action) {
		if after := f.takeKillAfterWrite(); after != "" {
			f.kill(at + ", right after " + after)
			return faultNone, errProcessKilled
		}
		if f.c.chance("kill "+at, f.plan.killPerMille) {
			f.kill(at)
			return faultNone, errProcessKilled
		}
		f.c.atRequest(f, at)
	}
	if !isWriteVerb(action.GetVerb()) || !f.c.chance("fault "+at, f.plan.faultPerMille) {
		return faultNone, nil
	}
	kind := faultKind(1 + int(keyedCoin(f.c.seed, "fault kind "+at)*4))
	f.mu.Lock()
	f.injected++
	f.mu.Unlock()
	f.c.tracef("%s answered %s", at, faultNames[kind])
	f.c.cover("API fault: " + faultNames[kind])
	gr := action.GetResource().GroupResource()
	switch kind {
	case faultConflict:
		return kind, apierrors.NewConflict(gr, "", errors.New("simulated conflict"))
	case faultServerError:
		return kind, apierrors.NewInternalError(errors.New("simulated server error"))
	case faultTimeout:
		return kind, apierrors.NewServerTimeout(gr, action.GetVerb(), 1)
	}
	return kind, nil
}

// errLostResponse is what the client hears of a write whose answer was lost.
func errLostResponse(action k8stesting.Action) error {
	return apierrors.NewTimeoutError(fmt.Sprintf("simulated: the answer to %s was lost", requestKey(action)), 1)
}

// kill is a SIGKILL at a request: the run's context ends, and so does every later request.
func (f *processFaults) kill(at string) {
	f.mu.Lock()
	already := f.killed
	f.killed = true
	f.mu.Unlock()
	if !already {
		f.c.tracef("%s: KILLED", at)
		f.c.cover("kill")
		f.cancel()
		f.exit()
	}
}

// exit ends the process: the kernel reaps it, and a Lease it still holds names a process that
// is gone (or whose pid another process took).
func (f *processFaults) exit() {
	f.mu.Lock()
	already := f.exited
	f.exited = true
	if !already {
		f.exitedAt = time.Now()
	}
	f.mu.Unlock()
	if !already {
		f.c.processExited(f)
	}
}

// exitedBy reports a process that had ended by t (a command that follows another starts at
// the same fake instant).
func (f *processFaults) exitedBy(t time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exited && !f.exitedAt.After(t)
}

func (f *processFaults) hasExited() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exited
}

func (f *processFaults) wasKilled() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.killed
}

func (f *processFaults) faultsInjected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected
}

// chance is a keyed coin that comes up with the given odds per thousand.
func (c *campaign) chance(key string, perMille int) bool {
	return perMille > 0 && keyedCoin(c.seed, key) < float64(perMille)/1000
}

// objectName is an object's name, "" when it has none yet (a generated one).
func objectName(obj any) string {
	if m, ok := obj.(interface{ GetName() string }); ok {
		return m.GetName()
	}
	return ""
}

// cover counts an event of the schedule, for the campaign's coverage summary.
func (c *campaign) cover(event string) {
	c.traceMu.Lock()
	c.coverage[event]++
	c.traceMu.Unlock()
}

// tracef is one event of a schedule, at its fake time.
func (c *campaign) tracef(format string, args ...any) {
	line := fmt.Sprintf("%9s  %s", c.elapsed().Round(time.Millisecond), fmt.Sprintf(format, args...))
	c.traceMu.Lock()
	c.trace = append(c.trace, strings.TrimRight(line, "\n"))
	c.traceMu.Unlock()
}
