package rollout

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// engineDirs are the engine's package and the packages split from it (issue 32), whose code the
// chokepoints guard as the engine's: moving code out of the package must not take it out of
// their reach.
var engineDirs = []string{".", "../autoscaler", "../configs", "../controls", "../notify", "../webhook"}

// engineFiles parses the engine's files, tests aside, by name: a file of this package by its
// name, one of a package split from it by its package folder and name (autoscaler/hpa.go).
func engineFiles(t *testing.T) map[string]*ast.File {
	t.Helper()
	files := map[string]*ast.File{}
	fset := token.NewFileSet()
	for _, dir := range engineDirs {
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(names) == 0 {
			t.Fatalf("no Go files in %s", dir)
		}
		for _, f := range names {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			key := filepath.Base(f)
			if dir != "." {
				key = filepath.Join(filepath.Base(dir), key)
			}
			if files[key], err = parser.ParseFile(fset, f, src, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	return files
}

// callersOf lists the engine's functions (tests aside, see engineFiles) that call a method named method.
func callersOf(t *testing.T, method string) []string {
	t.Helper()
	var callers []string
	for _, file := range engineFiles(t) {
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == method {
						callers = append(callers, fn.Name.Name)
					}
				}
				return true
			})
		}
	}
	return callers
}

// One chokepoint per promise: every weight write passes the traffic gate (setSplit), and the
// primary's template is written only by promote, which needs a proof.
func TestOneWeightWriterAndOnePromoter(t *testing.T) {
	if got := callersOf(t, "SetRoutes"); len(got) != 1 || got[0] != "setSplitVia" {
		t.Errorf("Router.SetRoutes is called from %v; only setSplitVia (the traffic gate) may", got)
	}
	if got := callersOf(t, "ensurePrimary"); len(got) != 1 || got[0] != "promote" {
		t.Errorf("workload.ensurePrimary is called from %v; only promote (which needs a proof) may", got)
	}
	// A driver-owned target (mesh.TargetOwner, or a kind released in place) promotes by
	// pinning a revision: that too only from promote, with its proof.
	if got := callersOf(t, "PinPrimary"); len(got) != 1 || got[0] != "promote" {
		t.Errorf("mesh.Target.PinPrimary is called from %v; only promote (which needs a proof) may", got)
	}
	if got := callersOf(t, "primaryFrom"); len(got) != 2 {
		t.Errorf("primaryFrom is called from %v; want ensurePrimary and the drift check only", got)
	}
	// A kind released in place moves its pods only as its router (SetRoutes) and its
	// promotion (PinPrimary): the engine has no writer of its own for it.
	if got := callersOf(t, "StatefulSets"); len(got) != 0 {
		t.Errorf("StatefulSets is used from %v; the engine reads and writes a kind released in place only through its driver", got)
	}
	if got := assignersOf(t, "Partition"); len(got) != 0 {
		t.Errorf("a partition is assigned in %v; only the driver's router and promotion may", got)
	}
}

// assignersOf lists the engine's functions (tests aside, see engineFiles) that assign to a
// field named field.
func assignersOf(t *testing.T, field string) []string {
	t.Helper()
	var out []string
	for _, file := range engineFiles(t) {
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					for _, l := range n.Lhs {
						if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == field {
							out = append(out, fn.Name.Name)
						}
					}
				case *ast.KeyValueExpr:
					if id, ok := n.Key.(*ast.Ident); ok && id.Name == field {
						out = append(out, fn.Name.Name)
					}
				}
				return true
			})
		}
	}
	return out
}

// refusePrimaryWrites makes every create and update of the primary fail, as an exhausted
// quota does, until the returned function is called.
func refusePrimaryWrites(t *testing.T, cs interface {
	PrependReactor(verb, resource string, fn k8stesting.ReactionFunc)
}) (allow func()) {
	t.Helper()
	refusing := true
	for _, verb := range []string{"create", "update"} {
		cs.PrependReactor(verb, "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
			d, ok := a.(interface{ GetObject() runtime.Object }).GetObject().(*appsv1.Deployment)
			if refusing && ok && d.Name == "podinfo-primary" {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, d.Name, errors.New("exceeded quota"))
			}
			return false, nil, nil
		})
	}
	return func() { refusing = false }
}

func setImage(t *testing.T, e *Engine, name, image string) {
	t.Helper()
	ctx := context.Background()
	d, err := e.Kube.AppsV1().Deployments("test").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Spec.Containers[0].Image = image
	if _, err := e.Kube.AppsV1().Deployments("test").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Issue 20, item 3: the state ConfigMap and the primary are lost, the re-initialisation from
// the promoted template is interrupted, then the target changes. Neither the next apply nor a
// Create after terraform state rm may make the new, unanalysed template the primary.
func TestInterruptedReinitialisationNeverPromotesANewTemplate(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	e, cs, _, prior := setup(t, rel, nil, "podinfo:1") // the target stays on the promoted template
	ctx := context.Background()
	_ = cs.CoreV1().ConfigMaps("test").Delete(ctx, StateConfigMapName("podinfo"), metav1.DeleteOptions{})
	_ = cs.AppsV1().Deployments("test").Delete(ctx, "podinfo-primary", metav1.DeleteOptions{})
	allow := refusePrimaryWrites(t, cs)
	if _, err := e.Apply(ctx, rel, nil, prior); err == nil {
		t.Fatal("the re-initialisation went through although the primary could not be written")
	}
	if rec := recorded(t, e); rec.Phase != PhaseInitializing || rec.LastPromotedSpec != prior.LastPromotedSpec {
		t.Fatalf("record after the interrupted re-initialisation = %s, promoted %q; want Initializing from %q", rec.Phase, rec.LastPromotedSpec, prior.LastPromotedSpec)
	}
	allow()
	setImage(t, e, "podinfo", "podinfo:3")
	for name, run := range map[string]func() error{
		"apply":                 func() error { _, err := e.Apply(ctx, rel, nil, prior); return err },
		"create after state rm": func() error { _, err := e.Initialize(ctx, rel, nil); return err },
	} {
		err := run()
		var f *Failure
		if !errors.As(err, &f) || !strings.Contains(f.Reason, "never passed analysis") {
			t.Errorf("%s: error = %v, want a refusal that says the template never passed analysis", name, err)
		}
		if p, err := cs.AppsV1().Deployments("test").Get(ctx, "podinfo-primary", metav1.GetOptions{}); err == nil && p.Spec.Template.Spec.Containers[0].Image == "podinfo:3" {
			t.Fatalf("%s: the unanalysed podinfo:3 became the primary", name)
		}
	}
	// Back on the promoted template, the release is initialised again.
	setImage(t, e, "podinfo", "podinfo:1")
	if st, err := e.Apply(ctx, rel, nil, prior); err != nil || st.Phase != PhaseSucceeded && st.Phase != PhaseInitialized {
		t.Fatalf("apply on the promoted template = %s, %v", st.Phase, err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("primary runs %s, want podinfo:1", img)
	}
}

// A first initialisation is only one when nothing shows the release ran: generated Services
// left without state or primary refuse it.
func TestFirstInitialisationNeedsAClusterWithoutTheRelease(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	e, cs, _, _ := setup(t, rel, nil, "podinfo:2")
	ctx := context.Background()
	_ = cs.CoreV1().ConfigMaps("test").Delete(ctx, StateConfigMapName("podinfo"), metav1.DeleteOptions{})
	_ = cs.AppsV1().Deployments("test").Delete(ctx, "podinfo-primary", metav1.DeleteOptions{})
	_, err := e.Initialize(ctx, rel, nil)
	if err == nil || !strings.Contains(err.Error(), "its generated Services") {
		t.Fatalf("Initialize = %v, want a refusal naming the generated Services", err)
	}
	if _, err := cs.AppsV1().Deployments("test").Get(ctx, "podinfo-primary", metav1.GetOptions{}); err == nil {
		t.Error("a primary was created from the unanalysed podinfo:2")
	}
}

// Issue 20, item 5: a promotion that changes only a tracked ConfigMap rolls the primary's
// pods (its pod template changes), so env and envFrom values are the promoted ones.
func TestConfigOnlyPromotionRestartsThePrimary(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	cs := newCluster()
	_, _ = cs.CoreV1().ConfigMaps("test").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"MODE": "a"}}, metav1.CreateOptions{})
	d := podinfo("podinfo:1", 1)
	d.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := &Engine{Kube: cs, Router: &fakeRouter{}, HTTP: http.DefaultClient, DrainDelay: time.Millisecond}
	if _, err := e.Initialize(ctx, rel, nil); err != nil {
		t.Fatal(err)
	}
	before := deployment(t, cs, "podinfo-primary").Spec.Template
	cm, _ := cs.CoreV1().ConfigMaps("test").Get(ctx, "settings", metav1.GetOptions{})
	cm.Data["MODE"] = "b"
	_, _ = cs.CoreV1().ConfigMaps("test").Update(ctx, cm, metav1.UpdateOptions{})
	st, err := e.Apply(ctx, rel, nil, recorded(t, e))
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v", st.Phase, err)
	}
	after := deployment(t, cs, "podinfo-primary").Spec.Template
	if before.Annotations[AnnotationConfigRevision] == after.Annotations[AnnotationConfigRevision] {
		t.Fatalf("the primary's pod template kept config revision %q: its pods keep the old MODE", after.Annotations[AnnotationConfigRevision])
	}
	if after.Annotations[AnnotationConfigRevision] != st.LastPromotedSpec {
		t.Errorf("config revision %q, want the promoted revision %q", after.Annotations[AnnotationConfigRevision], st.LastPromotedSpec)
	}
	if copyData, _ := cs.CoreV1().ConfigMaps("test").Get(ctx, "settings-primary", metav1.GetOptions{}); copyData.Data["MODE"] != "b" {
		t.Errorf("settings-primary MODE = %q, want b", copyData.Data["MODE"])
	}
}

// An optional config missing at promotion and created later reaches the primary only through
// an analysis: the primary reads the release's copy, which does not exist either.
func TestAbsentOptionalConfigIsNotPickedUpByThePrimary(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	cs := newCluster()
	optional := true
	d := podinfo("podinfo:1", 1)
	d.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "extra"}, Optional: &optional}}}
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := &Engine{Kube: cs, Router: &fakeRouter{}, HTTP: http.DefaultClient, DrainDelay: time.Millisecond}
	if _, err := e.Initialize(ctx, rel, nil); err != nil {
		t.Fatal(err)
	}
	if got := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name; got != "extra-primary" {
		t.Errorf("the primary reads ConfigMap %q; want the release's copy extra-primary, so that creating extra changes nothing unanalysed", got)
	}
}

// Issue 20, item 4: with create_before_destroy the new instance takes the release over; the
// deposed instance's Delete then dismantles nothing.
func TestDeleteByAFormerOwnerDismantlesNothing(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	rel.Instance = "old"
	e, cs, _, _ := setup(t, rel, nil, "podinfo:1")
	successor := rel
	successor.Instance = "new"
	if _, err := e.Initialize(ctx, successor, nil); err != nil {
		t.Fatalf("the successor's Create: %v", err)
	}
	err := e.Delete(ctx, rel, true)
	var notOwner *NotOwnerError
	if !errors.As(err, &notOwner) || notOwner.Owner != "new" {
		t.Fatalf("Delete by the deposed instance = %v, want a NotOwnerError naming the successor", err)
	}
	deployment(t, cs, "podinfo-primary")
	if _, err := cs.CoreV1().ConfigMaps("test").Get(ctx, StateConfigMapName("podinfo"), metav1.GetOptions{}); err != nil {
		t.Errorf("the state ConfigMap is gone: %v", err)
	}
	if err := e.Delete(ctx, successor, true); err != nil {
		t.Fatalf("Delete by the owner: %v", err)
	}
	if _, err := cs.AppsV1().Deployments("test").Get(ctx, "podinfo-primary", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the owner's Delete left the primary: %v", err)
	}
}

// Issue 20, item 2: a canary that loses its Ready pods after its analysis passed loses its
// traffic; the promotion's steps give it no more.
func TestCanaryLostDuringPromotionGetsNoTraffic(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 25, MaxWeight: 50, StepWeightPromotion: 20})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	lost := false
	cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d, ok := a.(k8stesting.UpdateAction).GetObject().(*appsv1.Deployment)
		if ok && a.GetSubresource() == "" && d.Name == "podinfo-primary" && d.Spec.Template.Spec.Containers[0].Image == "podinfo:2" && !lost {
			lost = true
			obj, _ := cs.Tracker().Get(gvr, "test", "podinfo")
			canary := obj.(*appsv1.Deployment).DeepCopy()
			canary.Status.ReadyReplicas, canary.Status.AvailableReplicas = 0, 0
			_ = cs.Tracker().Update(gvr, canary, "test")
		}
		return false, nil, nil
	})
	var afterLoss []int
	rt.onSet = func(w router.Weights) {
		if lost {
			afterLoss = append(afterLoss, w.Canary)
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; the analysis had passed, so the promotion completes", st.Phase, err)
	}
	if !lost {
		t.Fatal("the promotion never updated the primary")
	}
	for _, w := range afterLoss {
		if w != 0 {
			t.Fatalf("after the canary lost its Ready pods it was given %d%% (writes %v)", w, afterLoss)
		}
	}
	if live, _ := rt.weights(); live.Canary != 0 {
		t.Errorf("live canary weight %d, want 0", live.Canary)
	}
}

// Issue 20, item 8: an event webhook that does not answer must not hold the rollback.
func TestSlowEventWebhookDoesNotHoldTheRollback(t *testing.T) {
	release := make(chan struct{})
	var blocking atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !blocking.Load() {
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	failing := querierFunc(func(context.Context, string) (float64, error) { return 50, nil })
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Metrics: []Metric{successRate(99)},
		Webhooks: []Webhook{{Name: "events", Type: HookEvent, URL: srv.URL, Timeout: time.Hour}}})
	e, _, rt, prior := setup(t, rel, failing, "podinfo:2")
	blocking.Store(true)
	back := make(chan struct{})
	shifted := false
	rt.onSet = func(w router.Weights) {
		if w.Canary > 0 {
			shifted = true
		} else if shifted {
			close(back)
			shifted = false
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.Apply(context.Background(), rel, nil, prior)
		done <- err
	}()
	select {
	case <-back:
	case err := <-done:
		t.Fatalf("Apply ended (%v) before traffic went back to the primary", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the rollback waited for the event webhook: traffic is still on the canary")
	}
}

// The state ConfigMap says which format wrote it; a newer one is refused, not misread.
func TestStateFormatFromANewerProviderIsRefused(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	e, cs, _, _ := setup(t, rel, nil, "podinfo:1")
	ctx := context.Background()
	cm, err := cs.CoreV1().ConfigMaps("test").Get(ctx, StateConfigMapName("podinfo"), metav1.GetOptions{})
	if err != nil || cm.Data[stateKeyFormat] != "4" {
		t.Fatalf("format = %q, %v; want 4", cm.Data[stateKeyFormat], err)
	}
	cm.Data[stateKeyFormat] = "3" // as version 3 wrote it
	_, _ = cs.CoreV1().ConfigMaps("test").Update(ctx, cm, metav1.UpdateOptions{})
	if _, ok, err := LoadState(ctx, e.Kube, "test", "podinfo"); !ok || err != nil {
		t.Fatalf("format 3: %v, %v", ok, err)
	}
	cm.Data[stateKeyFormat] = "2" // as version 2 wrote it
	_, _ = cs.CoreV1().ConfigMaps("test").Update(ctx, cm, metav1.UpdateOptions{})
	if _, ok, err := LoadState(ctx, e.Kube, "test", "podinfo"); !ok || err != nil {
		t.Fatalf("format 2: %v, %v", ok, err)
	}
	delete(cm.Data, stateKeyFormat) // as version 1 wrote it
	_, _ = cs.CoreV1().ConfigMaps("test").Update(ctx, cm, metav1.UpdateOptions{})
	if _, ok, err := LoadState(ctx, e.Kube, "test", "podinfo"); !ok || err != nil {
		t.Fatalf("format 1: %v, %v", ok, err)
	}
	cm.Data[stateKeyFormat] = "5"
	_, _ = cs.CoreV1().ConfigMaps("test").Update(ctx, cm, metav1.UpdateOptions{})
	if _, _, err := LoadState(ctx, e.Kube, "test", "podinfo"); err == nil || !strings.Contains(err.Error(), "upgrade the provider") {
		t.Fatalf("format 5: %v, want a refusal", err)
	}
}

// Issue 20, item 10: a primary edited behind the release is drift.
func TestEditedPrimaryIsDrift(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	e, _, _, prior := setup(t, rel, nil, "podinfo:1")
	ctx := context.Background()
	if drift, err := e.Drift(ctx, rel, prior); err != nil || len(drift) != 0 {
		t.Fatalf("drift before the edit = %v, %v", drift, err)
	}
	setImage(t, e, "podinfo-primary", "podinfo:hotfix")
	drift, err := e.Drift(ctx, rel, prior)
	if err != nil || !strings.Contains(strings.Join(drift, "\n"), "pod template was edited") {
		t.Fatalf("drift after kubectl set image on the primary = %v, %v", drift, err)
	}
}
