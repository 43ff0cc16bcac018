package localstack

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// ensure starts the shared stack when needed; a cold start builds Kubernetes (~15 min).
func ensure(t *testing.T) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	env, err := Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func testNamespace(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	name := fmt.Sprintf("localstack-test-%d", rand.IntN(1_000_000))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func deployment(name string, replicas int32, podAnnotations map[string]string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: podAnnotations},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app:1"}}},
			},
		},
	}
}

func TestDeploymentBecomesReady(t *testing.T) {
	env := ensure(t)
	client, _, err := env.Clients()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for i := range nodes.Items {
		if nodes.Items[i].Annotations[FakeNodeAnnotation] == "fake" && NodeReady(&nodes.Items[i]) {
			ready++
		}
	}
	if ready < 3 {
		t.Fatalf("%d fake nodes Ready, want 3", ready)
	}

	ns := testNamespace(t, client)
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, deployment("web", 3, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var d *appsv1.Deployment
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err = client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return d.Status.ReadyReplicas == 3 && d.Status.AvailableReplicas == 3, nil
	})
	if err != nil {
		t.Fatalf("deployment not 3/3 Ready: %v (status %+v)", err, d.Status)
	}
}

func TestNeverReadyPodsHitProgressDeadline(t *testing.T) {
	env := ensure(t)
	client, _, err := env.Clients()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ns := testNamespace(t, client)
	d := deployment("broken", 2, map[string]string{ReadyAnnotation: "false"})
	d.Spec.ProgressDeadlineSeconds = ptr.To(int32(3))
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err = client.AppsV1().Deployments(ns).Get(ctx, "broken", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no ProgressDeadlineExceeded condition: %v (status %+v)", err, d.Status)
	}
	if d.Status.ReadyReplicas != 0 {
		t.Errorf("readyReplicas = %d, want 0", d.Status.ReadyReplicas)
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("%d pods, want 2", len(pods.Items))
	}
	for _, p := range pods.Items {
		// They run, as a pod failing its readiness probe does, but are never Ready.
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s phase %s, want Running", p.Name, p.Status.Phase)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				t.Errorf("pod %s is Ready", p.Name)
			}
		}
	}
}

func TestPrometheusScrapesSimulator(t *testing.T) {
	env := ensure(t)
	if err := env.Ready(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(env.Root, "internal", "testbed", "cmd", "meshsim")); err != nil {
		t.Skip("the simulator (internal/testbed/cmd/meshsim) does not exist yet")
	}
	client, err := api.NewClient(api.Config{Address: env.PrometheusURL})
	if err != nil {
		t.Fatal(err)
	}
	prom := promv1.NewAPI(client)
	var last model.Value
	err = wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		v, _, _, err := prom.Query(ctx, `up{job="meshsim"}`, time.Now())
		if err != nil {
			return false, err
		}
		last = v
		vec, ok := v.(model.Vector)
		return ok && len(vec) == 1 && vec[0].Value == 1, nil
	})
	if err != nil {
		t.Fatalf(`up{job="meshsim"} never 1: %v (last %v)`, err, last)
	}
}

func TestRouterCRDsAreServed(t *testing.T) {
	env := ensure(t)
	_, dyn, err := env.Clients()
	if err != nil {
		t.Fatal(err)
	}
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "split.smi-spec.io", Version: "v1alpha2", Resource: "trafficsplits"},
		{Group: "apisix.apache.org", Version: "v2", Resource: "apisixroutes"},
		{Group: "apisix.apache.org", Version: "v2", Resource: "apisixupstreams"},
		{Group: "apisix.apache.org", Version: "v2", Resource: "apisixpluginconfigs"},
		{Group: "gloo.solo.io", Version: "v1", Resource: "upstreams"},
		{Group: "gloo.solo.io", Version: "v1", Resource: "upstreamgroups"},
		{Group: "gateway.solo.io", Version: "v1", Resource: "routetables"},
		{Group: "gateway.solo.io", Version: "v1", Resource: "virtualservices"},
	} {
		if _, err := dyn.Resource(gvr).Namespace("default").List(t.Context(), metav1.ListOptions{}); err != nil {
			t.Errorf("list %s: %v", gvr, err)
		}
	}
}

func TestSecondUpReusesRunningProcesses(t *testing.T) {
	env := ensure(t)
	if os.Getenv("CANARY_STACK_DIR") != "" {
		t.Skip("runs against the default stack only")
	}
	before := readPids(t, env)
	out, err := runStackWith(t, []string{"CANARY_NO_REBUILD=1"}, "up")
	if err != nil {
		t.Fatalf("second up: %v\n%s", err, out)
	}
	after := readPids(t, env)
	for name, pid := range before {
		if after[name] != pid {
			t.Errorf("%s: pid %s before, %s after the second up", name, pid, after[name])
		}
	}
	if !strings.Contains(out, "reusing kube-apiserver") {
		t.Errorf("second up did not report reuse:\n%s", out)
	}
}

func readPids(t *testing.T, env *Env) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(StackDir(env.Root), "run", "*.pid"))
	if err != nil || len(files) < 6 {
		t.Fatalf("pid files %v: %v", files, err)
	}
	pids := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pids[strings.TrimSuffix(filepath.Base(f), ".pid")] = strings.TrimSpace(string(data))
	}
	return pids
}

// runStackWith runs stack.sh with extra environment variables and returns its output.
func runStackWith(t *testing.T, extraEnv []string, args ...string) (string, error) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "internal", "testbed", "localstack", "stack.sh")}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), extraEnv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	return out.String(), err
}

func TestProcessCommandLinesUseLoopback(t *testing.T) {
	env := ensure(t)
	for name, pid := range readPids(t, env) {
		cmdline, err := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		if err != nil {
			t.Errorf("%s (pid %s) not running: %v", name, pid, err)
			continue
		}
		if strings.Contains(string(cmdline), "0.0.0.0") {
			t.Errorf("%s listens beyond loopback: %s", name, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
}

func TestReadyRejectsStoppedPrometheus(t *testing.T) {
	env := ensure(t)
	stopped := *env
	stopped.PrometheusURL = "http://127.0.0.1:1"
	err := stopped.Ready(t.Context())
	if err == nil || !strings.Contains(err.Error(), "prometheus") {
		t.Fatalf("Ready() = %v, want a prometheus error", err)
	}
}

func TestClientsReachAPIServer(t *testing.T) {
	env := ensure(t)
	client, _, err := env.Clients()
	if err != nil {
		t.Fatal(err)
	}
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.34.3" {
		t.Errorf("server version %q, want v1.34.3", v.GitVersion)
	}
	// TLS is verified against the API server's own certificate: a client without that
	// CA must be refused.
	cfg, err := env.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(cfg.Host + "/readyz")
	if err == nil {
		resp.Body.Close()
		t.Fatal("plain HTTPS client accepted the API server's certificate")
	}
}
