package provider

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

// testAccProtoV6ProviderFactories runs the provider in the test process; the real Terraform
// CLI talks to it. It reaches the local stack through KUBE_CONFIG_PATH and
// CANARY_PROMETHEUS_ADDRESS, set by testStack.
var testAccProtoV6ProviderFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"canary": providerserver.NewProtocol6WithError(New("test")()),
}

var (
	stackOnce sync.Once
	stackEnv  *localstack.Env
	stackErr  error
)

// testStack attaches to the local stack (starting it when none runs) once per test binary.
type testCluster struct {
	env  *localstack.Env
	kube kubernetes.Interface
	dyn  dynamic.Interface
	prom *metrics.Client
}

func testAccStack(t *testing.T) *testCluster {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance tests need TF_ACC=1 (make test sets it)")
	}
	stackOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		stackEnv, stackErr = localstack.Ensure(ctx)
		if stackErr == nil {
			env := map[string]string{"KUBE_CONFIG_PATH": stackEnv.Kubeconfig, "CANARY_PROMETHEUS_ADDRESS": stackEnv.PrometheusURL}
			if cli := os.Getenv("TF_ACC_TERRAFORM_PATH"); cli != "" {
				// The tests that run the CLI themselves use the same one (make testacc-tofu).
				stackEnv.TerraformPath = cli
			} else {
				env["TF_ACC_TERRAFORM_PATH"] = stackEnv.TerraformPath
			}
			if os.Getenv("TF_ACC_PROVIDER_NAMESPACE") == "" {
				env["TF_ACC_PROVIDER_NAMESPACE"] = "canary-release"
			}
			// The providers the tests run would print every test's progress to the terminal
			// make testacc runs in; TestAccRelease_terminalProgress turns it on for its own.
			env[envTerminalProgress] = "false"
			for k, v := range env {
				// Process-wide and once, for every test of the package: t.Setenv would undo it
				// when the first test ends, and forbids parallel tests.
				os.Setenv(k, v) //nolint:usetesting
			}
		}
	})
	if stackErr != nil {
		t.Fatalf("local stack: %v", stackErr)
	}
	kube, dyn, err := stackEnv.Clients()
	if err != nil {
		t.Fatal(err)
	}
	prom, err := metrics.NewClient(metrics.Config{Address: stackEnv.PrometheusURL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &testCluster{env: stackEnv, kube: kube, dyn: dyn, prom: prom}
}

// namespace creates a namespace for one test. On cleanup it checks the simulator's invariant
// log: no moment with weights not summing to 100 and no traffic sent to a side without Ready pods.
func (c *testCluster) namespace(t *testing.T) string {
	t.Helper()
	return c.namespaceNamed(t, "t")
}

// namespaceNamed is namespace with a prefix of the test's choosing, for what the stack keys on
// a namespace's name (chartlabels-: the charts' pod labels on the application's series).
func (c *testCluster) namespaceNamed(t *testing.T, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s%d", prefix, rand.IntN(1_000_000_000))
	ctx := context.Background()
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !c.violationsSkipped(ns) {
			c.assertNoViolations(t, ns)
		}
		_ = c.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	return ns
}

func (c *testCluster) assertNoViolations(t *testing.T, ns string) {
	t.Helper()
	violations, err := c.env.InvariantViolations(context.Background(), ns)
	if err != nil {
		t.Errorf("reading the simulator's invariant log: %v", err)
	} else if len(violations) > 0 {
		t.Errorf("the simulator saw %d invariant violations in %s, first: %s", len(violations), ns, violations[0])
	}
}

// skipped lists namespaces whose test breaks the invariants on purpose, after checking them.
var skipped sync.Map

func (c *testCluster) skipViolationCheck(ns string) { skipped.Store(ns, true) }

func (c *testCluster) violationsSkipped(ns string) bool { _, ok := skipped.Load(ns); return ok }

// podinfo is the target Deployment of the target_ref tests, as in Flagger's e2e tests.
func podinfoDeployment(ns, image string, annotations map[string]string) *appsv1.Deployment {
	replicas := int32(2)
	labels := map[string]string{"app": "podinfo"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "podinfo", Image: image, Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9898}},
				}}},
			},
		},
	}
}

func (c *testCluster) createDeployment(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	if _, err := c.kube.AppsV1().Deployments(d.Namespace).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// setTemplate changes the target's image and pod annotations, as `kubectl set image` would.
func (c *testCluster) setTemplate(t *testing.T, ns, name, image string, annotations map[string]string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := c.kube.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Image = image
		d.Spec.Template.Annotations = annotations
		_, err = c.kube.AppsV1().Deployments(ns).Update(context.Background(), d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (c *testCluster) deployment(ns, name string) (*appsv1.Deployment, error) {
	return c.kube.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
}

var trafficSplits = schema.GroupVersionResource{Group: "split.smi-spec.io", Version: "v1alpha2", Resource: "trafficsplits"}

// splitWeights reads the TrafficSplit's primary and canary weights.
func (c *testCluster) splitWeights(ns, name string) (primary, canary int64, err error) {
	u, err := c.dyn.Resource(trafficSplits).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	return backendWeights(u, name)
}

func backendWeights(u *unstructured.Unstructured, apex string) (primary, canary int64, err error) {
	backends, _, _ := unstructured.NestedSlice(u.Object, "spec", "backends")
	found := 0
	for _, b := range backends {
		m, _ := b.(map[string]any)
		w, ok := m["weight"].(int64)
		if !ok {
			return 0, 0, fmt.Errorf("backend %v has no integer weight", m)
		}
		switch m["service"] {
		case apex + "-primary":
			primary, found = w, found+1
		case apex + "-canary":
			canary, found = w, found+1
		}
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("TrafficSplit %s has backends %v", u.GetName(), backends)
	}
	return primary, canary, nil
}

// weightRecorder records every distinct canary weight a router object takes.
type weightRecorder struct {
	mu      sync.Mutex
	weights []int64
	stop    func()
}

// recordWeights watches the TrafficSplit.
func (c *testCluster) recordWeights(t *testing.T, ns, name string) *weightRecorder {
	t.Helper()
	return c.recordObjectWeights(t, trafficSplits, ns, name, func(u *unstructured.Unstructured) (int64, int64, error) {
		return backendWeights(u, name)
	})
}

// recordObjectWeights watches any router object and records every distinct canary weight
// that extract reads from it; a split not summing to 100 is recorded as -1.
func (c *testCluster) recordObjectWeights(t *testing.T, gvr schema.GroupVersionResource, ns, name string,
	extract func(*unstructured.Unstructured) (primary, canary int64, err error)) *weightRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.dyn.Resource(gvr).Namespace(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &weightRecorder{stop: func() { cancel(); w.Stop() }}
	go func() {
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			p, cw, err := extract(u)
			if err != nil || p+cw != 100 {
				cw = -1
			}
			r.mu.Lock()
			if n := len(r.weights); n == 0 || r.weights[n-1] != cw {
				r.weights = append(r.weights, cw)
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(r.stop)
	return r
}

// seen returns the canary weights seen, dropping the initial 0 that the watch reports first.
func (r *weightRecorder) seen() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.weights)
	if len(out) > 0 && out[0] == 0 {
		out = out[1:]
	}
	return out
}
