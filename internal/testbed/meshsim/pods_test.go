package meshsim

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
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

// viaSimulatorProxy is a client whose proxy is the simulator's SOCKS5 listener, as Traefik's
// is on the stack.
func viaSimulatorProxy(t *testing.T, sim *Simulator) *http.Client {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = sim.ServeSOCKS(t.Context(), l) }()
	proxy := &url.URL{Scheme: "socks5", Host: l.Addr().String()}
	transport := &http.Transport{Proxy: http.ProxyURL(proxy)}
	t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport}
}

// A request the proxy sends to a pod address, with the route's Host, is answered as that pod:
// its status, its name and image; a pod that is not Ready or not there answers nothing.
func TestPodsAnswerProxiedRequests(t *testing.T) {
	f := newFixture(t, nil, []runtime.Object{
		appPod("good", "10.244.0.7", true, nil),
		appPod("failing", "10.244.0.8", true, map[string]string{AnnotationErrorRate: "1"}),
		appPod("starting", "10.244.0.9", false, nil),
	}...)
	client := viaSimulatorProxy(t, f.sim)
	get := func(addr string) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "app.example.com" // as Traefik passes the client's Host on
		resp, err := client.Do(req)
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
}

// A deleted pod that was Ready answers through its grace period, as an application does
// between SIGTERM and its exit; one without a grace period answers nothing once gone.
func TestDeletedPodsAnswerThroughGracePeriod(t *testing.T) {
	graceful := appPod("graceful", "10.244.0.7", true, nil)
	abrupt := appPod("abrupt", "10.244.0.8", true, nil)
	abrupt.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	f := newFixture(t, nil, graceful, abrupt)
	client := viaSimulatorProxy(t, f.sim)
	for _, name := range []string{"graceful", "abrupt"} {
		if err := f.kube.CoreV1().Pods(ns).Delete(f.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.waitFor("both pods gone from the informer", func() bool {
		return len(f.sim.typed.Core().V1().Pods().Informer().GetStore().List()) == 0
	})
	resp, err := client.Get("http://10.244.0.7:9898/")
	if err != nil {
		t.Fatalf("the deleted pod in its grace period: %v, want its answer", err)
	}
	resp.Body.Close()
	if got := resp.Header.Get(HeaderPod); got != "graceful" {
		t.Errorf("answered by %q, want graceful", got)
	}
	if resp, err := client.Get("http://10.244.0.8:9898/"); err == nil {
		resp.Body.Close()
		t.Errorf("the deleted pod without grace period answered %d, want no answer", resp.StatusCode)
	}
}
