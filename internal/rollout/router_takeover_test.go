package rollout

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/lock"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// oldRouter is the router a replacement moved the release away from: its object keeps routing
// until Finalize removes it.
type oldRouter struct {
	fakeRouter
	finalized atomic.Bool
}

func (o *oldRouter) GetRoutes(ctx context.Context) (router.Weights, error) {
	if o.finalized.Load() {
		return router.Weights{}, &router.NotFoundError{Ref: "the old router's object"}
	}
	return o.fakeRouter.GetRoutes(ctx)
}

func (o *oldRouter) Finalize(context.Context) error {
	o.finalized.Store(true)
	return nil
}

// routes reports what the old router's object sends to the canary, 0 once it is gone.
func (o *oldRouter) routes() int {
	if o.finalized.Load() {
		return 0
	}
	w, _ := o.weights()
	return w.Canary
}

// Issue 20, N2: a create_before_destroy replacement that changes mesh_provider finds the old
// router's object at the split of a run killed half-way. The new instance's run must move that
// traffic to the primary and hand the old object back before it scales the canary down.
func TestRunOnAnotherRouterTakesTheTrafficOverFirst(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	e, cs, _, _ := setup(t, rel, nil, "podinfo:2")

	// The old run was killed at 50% on its router, the canary serving.
	old := &oldRouter{}
	old.w = router.Weights{Primary: 50, Canary: 50}
	if err := e.newRun(rel, Status{}, nil).w.scale(ctx, "podinfo", 2); err != nil {
		t.Fatal(err)
	}
	rec, _, err := LoadState(ctx, cs, "test", "podinfo")
	if err != nil || rec.Status.Router != "osm" {
		t.Fatalf("the record names router %q (%v), want osm", rec.Status.Router, err)
	}
	rec.Status.Phase, rec.Status.CanaryWeight = PhaseProgressing, 50
	store := stateStore{kube: cs, rel: rel}
	if err := store.save(ctx, rec.Status, rec.Spec); err != nil {
		t.Fatal(err)
	}

	// The canary loses its pods only once no router sends it anything.
	var mu sync.Mutex
	var violations []string
	cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if s, ok := a.(k8stesting.UpdateAction).GetObject().(*autoscalingv1.Scale); ok && a.GetSubresource() == "scale" && s.Name == "podinfo" && s.Spec.Replicas == 0 {
			if canary := old.routes(); canary > 0 {
				mu.Lock()
				violations = append(violations, "the canary was scaled to 0 while the old router sent it "+splitText(router.Weights{Primary: 100 - canary, Canary: canary}))
				mu.Unlock()
			}
		}
		return false, nil, nil
	})

	moved := rel
	moved.Provider = "other-mesh"
	current := &fakeRouter{}
	var asked []string
	successor := &Engine{Kube: cs, Router: current, HTTP: e.HTTP, DrainDelay: time.Millisecond,
		RouterFor: func(provider string, spec []byte) (router.Router, error) {
			asked = append(asked, provider)
			return old, nil
		}}
	if _, err := successor.Initialize(ctx, moved, nil); err != nil {
		t.Fatalf("the successor's Create: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	if len(asked) != 1 || asked[0] != "osm" {
		t.Errorf("the engine asked for the routers %v, want the recorded osm", asked)
	}
	if !old.finalized.Load() {
		t.Errorf("the old router's object was left routing %d%% to the canary", old.routes())
	}
	if w, _ := current.weights(); w != (router.Weights{Primary: 100}) {
		t.Errorf("the new router holds %s, want everything on the primary", splitText(w))
	}
	after, _, _ := LoadState(ctx, cs, "test", "podinfo")
	if after.Status.Router != "other-mesh" {
		t.Errorf("the record names router %q after the takeover, want other-mesh", after.Status.Router)
	}
}

// Issue 20, N2 (campaign seeds 4516, 7249): the state ConfigMap, deleted by hand, no longer
// names the old router when the replacement on another mesh_provider runs. The record rebuilt
// from the primary must still name it, so that the run takes the traffic over before it scales
// the canary that the old router's object still sends traffic to.
func TestTakeoverSurvivesADeletedRecord(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	e, cs, _, _ := setup(t, rel, nil, "podinfo:2")
	old := &oldRouter{}
	old.w = router.Weights{Primary: 90, Canary: 10}
	if err := e.newRun(rel, Status{}, nil).w.scale(ctx, "podinfo", 2); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps("test").Delete(ctx, StateConfigMapName("podinfo"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var violations []string
	cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if s, ok := a.(k8stesting.UpdateAction).GetObject().(*autoscalingv1.Scale); ok && a.GetSubresource() == "scale" && s.Name == "podinfo" && s.Spec.Replicas == 0 {
			if canary := old.routes(); canary > 0 {
				mu.Lock()
				violations = append(violations, "the canary was scaled to 0 while the old router sent it "+splitText(router.Weights{Primary: 100 - canary, Canary: canary}))
				mu.Unlock()
			}
		}
		return false, nil, nil
	})
	moved := rel
	moved.Provider = "other-mesh"
	var asked []string
	successor := &Engine{Kube: cs, Router: &fakeRouter{}, HTTP: e.HTTP, DrainDelay: time.Millisecond,
		RouterFor: func(provider string, spec []byte) (router.Router, error) {
			asked = append(asked, provider)
			return old, nil
		}}
	if _, err := successor.Initialize(ctx, moved, nil); err != nil {
		t.Fatalf("the successor's Create: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	if len(asked) != 1 || asked[0] != "osm" {
		t.Errorf("the engine asked for the routers %v, want osm, named by the primary", asked)
	}
	if !old.finalized.Load() {
		t.Errorf("the old router's object was left routing %d%% to the canary", old.routes())
	}
	primary := deployment(t, cs, "podinfo-primary")
	if got := primary.Annotations[AnnotationRouter]; got != "other-mesh" {
		t.Errorf("the primary names router %q after the takeover, want other-mesh", got)
	}
}

// A primary without Ready pods cannot take the old router's traffic: the run stops there and
// the old router keeps it, recorded, so that the next apply tries again.
func TestTakeoverWaitsForAServingPrimary(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	e, cs, _, _ := setup(t, rel, nil, "podinfo:1")
	old := &oldRouter{}
	old.w = router.Weights{Primary: 50, Canary: 50}
	primary := deployment(t, cs, "podinfo-primary")
	primary.Status.ReadyReplicas, primary.Status.AvailableReplicas = 0, 0
	if _, err := cs.AppsV1().Deployments("test").UpdateStatus(ctx, primary, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec, _, _ := LoadState(ctx, cs, "test", "podinfo")
	rec.Status.Phase, rec.Status.CanaryWeight = PhaseProgressing, 50
	if err := (&stateStore{kube: cs, rel: rel}).save(ctx, rec.Status, rec.Spec); err != nil {
		t.Fatal(err)
	}
	moved := rel
	moved.Provider = "other-mesh"
	successor := &Engine{Kube: cs, Router: &fakeRouter{}, HTTP: e.HTTP, DrainDelay: time.Millisecond,
		RouterFor: func(string, []byte) (router.Router, error) { return old, nil }}
	_, err := successor.Apply(ctx, moved, nil, Status{})
	if err == nil || !strings.Contains(err.Error(), "mesh_provider changed from osm to other-mesh") || !strings.Contains(err.Error(), "primary has no Ready pods") {
		t.Fatalf("Apply = %v, want a refusal naming the router change and the primary", err)
	}
	if old.finalized.Load() || old.routes() != 50 {
		t.Errorf("the old router was changed (finalized %v, canary %d%%), want it left as it was", old.finalized.Load(), old.routes())
	}
	after, _, _ := LoadState(ctx, cs, "test", "podinfo")
	if after.Status.Router != "osm" {
		t.Errorf("the record names router %q, want osm until the takeover completes", after.Status.Router)
	}
}

// Issue 20, N8: a Lease deleted by hand lets the next run in at once, while the run that held
// it may still write until it notices. Runs keep their Lease when they end, so a missing one on
// a release with a record was deleted: the next run waits until the record stayed unchanged for
// a lease duration, and a write meanwhile starts the wait again.
func TestRunWaitsOutADeletedLease(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	e, cs, _, prior := setup(t, rel, nil, "podinfo:1")
	e.Lock = lock.Options{LeaseDuration: 800 * time.Millisecond, RenewInterval: 100 * time.Millisecond}
	var warnings []string
	e.Warn = func(summary, _ string) { warnings = append(warnings, summary) }

	// A Lease released normally is taken at once.
	start := time.Now()
	if _, err := e.Apply(ctx, rel, nil, prior); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 400*time.Millisecond || len(warnings) > 0 {
		t.Fatalf("a run after a released Lease took %s and warned %v", took, warnings)
	}

	if err := cs.CoordinationV1().Leases("test").Delete(ctx, "podinfo-canary-release-lock", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The run that held it writes once more, 300 ms in.
	go func() {
		time.Sleep(300 * time.Millisecond)
		cm, err := cs.CoreV1().ConfigMaps("test").Get(ctx, StateConfigMapName("podinfo"), metav1.GetOptions{})
		if err == nil {
			cm.Data[stateKeyStatus] = strings.Replace(cm.Data[stateKeyStatus], `"message":"`, `"message":"still writing; `, 1)
			cm.ResourceVersion = "written-late"
			_, _ = cs.CoreV1().ConfigMaps("test").Update(ctx, cm, metav1.UpdateOptions{})
		}
	}()
	start = time.Now()
	if _, err := e.Apply(ctx, rel, nil, prior); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 300*time.Millisecond+e.Lock.LeaseDuration {
		t.Errorf("the run after a deleted Lease went on after %s; want a lease duration (%s) without a write to the record, from the last one", took, e.Lock.LeaseDuration)
	}
	if len(warnings) != 1 || warnings[0] != "canary_release lock was deleted" {
		t.Errorf("warnings %v, want one that the lock was deleted", warnings)
	}
}
