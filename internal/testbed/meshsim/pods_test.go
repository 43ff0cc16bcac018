package meshsim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// appPod is a pod of image podinfo:6.0.1 at ip.
func appPod(name, ip string, ready bool, annotations map[string]string) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "podinfo", Image: "podinfo:6.0.1"}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
		},
	}
}

// viaSimulatorProxy is a client whose HTTP proxy is the simulator, as Traefik's is on the stack.
func viaSimulatorProxy(t *testing.T, sim *Simulator) *http.Client {
	server := httptest.NewServer(sim.Handler())
	t.Cleanup(server.Close)
	proxy, _ := url.Parse(server.URL)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
}

// A request the proxy sends to a pod address is answered as that pod: its status, its name and
// image; a pod that is not Ready or not there answers nothing, and the connection just ends.
func TestPodsAnswerProxiedRequests(t *testing.T) {
	f := newFixture(t, nil, []runtime.Object{
		appPod("good", "10.244.0.7", true, nil),
		appPod("failing", "10.244.0.8", true, map[string]string{AnnotationErrorRate: "1"}),
		appPod("starting", "10.244.0.9", false, nil),
	}...)
	client := viaSimulatorProxy(t, f.sim)
	get := func(addr string) (*http.Response, error) {
		resp, err := client.Get("http://" + addr + "/")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	for _, tc := range []struct{ addr, pod string }{{"10.244.0.7:9898", "good"}, {"10.244.0.8:80", "failing"}} {
		resp, err := get(tc.addr)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.addr, err)
		}
		want := http.StatusOK
		if tc.pod == "failing" {
			want = http.StatusInternalServerError
		}
		if resp.StatusCode != want || resp.Header.Get(HeaderPod) != tc.pod || resp.Header.Get(HeaderImage) != "podinfo:6.0.1" {
			t.Errorf("GET %s: %d %s=%q %s=%q, want %d from %s running podinfo:6.0.1", tc.addr, resp.StatusCode,
				HeaderPod, resp.Header.Get(HeaderPod), HeaderImage, resp.Header.Get(HeaderImage), want, tc.pod)
		}
	}
	for _, addr := range []string{"10.244.0.9:9898", "10.244.0.10:9898"} {
		if resp, err := get(addr); err == nil {
			t.Errorf("GET %s (a pod not Ready, then no pod): answered %d by %q, want no answer", addr, resp.StatusCode, resp.Header.Get(HeaderPod))
		}
	}
	// The simulator's own endpoints still answer on the same listener.
	resp, err := http.Get(viaSimulatorURL(t, f.sim) + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz beside the pods: %v %v", resp, err)
	}
	if err == nil {
		resp.Body.Close()
	}
}

func viaSimulatorURL(t *testing.T, sim *Simulator) string {
	server := httptest.NewServer(sim.Handler())
	t.Cleanup(server.Close)
	return server.URL
}
