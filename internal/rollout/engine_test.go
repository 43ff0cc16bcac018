package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/notify"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/webhook"
)

// fakeRouter keeps the weights in memory and remembers every canary weight it was given.
type fakeRouter struct {
	mu      sync.Mutex
	w       router.Weights
	history []int
	onSet   func(router.Weights)
}

func (f *fakeRouter) Reconcile(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.w == (router.Weights{}) {
		f.w = router.Weights{Primary: 100}
	}
	return nil
}

func (f *fakeRouter) SetRoutes(_ context.Context, w router.Weights) error {
	f.mu.Lock()
	f.w = w
	f.history = append(f.history, w.Canary)
	cb := f.onSet
	f.mu.Unlock()
	if cb != nil {
		cb(w)
	}
	return nil
}

func (f *fakeRouter) GetRoutes(context.Context) (router.Weights, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w, nil
}
func (f *fakeRouter) Drift(context.Context) ([]string, error) { return nil, nil }
func (f *fakeRouter) Finalize(context.Context) error          { return nil }
func (f *fakeRouter) Warnings(context.Context) []string       { return nil }

func (f *fakeRouter) weights() (router.Weights, []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w, append([]int(nil), f.history...)
}

type querierFunc func(ctx context.Context, q string) (float64, error)

func (f querierFunc) Query(ctx context.Context, q string) (float64, error) { return f(ctx, q) }

// newCluster is a fake clientset whose Deployments become ready as soon as they are written,
// as kwok makes them on the real stack, and which serves the scale subresource.
func newCluster() *fake.Clientset {
	cs := fake.NewClientset()
	markReady := func(d *appsv1.Deployment) {
		n := int32(1)
		if d.Spec.Replicas != nil {
			n = *d.Spec.Replicas
		}
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	}
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	for _, verb := range []string{"create", "update"} {
		cs.PrependReactor(verb, "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "" {
				return false, nil, nil
			}
			if d, ok := a.(interface{ GetObject() runtime.Object }).GetObject().(*appsv1.Deployment); ok {
				// As the API server: a new spec is a new generation.
				d.Generation = 1
				if old, err := cs.Tracker().Get(gvr, a.GetNamespace(), d.Name); err == nil {
					o := old.(*appsv1.Deployment)
					d.Generation = o.Generation
					if !equality.Semantic.DeepEqual(o.Spec, d.Spec) {
						d.Generation++
					}
				}
				markReady(d)
			}
			return false, nil, nil
		})
	}
	cs.PrependReactor("get", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "scale" {
			return false, nil, nil
		}
		obj, err := cs.Tracker().Get(gvr, a.GetNamespace(), a.(k8stesting.GetAction).GetName())
		if err != nil {
			return true, nil, err
		}
		d := obj.(*appsv1.Deployment)
		return true, &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace}, Spec: autoscalingv1.ScaleSpec{Replicas: *d.Spec.Replicas}}, nil
	})
	cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "scale" {
			return false, nil, nil
		}
		s := a.(k8stesting.UpdateAction).GetObject().(*autoscalingv1.Scale)
		obj, err := cs.Tracker().Get(gvr, a.GetNamespace(), s.Name)
		if err != nil {
			return true, nil, err
		}
		d := obj.(*appsv1.Deployment).DeepCopy()
		if d.Spec.Replicas == nil || *d.Spec.Replicas != s.Spec.Replicas {
			d.Generation++
		}
		d.Spec.Replicas = &s.Spec.Replicas
		markReady(d)
		return true, s, cs.Tracker().Update(gvr, d, a.GetNamespace())
	})
	return cs
}

func podinfo(image string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "podinfo"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: "test"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "podinfo", Image: image}}},
			},
		},
	}
}

func successRate(lowest float64) Metric {
	return Metric{Name: "request-success-rate", Interval: "30s", Min: &lowest}
}

func testRelease(a Analysis) Release {
	if a.Interval == 0 {
		a.Interval = 5 * time.Millisecond
	}
	return Release{
		Namespace: "test", Name: "podinfo", Provider: "osm", Target: "podinfo",
		Service: Service{Port: 9898}, Analysis: a, ProgressDeadline: 5 * time.Second, Seal: testSeal(),
	}
}

// setup creates podinfo v1, initialises the release and switches the target to image.
func setup(t *testing.T, rel Release, q MetricQuerier, image string) (*Engine, *fake.Clientset, *fakeRouter, Status) {
	t.Helper()
	ctx := context.Background()
	cs := newCluster()
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, podinfo("podinfo:1", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRouter{}
	e := &Engine{Kube: cs, Router: rt, Metrics: q, HTTP: http.DefaultClient, DrainDelay: time.Millisecond}
	st, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	if st.Phase != PhaseInitialized {
		t.Fatalf("phase after Initialize = %s", st.Phase)
	}
	target, _ := cs.AppsV1().Deployments("test").Get(ctx, "podinfo", metav1.GetOptions{})
	target.Spec.Template.Spec.Containers[0].Image = image
	if _, err := cs.AppsV1().Deployments("test").Update(ctx, target, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt.history = nil
	return e, cs, rt, st
}

func deployment(t *testing.T, cs *fake.Clientset, name string) *appsv1.Deployment {
	t.Helper()
	d, err := cs.AppsV1().Deployments("test").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestInitializeCreatesPrimaryServicesAndScalesTargetToZero(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 50})
	_, cs, rt, st := setup(t, rel, nil, "podinfo:1")
	primary := deployment(t, cs, "podinfo-primary")
	if got := primary.Spec.Template.Labels["app"]; got != "podinfo-primary" {
		t.Errorf("primary pod label app = %q, want podinfo-primary", got)
	}
	if *primary.Spec.Replicas != 2 {
		t.Errorf("primary replicas = %d, want the target's 2", *primary.Spec.Replicas)
	}
	if r := *deployment(t, cs, "podinfo").Spec.Replicas; r != 0 {
		t.Errorf("target replicas = %d, want 0", r)
	}
	for name, want := range map[string]string{"podinfo": "podinfo-primary", "podinfo-primary": "podinfo-primary", "podinfo-canary": "podinfo"} {
		svc, err := cs.CoreV1().Services("test").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Service %s: %v", name, err)
		}
		if svc.Spec.Selector["app"] != want {
			t.Errorf("Service %s selects app=%s, want %s", name, svc.Spec.Selector["app"], want)
		}
	}
	if w, _ := rt.weights(); w != (router.Weights{Primary: 100}) {
		t.Errorf("weights after Initialize = %+v, want 100/0", w)
	}
	if st.LastPromotedSpec == "" || st.LastPromotedSpec != st.LastAppliedSpec {
		t.Errorf("specs after Initialize: %+v", st)
	}
	cs2, ok, err := LoadState(context.Background(), cs, "test", "podinfo")
	if err != nil || !ok || cs2.Status.Phase != PhaseInitialized {
		t.Errorf("cluster state = %+v, %v, %v; want phase Initialized", cs2.Status, ok, err)
	}
}

func TestHealthyCanaryIsPromotedThroughEveryStep(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 50, Threshold: 2, Metrics: []Metric{successRate(99)}})
	var queries []string
	q := querierFunc(func(_ context.Context, query string) (float64, error) {
		queries = append(queries, query)
		return 99.5, nil
	})
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if st.Phase != PhaseSucceeded {
		t.Fatalf("phase = %s, want Succeeded", st.Phase)
	}
	w, history := rt.weights()
	if fmt.Sprint(history) != "[10 20 30 40 50 0]" {
		t.Errorf("canary weights = %v, want [10 20 30 40 50 0]", history)
	}
	if w != (router.Weights{Primary: 100}) {
		t.Errorf("final weights = %+v, want 100/0", w)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary image = %s, want podinfo:2", img)
	}
	if r := *deployment(t, cs, "podinfo").Spec.Replicas; r != 0 {
		t.Errorf("canary replicas after promotion = %d, want 0", r)
	}
	if len(queries) != 5 || !strings.Contains(queries[0], `destination_name="podinfo"`) || !strings.Contains(queries[0], "[30s]") {
		t.Errorf("queries = %d, first %q", len(queries), queries[0])
	}
	if st.LastPromotedSpec != st.LastAppliedSpec || st.LastPromotedSpec == prior.LastPromotedSpec {
		t.Errorf("specs after promotion: %+v", st)
	}
}

func TestFailingCanaryRollsBackAndNamesTheCheck(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 50, Threshold: 2, Metrics: []Metric{successRate(99)}})
	q := querierFunc(func(context.Context, string) (float64, error) { return 50, nil })
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	st, err := e.Apply(context.Background(), rel, nil, prior)
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("Apply error = %v, want *Failure", err)
	}
	for _, want := range []string{"request-success-rate", "50.00", "min 99", "canary weight 10%", "failed checks: 2 of threshold 2", "100% of traffic is back on the primary podinfo-primary"} {
		if !strings.Contains(f.Reason, want) {
			t.Errorf("error %q does not mention %q", f.Reason, want)
		}
	}
	if st.Phase != PhaseFailed {
		t.Errorf("phase = %s, want Failed", st.Phase)
	}
	if w, history := rt.weights(); w != (router.Weights{Primary: 100}) || fmt.Sprint(history) != "[10 0]" {
		t.Errorf("weights = %+v after %v, want 100/0 after [10 0]", w, history)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("primary image = %s, want podinfo:1 kept", img)
	}
	if r := *deployment(t, cs, "podinfo").Spec.Replicas; r != 0 {
		t.Errorf("canary replicas = %d, want 0", r)
	}
	if st.LastPromotedSpec != prior.LastPromotedSpec {
		t.Errorf("last promoted spec changed on rollback")
	}
}

func TestNoValuesIsAFailedCheck(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	q := querierFunc(func(context.Context, string) (float64, error) { return 0, fmt.Errorf("query: %w", metrics.ErrNoValues) })
	e, _, _, prior := setup(t, rel, q, "podinfo:2")
	_, err := e.Apply(context.Background(), rel, nil, prior)
	if err == nil || !strings.Contains(err.Error(), "no values found for osm metric request-success-rate: is the canary receiving traffic?") {
		t.Fatalf("error = %v", err)
	}
}

func TestCancelledApplyLeavesTrafficOnThePrimary(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 50, Interval: time.Hour, Metrics: []Metric{successRate(99)}})
	q := querierFunc(func(context.Context, string) (float64, error) { return 100, nil })
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	ctx, cancel := context.WithCancel(context.Background())
	rt.onSet = func(w router.Weights) {
		if w.Canary == 10 {
			cancel()
		}
	}
	done := make(chan error, 1)
	go func() { _, err := e.Apply(ctx, rel, nil, prior); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "interrupted") {
			t.Fatalf("error = %v, want an interruption", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Apply did not return after cancel")
	}
	if w, _ := rt.weights(); w != (router.Weights{Primary: 100}) {
		t.Errorf("weights after cancel = %+v, want 100/0", w)
	}
	if r := *deployment(t, cs, "podinfo").Spec.Replicas; r != 0 {
		t.Errorf("canary replicas after cancel = %d, want 0", r)
	}
	cst, _, _ := LoadState(context.Background(), cs, "test", "podinfo")
	if cst.Status.Phase != PhaseFailed {
		t.Errorf("cluster phase after cancel = %s, want Failed", cst.Status.Phase)
	}
}

func TestUnchangedTemplateReleasesNothing(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10})
	e, _, rt, prior := setup(t, rel, nil, "podinfo:1")
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.Message, "nothing to release") {
		t.Errorf("message = %q", st.Message)
	}
	if w, history := rt.weights(); len(history) != 0 || w != (router.Weights{Primary: 100}) {
		t.Errorf("weights written = %v, live %+v: a settled release already at 100/0 needs no write", history, w)
	}
}

func TestWebhooksGetFlaggerPayloadAndFailuresCount(t *testing.T) {
	var mu sync.Mutex
	var payloads []webhook.Payload
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p webhook.Payload
		_ = json.NewDecoder(r.Body).Decode(&p)
		mu.Lock()
		payloads = append(payloads, p)
		mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/fail") {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()

	rel := testRelease(Analysis{StepWeight: 50, Threshold: 1, Webhooks: []Webhook{
		{Name: "load-test", Type: HookRollout, URL: srv.URL + "/ok", Metadata: map[string]string{"cmd": "hey"}},
	}})
	e, _, _, prior := setup(t, rel, nil, "podinfo:2")
	if _, err := e.Apply(context.Background(), rel, nil, prior); err != nil {
		t.Fatalf("a 202 must count as success: %v", err)
	}
	mu.Lock()
	if len(payloads) != 2 || payloads[0].Name != "podinfo" || payloads[0].Namespace != "test" ||
		payloads[0].Phase != string(PhaseProgressing) || payloads[0].Metadata["cmd"] != "hey" || payloads[0].Checksum == "" {
		t.Errorf("payloads = %+v", payloads)
	}
	mu.Unlock()

	rel.Analysis.Webhooks = []Webhook{{Name: "gate", Type: HookPreRollout, URL: srv.URL + "/fail"}}
	e2, _, rt, prior2 := setup(t, rel, nil, "podinfo:3")
	_, err := e2.Apply(context.Background(), rel, nil, prior2)
	if err == nil || !strings.Contains(err.Error(), "pre-rollout webhook gate failed: status 500") {
		t.Fatalf("error = %v, want the pre-rollout failure", err)
	}
	if _, history := rt.weights(); len(history) != 0 {
		t.Errorf("weights = %v: a failed pre-rollout hook must stop the run before the first shift", history)
	}
}

func TestStrategySteps(t *testing.T) {
	for _, tc := range []struct {
		a    Analysis
		want string
	}{
		{Analysis{StepWeight: 10, MaxWeight: 50}, "[10 20 30 40 50]"},
		{Analysis{StepWeight: 20, MaxWeight: 50}, "[20 40 60]"},
		{Analysis{StepWeight: 5, MaxWeight: 50}, "[5 10 15 20 25 30 35 40 45 50]"},
		{Analysis{StepWeight: 30}, "[30 60 90 100]"},
		{Analysis{StepWeights: []int{10, 20, 30, 40, 50, 60}}, "[10 20 30 40 50 60]"},
		// Blue/green: test traffic alone, then one interval with all of it.
		{Analysis{Iterations: 3}, "[0 0 0 100]"},
		// A/B testing: the weights stay 0; matching requests go to the canary.
		{Analysis{Iterations: 2, Match: []router.Match{{Headers: map[string]router.StringMatch{"x-canary": {Exact: "insider"}}}}}, "[0 0]"},
	} {
		var weights []int
		for _, s := range StrategyFor(tc.a).Splits() {
			weights = append(weights, s.Canary)
			if s.Matched != (len(tc.a.Match) > 0) || s.Primary+s.Canary != 100 {
				t.Errorf("split %+v of %+v", s, tc.a)
			}
		}
		if got := fmt.Sprint(weights); got != tc.want {
			t.Errorf("steps(%+v) = %s, want %s", tc.a, got, tc.want)
		}
	}
	if got := fmt.Sprint(promotionSteps(50, 20)); got != "[30 10 0]" {
		t.Errorf("promotion steps = %s", got)
	}
}

// With a short interval the Normal Events are batched: fewer Events than steps and phases,
// every one in its place and with its reason (issue #15's API footprint).
func TestEventsAreBatchedInOrder(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 50, Threshold: 2, Metrics: []Metric{successRate(99)}})
	q := querierFunc(func(context.Context, string) (float64, error) { return 99.5, nil })
	e, cs, _, prior := setup(t, rel, q, "podinfo:2")
	events := captureEvents(cs)
	if _, err := e.Apply(context.Background(), rel, nil, prior); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	var reasons, steps []string
	for _, ev := range *events {
		for _, told := range notify.EventStory(ev.Reason, ev.Message) {
			reasons = append(reasons, told[0])
			if strings.HasPrefix(told[1], "Advance ") {
				steps = append(steps, strings.Fields(told[1])[4])
			}
		}
	}
	if got := strings.Join(steps, " "); got != "10 20 30 40 50" {
		t.Errorf("steps told by the Events: %s, want 10 20 30 40 50; events %v", got, *events)
	}
	if len(*events) >= len(reasons) {
		t.Errorf("%d Events for %d steps and phases, want them batched", len(*events), len(reasons))
	}
	if got, want := strings.Join(reasons, " "), "Progressing Progressing Progressing Progressing Progressing Progressing Promoting Finalising Succeeded"; got != want {
		t.Errorf("Event reasons %s, want %s", got, want)
	}
	if last := (*events)[len(*events)-1]; last.Reason != string(PhaseSucceeded) {
		t.Errorf("the last Event's reason is %s, want Succeeded (the reason of the latest it tells)", last.Reason)
	}
}

// A Warning is written at once, after the Normal Events pending before it.
func TestWarningEventsAreNotBatched(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	q := querierFunc(func(context.Context, string) (float64, error) { return 50, nil })
	e, cs, _, prior := setup(t, rel, q, "podinfo:2")
	events := captureEvents(cs)
	if _, err := e.Apply(context.Background(), rel, nil, prior); err == nil {
		t.Fatal("Apply of a failing canary succeeded")
	}
	var told []string
	for _, ev := range *events {
		if ev.Type == warningEvent && len(notify.EventStory(ev.Reason, ev.Message)) != 1 {
			t.Errorf("a Warning was batched: %s", ev.Message)
		}
		for _, line := range notify.EventStory(ev.Reason, ev.Message) {
			told = append(told, line[0])
		}
	}
	if got := strings.Join(told, " "); !strings.HasPrefix(got, "Progressing Progressing Halted") {
		t.Errorf("Events told %s, want the start and the step before the Warning", got)
	}
}

// captureEvents records the Events a run writes, in order, instead of writing them.
func captureEvents(cs *fake.Clientset) *[]*corev1.Event {
	var events []*corev1.Event
	cs.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ev := a.(k8stesting.CreateAction).GetObject().(*corev1.Event)
		events = append(events, ev)
		return true, ev, nil
	})
	return &events
}
