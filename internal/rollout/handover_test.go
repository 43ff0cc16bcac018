package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/kubernetes"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Issue 20, N9: the owner survives the loss of the state ConfigMap. A replacement took the
// release over, then the ConfigMap was deleted: the deposed instance's Delete still finds the
// successor's claim (on the primary and the apex Service) and dismantles nothing.
func TestDeleteByAFormerOwnerDismantlesNothingWithoutTheStateConfigMap(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	rel.Instance = "old"
	e, cs, _, _ := setup(t, rel, nil, "podinfo:1")
	successor := rel
	successor.Instance = "new"
	if _, err := e.Initialize(ctx, successor, nil); err != nil {
		t.Fatalf("the successor's Create: %v", err)
	}
	if err := cs.CoreV1().ConfigMaps("test").Delete(ctx, StateConfigMapName("podinfo"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := e.Delete(ctx, rel, true)
	var notOwner *NotOwnerError
	if !errors.As(err, &notOwner) || notOwner.Owner != "new" {
		t.Fatalf("Delete by the deposed instance = %v, want a NotOwnerError naming the successor", err)
	}
	if got := deployment(t, cs, "podinfo-primary").Annotations[AnnotationOwner]; got != "new" {
		t.Errorf("the primary names owner %q, want the successor", got)
	}
	for _, name := range []string{"podinfo", "podinfo-primary", "podinfo-canary"} {
		svc := service(t, cs, name)
		if name == "podinfo" && svc.Spec.Selector["app"] != "podinfo-primary" {
			t.Errorf("the deposed Delete pointed the apex at %v", svc.Spec.Selector)
		}
	}
	if err := e.Delete(ctx, successor, true); err != nil {
		t.Fatalf("Delete by the owner: %v", err)
	}
	if _, err := cs.AppsV1().Deployments("test").Get(ctx, "podinfo-primary", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the owner's Delete left the primary: %v", err)
	}
}

// A former owner that takes the release back (its next apply) is the owner again everywhere.
func TestAnApplyClaimsTheReleaseBack(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	rel.Instance = "old"
	e, cs, _, prior := setup(t, rel, nil, "podinfo:1")
	successor := rel
	successor.Instance = "new"
	if _, err := e.Initialize(ctx, successor, nil); err != nil {
		t.Fatalf("the successor's Create: %v", err)
	}
	if _, err := e.Apply(ctx, rel, nil, prior); err != nil {
		t.Fatalf("the former owner's apply: %v", err)
	}
	if got := deployment(t, cs, "podinfo-primary").Annotations[AnnotationOwner]; got != "old" {
		t.Errorf("the primary names owner %q, want old", got)
	}
	if got := service(t, cs, "podinfo").Annotations[AnnotationOwner]; got != "old" {
		t.Errorf("the apex names owner %q, want old", got)
	}
	err := e.Delete(ctx, successor, true)
	var notOwner *NotOwnerError
	if !errors.As(err, &notOwner) || notOwner.Owner != "old" {
		t.Fatalf("Delete by the instance the release was taken back from = %v, want a NotOwnerError", err)
	}
}

func service(t *testing.T, cs *fake.Clientset, name string) *corev1.Service {
	t.Helper()
	s, err := cs.CoreV1().Services("test").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// failPrimaryDeletion makes the delete of the primary Deployment fail, as an API server that
// times out does, while *failing holds.
func failPrimaryDeletion(cs *fake.Clientset, failing *bool) {
	cs.PrependReactor("delete", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if *failing && a.(k8stesting.DeleteAction).GetName() == "podinfo-primary" {
			return true, nil, apierrors.NewTimeoutError("simulated", 1)
		}
		return false, nil, nil
	})
}

// setPrimaryReady gives the primary Ready pods, or takes them.
func setPrimaryReady(t *testing.T, cs *fake.Clientset, ready bool) {
	t.Helper()
	d := deployment(t, cs, "podinfo-primary")
	n := int32(0)
	if ready {
		n = *d.Spec.Replicas
	}
	d.Status.ReadyReplicas, d.Status.AvailableReplicas, d.Status.UpdatedReplicas = n, n, n
	d.Status.ObservedGeneration = d.Generation
	if err := cs.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), d, "test"); err != nil {
		t.Fatal(err)
	}
}

// Issue 20, N5: a revert destroy that stopped after it pointed the apex at the target leaves
// the apex serving the target. The next apply points it back at the primary only once the
// primary has Ready pods; until then the target keeps serving.
func TestApexHandedOverByAStoppedDestroyComesBackOnlyToAServingPrimary(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	rel.Instance = "a"
	rel.ProgressDeadline = 300 * time.Millisecond
	e, cs, _, prior := setup(t, rel, nil, "podinfo:1")
	failing := true
	failPrimaryDeletion(cs, &failing)
	if err := e.Delete(ctx, rel, true); err == nil {
		t.Fatal("Delete went through the failing delete of the primary")
	}
	apex := service(t, cs, "podinfo")
	if apex.Spec.Selector["app"] != "podinfo" || apex.Annotations[AnnotationHandedOver] != "podinfo" {
		t.Fatalf("after the stopped destroy the apex selects %v, annotations %v; want the target's pods, marked", apex.Spec.Selector, apex.Annotations)
	}
	setPrimaryReady(t, cs, false)
	_, err := e.Apply(ctx, rel, nil, prior)
	if err == nil || !errors.Is(err, ErrProgressDeadline) {
		t.Fatalf("Apply with a primary that never gets Ready = %v, want the progress deadline", err)
	}
	if got := service(t, cs, "podinfo").Spec.Selector["app"]; got != "podinfo" {
		t.Fatalf("the apex selects app=%s while the primary has no Ready pods; want the target's pods", got)
	}
	if r := *deployment(t, cs, "podinfo").Spec.Replicas; r == 0 {
		t.Fatal("the target, which serves the apex, was scaled to 0")
	}
	setPrimaryReady(t, cs, true)
	st, err := e.Apply(ctx, rel, nil, prior)
	if err != nil {
		t.Fatalf("Apply once the primary serves: %v", err)
	}
	apex = service(t, cs, "podinfo")
	if apex.Spec.Selector["app"] != "podinfo-primary" || apex.Annotations[AnnotationHandedOver] != "" {
		t.Errorf("after the apply the apex selects %v, annotations %v; want the primary, unmarked", apex.Spec.Selector, apex.Annotations)
	}
	service(t, cs, "podinfo-primary")
	service(t, cs, "podinfo-canary")
	if st.Phase == PhaseFailed || st.CanaryWeight != 0 {
		t.Errorf("status after taking the route back = %+v", st)
	}
	failing = false
	if err := e.Delete(ctx, rel, true); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got := service(t, cs, "podinfo").Spec.Selector["app"]; got != "podinfo" {
		t.Errorf("after the destroy the apex selects app=%s, want the target's pods", got)
	}
}

// kubernetesRelease is a release on the kubernetes router, whose route is the apex's selector.
func kubernetesRelease(t *testing.T) (*Engine, *fake.Clientset, Release, Status) {
	t.Helper()
	ctx := context.Background()
	rel := testRelease(Analysis{Iterations: 1})
	rel.Provider, rel.Instance = "kubernetes", "a"
	rel.Service.SelectorRouted = true
	cs := newCluster()
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, podinfo("podinfo:1", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt := kubernetes.Driver{}.NewRouter(router.Clients{Kube: cs}, router.Spec{Namespace: "test", Name: "podinfo", Target: "podinfo", Apex: "podinfo", Port: 9898})
	e := &Engine{Kube: cs, Router: rt, DrainDelay: time.Millisecond}
	st, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	return e, cs, rel, st
}

// Issue 20, N7: a destroy that stopped after it pointed the apex at the target and deleted the
// -primary and -canary Services left nothing to read the weights from. The next apply takes the
// route back; the next destroy finishes.
func TestStoppedDestroyDoesNotWedgeTheRelease(t *testing.T) {
	ctx := context.Background()
	t.Run("apply", func(t *testing.T) {
		e, cs, rel, prior := kubernetesRelease(t)
		failing := true
		failPrimaryDeletion(cs, &failing)
		if err := e.Delete(ctx, rel, true); err == nil {
			t.Fatal("Delete went through the failing delete of the primary")
		}
		if _, err := cs.CoreV1().Services("test").Get(ctx, "podinfo-canary", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the stopped destroy left podinfo-canary: %v", err)
		}
		st, err := e.Apply(ctx, rel, nil, prior)
		if err != nil {
			t.Fatalf("Apply after the stopped destroy: %v", err)
		}
		if got := service(t, cs, "podinfo").Spec.Selector["app"]; got != "podinfo-primary" {
			t.Errorf("after the apply the apex selects app=%s, want podinfo-primary", got)
		}
		if st.Phase != PhaseSucceeded && st.Phase != PhaseInitialized {
			t.Errorf("phase after the apply = %s (%s)", st.Phase, st.Message)
		}
		if w, err := e.Router.GetRoutes(ctx); err != nil || w != (router.Weights{Primary: 100}) {
			t.Errorf("live weights after the apply = %+v, %v", w, err)
		}
		failing = false
		if err := e.Delete(ctx, rel, true); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	})
	t.Run("destroy", func(t *testing.T) {
		e, cs, rel, _ := kubernetesRelease(t)
		failing := true
		failPrimaryDeletion(cs, &failing)
		if err := e.Delete(ctx, rel, true); err == nil {
			t.Fatal("Delete went through the failing delete of the primary")
		}
		failing = false
		if err := e.Delete(ctx, rel, true); err != nil {
			t.Fatalf("the second Delete: %v", err)
		}
		if _, err := cs.AppsV1().Deployments("test").Get(ctx, "podinfo-primary", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the destroy left the primary: %v", err)
		}
		if _, ok, _ := LoadState(ctx, cs, "test", "podinfo"); ok {
			t.Error("the destroy left the state ConfigMap")
		}
		apex := service(t, cs, "podinfo")
		if apex.Spec.Selector["app"] != "podinfo" || !strings.Contains(apex.Annotations[AnnotationHandedOver], "podinfo") {
			t.Errorf("after the destroy the apex selects %v, annotations %v", apex.Spec.Selector, apex.Annotations)
		}
	})
}
