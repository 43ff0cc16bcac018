package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// A chaos schedule is judged by the simulator's invariant log and by the primary's template.

const (
	// canaryLossGrace is how long traffic may still reach a canary whose pods the schedule took
	// away while a run watched it: the run moves it at once, within one interval (2 s), and the
	// controller-manager, the run's watch and the simulator each see the loss a moment late.
	canaryLossGrace = 5 * time.Second
	// primaryBackGrace is how long after the primary has Ready pods again the simulator may
	// still log it without: its informers lag the API server.
	primaryBackGrace = 3 * time.Second
)

// invariantExcuse tells whether the schedule itself caused an entry of the invariant log (it
// deleted the primary, or took the canary's pods away): why, or "" when it did not.
type invariantExcuse func(meshsim.InvariantEntry) string

// chaosInvariants judges a schedule's namespace by the simulator's invariant log: every entry
// fails the schedule, except those the schedule caused on purpose, which are counted.
type chaosInvariants struct {
	mu      sync.Mutex
	excuses []invariantExcuse
}

// chaosNamespace is c.namespace with the invariant log judged by chaosInvariants instead; the
// schedule's trace is printed then.
func (c *testCluster) chaosNamespace(t *testing.T, trace *chaosTrace) (string, *chaosInvariants) {
	t.Helper()
	ns := c.namespace(t)
	c.skipViolationCheck(ns)
	inv := &chaosInvariants{}
	// Registered after c.namespace's cleanup, so it runs before the namespace goes, and before
	// the schedule's later cleanups (the destroy) it runs after.
	t.Cleanup(func() {
		entries, err := c.invariantEntries(ns)
		if err != nil {
			t.Errorf("reading the simulator's invariant log: %v", err)
			return
		}
		inv.mu.Lock()
		defer inv.mu.Unlock()
		excused := map[string]int{}
		var broken []meshsim.InvariantEntry
	entries:
		for _, e := range entries {
			for _, excuse := range inv.excuses {
				if why := excuse(e); why != "" {
					excused[why]++
					continue entries
				}
			}
			broken = append(broken, e)
		}
		for why, n := range excused {
			t.Logf("%d invariant log entries caused by the schedule itself (%s)", n, why)
		}
		for i, e := range broken {
			if i == 5 {
				t.Errorf("... and %d more invariant violations", len(broken)-i)
				break
			}
			t.Errorf("invariant violation at %s: %s: %s", e.Time.Format("15:04:05.000"), e.Object, e.Message)
		}
		// After the destroy, which the trace records too.
		trace.dump(t)
	})
	return ns, inv
}

func (inv *chaosInvariants) excuse(e invariantExcuse) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.excuses = append(inv.excuses, e)
}

// excuseNoReadyPods excuses "no Ready pods" entries of the given Services while during says so,
// and the real proxy's 502s, 503s and 404s seen by the simulator's client meanwhile: Traefik
// answers 502 when the pod it picked refuses the connection (not Ready, while the endpoints it
// holds still list it), 503 for a side whose Service has no endpoints, and 404 once it dropped
// the router of an Ingress whose Service has none. The proxy does not say which side it failed to reach;
// the client's entry names the Services of the route that had weight and no Ready pod as the
// request left (none while Traefik still catches up with pods back), so a 503 while another
// side had none stays a violation.
func (inv *chaosInvariants) excuseNoReadyPods(ns string, services []string, why string, during func(time.Time) bool) {
	excused := map[string]bool{}
	for _, svc := range services {
		excused[ns+"/"+svc] = true
	}
	inv.excuse(func(e meshsim.InvariantEntry) string {
		if !during(e.Time) {
			return ""
		}
		for _, svc := range services {
			if e.Message == fmt.Sprintf("traffic sent to Service %s/%s, which has no Ready pods", ns, svc) {
				return why
			}
		}
		saw, empty, _ := strings.Cut(e.Message, meshsim.ClientEmptyServices)
		noEndpoints := false
		for _, code := range []string{"502", "503", "404"} {
			noEndpoints = noEndpoints || strings.HasSuffix(saw, ": "+code+" from the proxy, not from a pod (no "+meshsim.HeaderPod+" header)")
		}
		if !strings.HasPrefix(saw, "client: ") || !noEndpoints {
			return ""
		}
		if empty != "" {
			for _, svc := range strings.Split(empty, ", ") {
				if !excused[svc] {
					return ""
				}
			}
		}
		return why + ", seen through the real proxy"
	})
}

// invariantEntries reads the simulator's invariant log of a namespace, with the entries' times.
func (c *testCluster) invariantEntries(ns string) ([]meshsim.InvariantEntry, error) {
	resp, err := http.Get(c.env.SimulatorURL + "/invariants?namespace=" + url.QueryEscape(ns))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /invariants: %s", resp.Status)
	}
	var entries []meshsim.InvariantEntry
	return entries, json.NewDecoder(resp.Body).Decode(&entries)
}

// promotionWitness follows the state ConfigMap and the primary Deployment for a whole schedule.
// It keeps the resourceVersion at which each template hash was first recorded as passed (the
// record a promotion writes before it touches the primary) and every template the primary
// took, so that each can be checked against a completed analysis recorded before it.
// resourceVersions come from the one etcd, so they order writes across objects.
type promotionWitness struct {
	mu     sync.Mutex
	passed map[string]uint64
	// primary holds every template the primary took, the first as the first apply left it.
	primary []primaryTemplate
	// deletedAt is when the primary's deletion was asked for or seen, whichever came first;
	// readyAgainAt when it had Ready pods again, after the deletion was seen.
	deletedAt, readyAgainAt time.Time
	sawDeleted              bool
}

// deleting notes that the schedule asks for the primary's deletion at a moment.
func (w *promotionWitness) deleting(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deletedAt, w.readyAgainAt, w.sawDeleted = at, time.Time{}, false
}

type primaryTemplate struct {
	spec, image string
	rv          uint64
}

// watchPromotions follows the release's record and its primary, of the kind given, and returns
// once it has seen the primary as it is now.
func (c *testCluster) watchPromotions(t *testing.T, ns string, kind *chaosKind) *promotionWitness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &promotionWitness{passed: map[string]uint64{}}
	states := c.kube.CoreV1().ConfigMaps(ns)
	go followNamed(ctx, rollout.StateConfigMapName("podinfo"), states.Watch, func(ev watch.Event) {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok || ev.Type == watch.Deleted {
			return
		}
		var st rollout.Status
		if json.Unmarshal([]byte(cm.Data["status.json"]), &st) != nil || st.PassedSpec == "" {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, seen := w.passed[st.PassedSpec]; !seen {
			w.passed[st.PassedSpec] = resourceVersion(cm)
		}
	})
	seen := make(chan struct{})
	var once sync.Once
	go kind.followPrimary(ctx, c, ns, func(ev primaryEvent) {
		defer once.Do(func() { close(seen) })
		w.mu.Lock()
		defer w.mu.Unlock()
		if ev.deleted {
			if w.deletedAt.IsZero() || !w.readyAgainAt.IsZero() {
				w.deletedAt = time.Now()
			}
			w.readyAgainAt, w.sawDeleted = time.Time{}, true
			return
		}
		if w.sawDeleted && w.readyAgainAt.IsZero() && ev.ready {
			w.readyAgainAt = time.Now()
		}
		if n := len(w.primary); n == 0 || w.primary[n-1].spec != ev.spec {
			w.primary = append(w.primary, primaryTemplate{spec: ev.spec, image: ev.image, rv: ev.rv})
		}
	})
	select {
	case <-seen:
	case <-time.After(30 * time.Second):
		t.Fatalf("the witness saw no %s primary in 30s", kind.name)
	}
	return w
}

// check asserts that the primary only ever took the template the first apply left or one
// whose analysis completed before, and never the bad image.
func (w *promotionWitness) check(t *testing.T, badImage string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.primary) == 0 {
		t.Error("the witness saw no primary")
		return
	}
	initSpec := w.primary[0].spec
	for _, p := range w.primary {
		if p.spec == "" {
			// Nothing to judge it by.
			t.Errorf("the primary (image %s) at resourceVersion %d names no template", p.image, p.rv)
		}
		if badImage != "" && p.image == badImage {
			t.Errorf("the primary took the bad template %s (image %s) at resourceVersion %d", p.spec, p.image, p.rv)
		}
		if p.spec == initSpec {
			continue
		}
		if at, ok := w.passed[p.spec]; !ok || at >= p.rv {
			t.Errorf("the primary took template %s (image %s) at resourceVersion %d, with no completed analysis of it recorded before (passed: %v)",
				p.spec, p.image, p.rv, w.passed)
		}
	}
}

// primaryDown reports whether the primary was gone at a moment: from its deletion until it had
// Ready pods again, and primaryBackGrace after.
func (w *promotionWitness) primaryDown(at time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deletedAt.IsZero() || at.Before(w.deletedAt) {
		return false
	}
	return w.readyAgainAt.IsZero() || at.Before(w.readyAgainAt.Add(primaryBackGrace))
}

// followNamed delivers every event of the object named name until ctx ends, watching again
// from the last resourceVersion seen when the API server ends a watch.
func followNamed(ctx context.Context, name string, open func(context.Context, metav1.ListOptions) (watch.Interface, error), on func(watch.Event)) {
	last := ""
	for ctx.Err() == nil {
		w, err := open(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: last})
		if err != nil {
			last = ""
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				// Too old to resume from: start over from the current state.
				last = ""
				break
			}
			if m, err := metaOf(ev.Object); err == nil {
				last = m.GetResourceVersion()
			}
			on(ev)
		}
		w.Stop()
	}
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", obj)
	}
	return m, nil
}

func resourceVersion(obj metav1.Object) uint64 {
	rv, _ := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	return rv
}

// While the primary is down, the real proxy's 502s, 503s and 404s are the schedule's doing, unless the
// client's entry names another side that had weight and no Ready pod as the request left.
func TestChaosExcusesProxyAnswersOfTheSideItTookDown(t *testing.T) {
	inv := &chaosInvariants{}
	inv.excuseNoReadyPods("t1", []string{"podinfo-primary", "podinfo"}, "the schedule deleted the primary", func(time.Time) bool { return true })
	saw := "client: GET http://t1.app.example.com/ through the proxy: 503 from the proxy, not from a pod (no " + meshsim.HeaderPod + " header)"
	for _, tc := range []struct {
		message string
		excused bool
	}{
		{saw + meshsim.ClientEmptyServices + "t1/podinfo-primary", true},
		{saw, true}, // Traefik still catching up with the primary's pods back
		{saw + meshsim.ClientEmptyServices + "t1/podinfo-primary, t1/podinfo-canary", false},
		{saw + meshsim.ClientEmptyServices + "t1/podinfo-canary", false},
		// Traefik drops the router of an Ingress whose Service has no endpoints.
		{strings.Replace(saw, "503", "404", 1) + meshsim.ClientEmptyServices + "t1/podinfo", true},
		// A pod not Ready refuses the connection Traefik opens while its endpoints lag.
		{strings.Replace(saw, "503", "502", 1), true},
		{"client: GET http://t1.app.example.com/ through the proxy: 504 from the proxy, not from a pod (no " + meshsim.HeaderPod + " header)", false},
		{"client: GET http://t1.app.example.com/ through the proxy: error read: connection reset by peer", false},
	} {
		why := ""
		for _, excuse := range inv.excuses {
			if why = excuse(meshsim.InvariantEntry{Namespace: "t1", Object: "IngressRoute/podinfo", Message: tc.message}); why != "" {
				break
			}
		}
		if (why != "") != tc.excused {
			t.Errorf("%q: excused %q, want excused %t", tc.message, why, tc.excused)
		}
	}
}

// A release served by the real Traefik is analysed with killAnalysis's interval and more
// failed checks allowed.
func TestRealProxyAnalysisAllowsForTraefik(t *testing.T) {
	got := realProxyAnalysis(killAnalysis)
	if !strings.Contains(got, "threshold             = 4\n") || strings.Replace(got, "= 4\n", "= 2\n", 1) != killAnalysis {
		t.Errorf("realProxyAnalysis changed more or less than the threshold:\n%s", got)
	}
}
