package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

// The simulator scenario: the stack's mesh simulator (meshsim) at -sim-pods pods, as issue 33
// asks: its memory, CPU, listening sockets and open connections. The pods are kwok's, in
// Deployments of simPodsPerApp behind a Service each, which an IngressRoute of its own host
// exposes through the stack's Traefik, so that the simulator's client sends real requests
// (simRPS a host) and answers them as the pods Traefik picks. Figures are read from
// /proc/<meshsim pid> once every pod is Ready and a pod answered on every host, over a window
// of simWindow.

const (
	simPodsPerApp = 30
	simRPS        = "2"
	simWindow     = 60 * time.Second
)

// procSample is what /proc says of one process at one moment.
type procSample struct {
	rssKB, hwmKB int64
	cpuTicks     int64
	listeners    int // TCP sockets of the process in state LISTEN
	connections  int // TCP sockets of the process in state ESTABLISHED
	fds          int
}

func (b *bench) simulatorScenario(ctx context.Context) error {
	pid, err := stackPid(b.env, "meshsim")
	if err != nil {
		return err
	}
	idle, err := sampleProc(pid)
	if err != nil {
		return err
	}
	b.res.simIdleRSSMB = append(b.res.simIdleRSSMB, float64(idle.rssKB)/1024)
	ns := b.cl.namespace("sim")
	if err := b.cl.createNamespaces(ctx, ns); err != nil {
		return err
	}
	apps := (b.opts.simPods + simPodsPerApp - 1) / simPodsPerApp
	progress("simulator: %d pods in %d Deployments behind %d IngressRoutes in %s", apps*simPodsPerApp, apps, apps, ns)
	for i := range apps {
		if err := b.cl.createSimApp(ctx, ns, fmt.Sprintf("app-%d", i)); err != nil {
			return err
		}
	}
	// Every pod Ready, and every host answered by a pod through Traefik.
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := b.cl.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		answered, err := answeredHosts(ctx, b.env.SimulatorURL, ns)
		return ready == apps*simPodsPerApp && err == nil && answered == apps, nil
	})
	if err != nil {
		return fmt.Errorf("simulator: the pods were not all Ready and answering through Traefik within 10 minutes: %w", err)
	}
	before, err := sampleProc(pid)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(simWindow):
	}
	after, err := sampleProc(pid)
	if err != nil {
		return err
	}
	progress("simulator at %d pods: RSS %d MiB (peak %d MiB, idle %d MiB), %.3f cores, %d listening sockets, %d connections, %d fds",
		apps*simPodsPerApp, after.rssKB/1024, after.hwmKB/1024, idle.rssKB/1024,
		float64(after.cpuTicks-before.cpuTicks)*clockTick.Seconds()/simWindow.Seconds(), after.listeners, after.connections, after.fds)
	b.res.simPods = apps * simPodsPerApp
	b.res.simRSSMB = append(b.res.simRSSMB, float64(after.rssKB)/1024)
	b.res.simPeakRSSMB = append(b.res.simPeakRSSMB, float64(after.hwmKB)/1024)
	b.res.simCPUCores = append(b.res.simCPUCores, float64(after.cpuTicks-before.cpuTicks)*clockTick.Seconds()/simWindow.Seconds())
	b.res.simListeners = append(b.res.simListeners, float64(after.listeners))
	b.res.simConnections = append(b.res.simConnections, float64(after.connections))
	// The routes go before the pods, as a destroy does (deleteNamespaces).
	b.cl.deleteNamespaces(ctx, ns)
	return nil
}

// createSimApp is a Service, a Deployment of simPodsPerApp pods and an IngressRoute for the
// host <name>.<namespace>.sim.bench.
func (c *cluster) createSimApp(ctx context.Context, ns, name string) error {
	labels := map[string]string{"app": name}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"sim.canary-release.dev/rps": simRPS}},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
			{Name: "http", Port: 9898, TargetPort: intstr.FromInt32(9898)},
		}},
	}
	if _, err := c.kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(simPodsPerApp)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "podinfo", Image: podinfoImage + "6.0.0",
					Ports: []corev1.ContainerPort{{ContainerPort: 9898}},
				}}},
			},
		},
	}
	if _, err := c.kube.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return err
	}
	ir := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"entryPoints": []any{"web"}, "routes": []any{map[string]any{
			"match": "Host(`" + name + "." + ns + ".sim.bench`)", "kind": "Rule",
			"services": []any{map[string]any{"name": name, "port": int64(9898)}},
		}}},
	}}
	_, err := c.dyn.Resource(ingressRouteResource).Namespace(ns).Create(ctx, ir, metav1.CreateOptions{})
	return err
}

// answeredHosts counts the hosts of ns on which a pod answered the simulator's client.
func answeredHosts(ctx context.Context, simulatorURL, ns string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, simulatorURL+"/client?namespace="+url.QueryEscape(ns), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var routes []struct {
		Answered map[string]int64 `json:"answered"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&routes); err != nil {
		return 0, err
	}
	n := 0
	for _, r := range routes {
		if len(r.Answered) > 0 {
			n++
		}
	}
	return n, nil
}

// stackPid reads the pid of one of the stack's components from its run folder.
func stackPid(env *localstack.Env, component string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(localstack.StackDir(env.Root), "run", component+".pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(raw)))
}

// sampleProc reads a process's memory, CPU time, file descriptors and TCP sockets.
func sampleProc(pid int) (procSample, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	var s procSample
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return s, err
	}
	if s.hwmKB, err = parseVmHWM(status); err != nil {
		return s, err
	}
	if s.rssKB, err = statusKB(status, "VmRSS"); err != nil {
		return s, err
	}
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return s, err
	}
	st, err := parseStat(stat)
	if err != nil {
		return s, err
	}
	s.cpuTicks = st.cpuTicks
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return s, err
	}
	s.fds = len(fds)
	inodes := map[string]bool{}
	for _, fd := range fds {
		if link, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	for _, table := range []string{"tcp", "tcp6"} {
		raw, err := os.ReadFile(filepath.Join(dir, "net", table))
		if err != nil {
			continue
		}
		listen, established := countSockets(string(raw), inodes)
		s.listeners += listen
		s.connections += established
	}
	return s, nil
}

// countSockets counts, in the text of /proc/<pid>/net/tcp, the sockets among inodes that
// listen (state 0A) and that are established (01).
func countSockets(table string, inodes map[string]bool) (listen, established int) {
	for i, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 10 || !inodes[f[9]] {
			continue
		}
		switch f[3] {
		case "0A":
			listen++
		case "01":
			established++
		}
	}
	return listen, established
}

// statusKB reads a "Name:  123 kB" line of /proc/<pid>/status.
func statusKB(status []byte, name string) (int64, error) {
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == name {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s line", name)
}
