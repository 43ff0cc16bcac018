package kubernetes

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

const ns = "shop"

func TestCanaryReplicas(t *testing.T) {
	for _, c := range []struct {
		primary int32
		weight  int
		want    int32
	}{{4, 0, 0}, {4, 10, 1}, {4, 50, 4}, {2, 20, 1}, {10, 25, 3}, {3, 60, 4}, {5, 100, 5}, {9, 10, 1}, {18, 10, 2}, {13, 13, 1}} {
		if got := CanaryReplicas(c.primary, c.weight); got != c.want {
			t.Errorf("CanaryReplicas(%d, %d) = %d, want %d", c.primary, c.weight, got, c.want)
		}
		// Rounded down: the canary's share exceeds its step only by the one pod it needs.
		if got := EffectivePercent(c.primary, CanaryReplicas(c.primary, c.weight)); c.want > 1 && got > c.weight {
			t.Errorf("%d canary pods beside %d are %d%%, above the step's %d%%", c.want, c.primary, got, c.weight)
		}
	}
	for _, c := range []struct {
		primary, canary int32
		want            int
	}{{4, 1, 20}, {3, 4, 57}, {300, 1, 1}, {1, 300, 99}, {4, 0, 0}, {0, 2, 100}} {
		if got := EffectivePercent(c.primary, c.canary); got != c.want {
			t.Errorf("EffectivePercent(%d, %d) = %d, want %d", c.primary, c.canary, got, c.want)
		}
	}
}

func deployment(name, app string, replicas, ready int32, apexLabel bool) *appsv1.Deployment {
	labels := map[string]string{"app": app}
	if apexLabel {
		labels[router.LabelApex] = "web"
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}},
		},
		Status: appsv1.DeploymentStatus{ReadyReplicas: ready, UpdatedReplicas: ready, Replicas: ready},
	}
}

func service(name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.ServiceSpec{Selector: selector}}
}

func slice(service string, ready map[string]bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: service + "-x", Namespace: ns,
		Labels: map[string]string{discoveryv1.LabelServiceName: service}}}
	for a, r := range ready {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: &r}})
	}
	return s
}

func newTestRouter(objs ...runtime.Object) (*kubernetesRouter, *fake.Clientset) {
	kube := fake.NewClientset(objs...)
	r := Driver{}.NewRouter(router.Clients{Kube: kube}, router.Spec{Namespace: ns, Name: "web", Target: "web", Apex: "web"})
	return r.(*kubernetesRouter), kube
}

func apexSelector(t *testing.T, kube *fake.Clientset) map[string]string {
	t.Helper()
	svc, err := kube.CoreV1().Services(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc.Spec.Selector
}

var primarySelector = map[string]string{"app": "web-primary"}

func services() []runtime.Object {
	return []runtime.Object{
		service("web", primarySelector), service("web-primary", primarySelector), service("web-canary", map[string]string{"app": "web"}),
	}
}

// waitCanaryScaledToOne returns once SetRoutes has scaled the canary to 1 replica (20% beside
// 4), and a few of its readiness polls have passed since.
func waitCanaryScaledToOne(ctx context.Context, t *testing.T, kube *fake.Clientset) {
	t.Helper()
	for {
		canary, err := kube.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *canary.Spec.Replicas == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the canary was not scaled to 1 replica (20%% beside 4): it has %d", *canary.Spec.Replicas)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(5 * readyPoll)
}

// A partial split scales the canary to its share of the primary's Ready pods, and the apex
// selects both sides only once that many canary pods are Ready.
func TestSetRoutesByReplicaRatio(t *testing.T) {
	readyPoll = 10 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, kube := newTestRouter(append(services(),
		deployment("web-primary", "web-primary", 4, 4, true), deployment("web", "web", 0, 0, true))...)

	done := make(chan error, 1)
	go func() { done <- r.SetRoutes(ctx, router.Weights{Primary: 80, Canary: 20}) }()

	deployments := kube.AppsV1().Deployments(ns)
	waitCanaryScaledToOne(ctx, t, kube)
	if got := apexSelector(t, kube); !maps.Equal(got, primarySelector) {
		t.Fatalf("the apex selects %v before the canary has a Ready pod; want the primary only", got)
	}
	canary, _ := deployments.Get(ctx, "web", metav1.GetOptions{})
	canary.Status.ReadyReplicas, canary.Status.UpdatedReplicas = 1, 1
	if _, err := deployments.UpdateStatus(ctx, canary, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("SetRoutes: %v", err)
	}
	if got, want := apexSelector(t, kube), map[string]string{router.LabelApex: "web"}; !maps.Equal(got, want) {
		t.Fatalf("the apex selects %v, want %v", got, want)
	}
	// What the engine records: the pods' share, 1 of 5.
	if got := r.Written(router.Weights{Primary: 80, Canary: 20}); got.Primary != 80 || got.Canary != 20 {
		t.Fatalf("Written = %s, want 80/20", router.SplitText(got))
	}

	// The weight read back is the canary's share of the apex's Ready endpoints.
	for _, s := range []*discoveryv1.EndpointSlice{
		slice("web", map[string]bool{"10.0.0.1": true, "10.0.0.2": true, "10.0.0.3": true, "10.0.0.4": true, "10.0.0.5": true, "10.0.0.6": false}),
		slice("web-canary", map[string]bool{"10.0.0.5": true, "10.0.0.6": false}),
	} {
		if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.GetRoutes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Primary != 80 || got.Canary != 20 {
		t.Fatalf("GetRoutes = %s, want 80/20 (1 of 5 Ready endpoints is the canary's)", router.SplitText(got))
	}

	// A step of 10% still needs a whole pod: 1 of 5 is 20%, and that is the split written.
	if err := r.SetRoutes(ctx, router.Weights{Primary: 90, Canary: 10}); err != nil {
		t.Fatal(err)
	}
	if got := r.Written(router.Weights{Primary: 90, Canary: 10}); got.Canary != 20 {
		t.Fatalf("Written after asking 10%% = %s, want 80/20 (one pod beside 4)", router.SplitText(got))
	}

	// Weight 0 selects the primary only again.
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	if got := r.Written(router.Weights{Primary: 100}); got.Canary != 0 {
		t.Fatalf("Written after weight 0 = %s", router.SplitText(got))
	}
	if got := apexSelector(t, kube); !maps.Equal(got, primarySelector) {
		t.Fatalf("at weight 0 the apex selects %v, want the primary only", got)
	}
}

// A canary at full size (its analysis) scaled down to its step's pods keeps its earlier pods
// until the ReplicaSet removes them, Ready all the while: the apex selects both sides only once
// they are gone (the clean-clone run 13 saw the apex select 4 Ready canary pods at a 20% step).
func TestSetRoutesWaitsForAScaledDownCanary(t *testing.T) {
	readyPoll = 10 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, kube := newTestRouter(append(services(),
		deployment("web-primary", "web-primary", 4, 4, true), deployment("web", "web", 4, 4, true))...)
	done := make(chan error, 1)
	go func() { done <- r.SetRoutes(ctx, router.Weights{Primary: 80, Canary: 20}) }()

	deployments := kube.AppsV1().Deployments(ns)
	waitCanaryScaledToOne(ctx, t, kube)
	if got := apexSelector(t, kube); !maps.Equal(got, primarySelector) {
		t.Fatalf("the apex selects %v while the canary still has 4 Ready pods at a 20%% step; want the primary only", got)
	}
	canary, _ := deployments.Get(ctx, "web", metav1.GetOptions{})
	canary.Status.ReadyReplicas, canary.Status.UpdatedReplicas, canary.Status.Replicas = 1, 1, 1
	if _, err := deployments.UpdateStatus(ctx, canary, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("SetRoutes: %v", err)
	}
	if got, want := apexSelector(t, kube), map[string]string{router.LabelApex: "web"}; !maps.Equal(got, want) {
		t.Fatalf("the apex selects %v, want %v", got, want)
	}
}

// Pods without the shared label would leave the apex without endpoints: the split is refused
// and the apex keeps selecting the primary.
func TestSetRoutesRefusesUnlabelledPods(t *testing.T) {
	r, kube := newTestRouter(append(services(),
		deployment("web-primary", "web-primary", 4, 4, true), deployment("web", "web", 1, 1, false))...)
	err := r.SetRoutes(context.Background(), router.Weights{Primary: 80, Canary: 20})
	if err == nil || !strings.Contains(err.Error(), "lack the label "+router.LabelApex) {
		t.Fatalf("SetRoutes = %v, want a refusal naming the missing label", err)
	}
	if got := apexSelector(t, kube); !maps.Equal(got, primarySelector) {
		t.Fatalf("the apex selects %v after a refused split, want the primary only", got)
	}
}

// A canary that is not Ready within the spec's ReadyDeadline fails the split, which leaves the
// apex on the primary: the wait is bounded by progress_deadline_seconds, not the apply.
func TestSetRoutesRatioWaitIsBounded(t *testing.T) {
	readyPoll = 10 * time.Millisecond
	kube := fake.NewClientset(append(services(),
		deployment("web-primary", "web-primary", 4, 4, true), deployment("web", "web", 0, 0, true))...)
	r := Driver{}.NewRouter(router.Clients{Kube: kube}, router.Spec{Namespace: ns, Name: "web", Target: "web", Apex: "web", ReadyDeadline: 50 * time.Millisecond})
	err := r.SetRoutes(context.Background(), router.Weights{Primary: 80, Canary: 20})
	if err == nil || !strings.Contains(err.Error(), "not Ready within progress_deadline_seconds") {
		t.Fatalf("SetRoutes = %v, want the readiness deadline", err)
	}
	if got := apexSelector(t, kube); !maps.Equal(got, primarySelector) {
		t.Fatalf("the apex selects %v after the deadline, want the primary only", got)
	}
}

// A primary still rolling out may have Ready pods of its old template, without the label: the
// split is refused rather than leave the primary's share to the canary.
func TestSetRoutesRefusesAPrimaryMidRollout(t *testing.T) {
	primary := deployment("web-primary", "web-primary", 4, 4, true)
	primary.Status.UpdatedReplicas, primary.Status.Replicas = 1, 5
	r, kube := newTestRouter(append(services(), primary, deployment("web", "web", 1, 1, true))...)
	err := r.SetRoutes(context.Background(), router.Weights{Primary: 80, Canary: 20})
	if err == nil || !strings.Contains(err.Error(), "is rolling out (1 of 4 pods updated)") {
		t.Fatalf("SetRoutes = %v, want a refusal naming the primary's rollout", err)
	}
	if got := apexSelector(t, kube); !maps.Equal(got, primarySelector) {
		t.Fatalf("the apex selects %v after a refused split, want the primary only", got)
	}
}

// A primary without Ready pods has no share to keep beside the canary: the split is refused,
// naming the primary Deployment, and the apex keeps what it selected.
func TestSetRoutesRefusesAPrimaryWithoutReadyPods(t *testing.T) {
	r, kube := newTestRouter(append(services(),
		deployment("web-primary", "web-primary", 4, 0, true), deployment("web", "web", 1, 1, true))...)
	err := r.SetRoutes(context.Background(), router.Weights{Primary: 80, Canary: 20})
	if err == nil || !strings.Contains(err.Error(), "the primary Deployment shop/web-primary has no Ready pods") {
		t.Fatalf("SetRoutes = %v, want a refusal naming the primary Deployment without Ready pods", err)
	}
	if got := apexSelector(t, kube); !maps.Equal(got, primarySelector) {
		t.Fatalf("the apex selects %v after a refused split, want what it selected before", got)
	}
}

// An apex that selects both sides while neither has a Ready pod (a primary deleted, a canary
// scaled to zero) gives the canary nothing: the recovery that reads it has no traffic to move
// and can go on. Before, reading it failed, and every later apply failed on the read (the
// campaign's seeds 1000890 and 1002338 never converged).
func TestRatioWithoutReadyEndpointsGivesTheCanaryNothing(t *testing.T) {
	both := map[string]string{router.LabelApex: "web"}
	r, _ := newTestRouter(
		service("web", both), service("web-primary", map[string]string{"app": "web-primary"}), service("web-canary", map[string]string{"app": "web"}),
		slice("web", map[string]bool{"10.0.0.1": false}), slice("web-canary", map[string]bool{"10.0.0.1": false}),
	)
	w, err := r.GetRoutes(context.Background())
	if err != nil || w.Canary != 0 {
		t.Errorf("GetRoutes = %+v, %v; want the canary at 0%%", w, err)
	}
}
