package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/configs"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// sharedSecretTarget creates Deployment name whose pods read the Secret "shared-token".
func sharedSecretTarget(t *testing.T, cs *fake.Clientset, name string) {
	t.Helper()
	d := podinfo("podinfo:1", 1)
	d.Name = name
	d.Spec.Selector.MatchLabels = map[string]string{"app": name}
	d.Spec.Template.Labels = map[string]string{"app": name}
	d.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "shared-token"}, Key: "token"}}}}
	if _, err := cs.AppsV1().Deployments("test").Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setSharedToken(t *testing.T, cs *fake.Clientset, value string) {
	t.Helper()
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shared-token", Namespace: "test"}, Data: map[string][]byte{"token": []byte(value)}}
	if _, err := cs.CoreV1().Secrets("test").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		if _, err := cs.CoreV1().Secrets("test").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func sharedCopy(t *testing.T, cs *fake.Clientset) *corev1.Secret {
	t.Helper()
	s, err := cs.CoreV1().Secrets("test").Get(context.Background(), "shared-token-primary", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return s
}

// Two releases whose Deployments read one Secret share its -primary copy, each recorded as an
// owner; neither may change what the other's primary reads, and the copy goes with the last.
func TestReleasesShareATrackedConfig(t *testing.T) {
	ctx := context.Background()
	cs := newCluster()
	setSharedToken(t, cs, "v1")
	sharedSecretTarget(t, cs, "podinfo")
	sharedSecretTarget(t, cs, "other")
	q := querierFunc(func(context.Context, string) (float64, error) { return 100, nil })
	relA := testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Metrics: []Metric{successRate(99)}})
	relB := relA
	relB.Name, relB.Target = "other", "other"
	a := &Engine{Kube: cs, Router: &fakeRouter{}, Metrics: q, DrainDelay: 1}
	b := &Engine{Kube: cs, Router: &fakeRouter{}, Metrics: q, DrainDelay: 1}

	stA, err := a.Initialize(ctx, relA, nil)
	if err != nil {
		t.Fatal(err)
	}
	stB, err := b.Initialize(ctx, relB, nil)
	if err != nil {
		t.Fatalf("the second release reading the same Secret: %v", err)
	}
	for _, name := range []string{"podinfo-primary", "other-primary"} {
		if ref := deployment(t, cs, name).Spec.Template.Spec.Containers[0].Env[0].ValueFrom.SecretKeyRef.Name; ref != "shared-token-primary" {
			t.Errorf("%s reads Secret %s, want the shared copy", name, ref)
		}
	}
	if got := sharedCopy(t, cs).Annotations[configs.AnnotationOwners]; got != "other,podinfo" {
		t.Errorf("the copy's owners are %q, want other,podinfo", got)
	}

	// The Secret changes: podinfo's analysis passes, and its promotion must not change what
	// other's primary reads. podinfo promotes into a copy of its own; the shared copy keeps v1
	// for other's primary until other's own analysis passes, and other then changes it, alone
	// in reading it. Before, both promotions were refused, each naming the other.
	setSharedToken(t, cs, "v2")
	stA, err = a.Apply(ctx, relA, nil, stA)
	if err != nil || stA.Phase != PhaseSucceeded {
		t.Fatalf("podinfo's promotion of the rotated Secret: %s, %v", stA.Phase, err)
	}
	if got := string(sharedCopy(t, cs).Data["token"]); got != "v1" {
		t.Errorf("the shared copy holds %q, want v1: other's primary now reads contents it never analysed", got)
	}
	readsOf := func(name string) string {
		return deployment(t, cs, name).Spec.Template.Spec.Containers[0].Env[0].ValueFrom.SecretKeyRef.Name
	}
	own, err := cs.CoreV1().Secrets("test").Get(ctx, "shared-token-primary-podinfo", metav1.GetOptions{})
	if err != nil || string(own.Data["token"]) != "v2" || readsOf("podinfo-primary") != own.Name {
		t.Fatalf("podinfo's primary reads %s, want its own copy shared-token-primary-podinfo holding v2 (%v)", readsOf("podinfo-primary"), err)
	}
	if got := sharedCopy(t, cs).Annotations[configs.AnnotationOwners]; got != "other" {
		t.Errorf("after podinfo moved to its own copy the shared copy's owners are %q, want other", got)
	}
	if stB, err = b.Apply(ctx, relB, nil, stB); err != nil || stB.Phase != PhaseSucceeded {
		t.Fatalf("other's promotion of the rotated Secret: %s, %v", stB.Phase, err)
	}
	if got := string(sharedCopy(t, cs).Data["token"]); got != "v2" || readsOf("other-primary") != "shared-token-primary" {
		t.Errorf("other's primary reads %s holding %q, want the shared copy holding v2", readsOf("other-primary"), got)
	}

	// Back to one contents: the next promotion of podinfo joins the shared copy again, and its
	// own copy goes.
	setSharedToken(t, cs, "v3")
	for _, step := range []struct {
		e   *Engine
		rel Release
		st  *Status
	}{{b, relB, &stB}, {a, relA, &stA}} {
		if *step.st, err = step.e.Apply(ctx, step.rel, nil, *step.st); err != nil || step.st.Phase != PhaseSucceeded {
			t.Fatalf("%s's promotion of v3: %s, %v", step.rel.Name, step.st.Phase, err)
		}
	}
	if readsOf("podinfo-primary") != "shared-token-primary" || readsOf("other-primary") != "shared-token-primary" {
		t.Errorf("with one contents again the primaries read %s and %s, want the shared copy", readsOf("podinfo-primary"), readsOf("other-primary"))
	}
	if _, err := cs.CoreV1().Secrets("test").Get(ctx, "shared-token-primary-podinfo", metav1.GetOptions{}); err == nil {
		t.Error("podinfo's own copy outlived its primary's move back to the shared one")
	}

	// Destroying one owner keeps the copy for the other; the last one takes it away.
	if err := a.Delete(ctx, relA, true); err != nil {
		t.Fatal(err)
	}
	kept := sharedCopy(t, cs)
	if kept == nil {
		t.Fatal("destroying one release deleted the copy the other's primary reads")
	}
	if got := kept.Annotations[configs.AnnotationOwners]; got != "other" {
		t.Errorf("after podinfo's destroy the copy's owners are %q, want other", got)
	}
	if err := b.Delete(ctx, relB, true); err != nil {
		t.Fatal(err)
	}
	if sharedCopy(t, cs) != nil {
		t.Error("the copy outlived its last owner")
	}
}

// A user's own "<name>-primary" object is neither shared nor taken over.
func TestUsersOwnCopyIsNotShared(t *testing.T) {
	ctx := context.Background()
	cs := newCluster()
	setSharedToken(t, cs, "v1")
	sharedSecretTarget(t, cs, "podinfo")
	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shared-token-primary", Namespace: "test"}, Data: map[string][]byte{"token": []byte("v1")}}
	if _, err := cs.CoreV1().Secrets("test").Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := &Engine{Kube: cs, Router: &fakeRouter{}, DrainDelay: 1}
	_, err := e.Initialize(ctx, testRelease(Analysis{StepWeight: 50}), nil)
	if err == nil || !strings.Contains(err.Error(), "not managed by canary_release") {
		t.Errorf("initialising over the user's own copy: %v", err)
	}
	if s := sharedCopy(t, cs); s == nil || len(s.Labels) != 0 {
		t.Errorf("the user's own copy was changed: %v", s)
	}
}

// sharedPair initialises podinfo and other, whose Deployments read the Secret shared-token.
func sharedPair(t *testing.T) (cs *fake.Clientset, a, b *Engine, relA, relB Release, stA, stB Status) {
	t.Helper()
	ctx := context.Background()
	cs = newCluster()
	setSharedToken(t, cs, "v1")
	sharedSecretTarget(t, cs, "podinfo")
	sharedSecretTarget(t, cs, "other")
	q := querierFunc(func(context.Context, string) (float64, error) { return 100, nil })
	relA = testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Metrics: []Metric{successRate(99)}})
	relB = relA
	relB.Name, relB.Target = "other", "other"
	a = &Engine{Kube: cs, Router: &fakeRouter{}, Metrics: q, DrainDelay: 1}
	b = &Engine{Kube: cs, Router: &fakeRouter{}, Metrics: q, DrainDelay: 1}
	var err error
	if stA, err = a.Initialize(ctx, relA, nil); err != nil {
		t.Fatal(err)
	}
	if stB, err = b.Initialize(ctx, relB, nil); err != nil {
		t.Fatal(err)
	}
	return
}

// A Delete by an instance that no longer owns its release leaves the shared copy's owners as
// they are.
func TestDeleteByAFormerOwnerKeepsTheSharedCopy(t *testing.T) {
	ctx := context.Background()
	cs := newCluster()
	setSharedToken(t, cs, "v1")
	sharedSecretTarget(t, cs, "podinfo")
	sharedSecretTarget(t, cs, "other")
	rel := testRelease(Analysis{StepWeight: 50})
	rel.Instance = "old"
	other := rel
	other.Name, other.Target, other.Instance = "other", "other", "o"
	e := &Engine{Kube: cs, Router: &fakeRouter{}, DrainDelay: 1}
	for _, r := range []Release{rel, other} {
		if _, err := e.Initialize(ctx, r, nil); err != nil {
			t.Fatal(err)
		}
	}
	successor := rel
	successor.Instance = "new"
	if _, err := e.Initialize(ctx, successor, nil); err != nil {
		t.Fatalf("the successor's Create: %v", err)
	}
	var notOwner *NotOwnerError
	if err := e.Delete(ctx, rel, true); !errors.As(err, &notOwner) {
		t.Fatalf("Delete by the deposed instance = %v, want a NotOwnerError", err)
	}
	if got := sharedCopy(t, cs).Annotations[configs.AnnotationOwners]; got != "other,podinfo" {
		t.Errorf("after the deposed instance's Delete the copy's owners are %q, want other,podinfo", got)
	}
}

// A release whose promoted template no longer reads a shared config leaves its owners, so the
// release that still reads it may change it.
func TestPromotionAwayFromASharedConfigLeavesIt(t *testing.T) {
	ctx := context.Background()
	cs, a, b, relA, relB, stA, stB := sharedPair(t)
	target := deployment(t, cs, "podinfo")
	target.Spec.Template.Spec.Containers[0].Env = nil
	target.Spec.Template.Spec.Containers[0].Image = "podinfo:2"
	if _, err := cs.AppsV1().Deployments("test").Update(ctx, target, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(ctx, relA, nil, stA); err != nil {
		t.Fatal(err)
	}
	if got := sharedCopy(t, cs).Annotations[configs.AnnotationOwners]; got != "other" {
		t.Errorf("after podinfo stopped reading it the copy's owners are %q, want other", got)
	}
	setSharedToken(t, cs, "v2")
	if _, err := b.Apply(ctx, relB, nil, stB); err != nil {
		t.Fatalf("the copy's only reader could not release a change of it: %v", err)
	}
	if got := string(sharedCopy(t, cs).Data["token"]); got != "v2" {
		t.Errorf("the copy holds %q, want the promoted v2", got)
	}
}
