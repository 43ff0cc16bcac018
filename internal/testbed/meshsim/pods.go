package meshsim

import (
	"fmt"
	"net"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Pods that answer. The stack's real proxy (Traefik) picks a backend pod by its own weights and
// endpoints and sends the request to the pod's address, which nothing serves (kwok's pods run
// no process). Its HTTP_PROXY is the simulator, so the request arrives here in proxy form,
// GET http://<pod ip>:<port>/..., and the simulator answers as that pod: the status and
// latency its annotations ask for (the same per-pod behaviour as the simulated flows), with
// the headers HeaderPod and HeaderImage, which tell the client an answer came from a pod.
//
// A pod that is unknown, gone or not Ready answers nothing: the connection is closed without
// a response, as a dead pod would leave it. A pod being deleted but still Ready answers, as an
// application still serving through its grace period does. Any port answers: the simulated
// pods declare none.

// Headers on every answer a pod gives.
const (
	HeaderPod   = "X-Canary-Pod"
	HeaderImage = "X-Canary-Image"
)

// proxiedMesh is the real proxy's mesh: its answers share the pod's accumulators and latency
// buckets with the simulated flows of that mesh (Traefik's own histogram has those buckets).
const proxiedMesh = MeshTraefik

// podIPIndex indexes the pod informer by status.podIP.
const podIPIndex = "podIP"

func podIPs(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Status.PodIP == "" {
		return nil, nil
	}
	return []string{pod.Status.PodIP}, nil
}

// answeringPod is the pod at ip that answers, if any: Ready and not finished.
func (s *Simulator) answeringPod(ip string) *corev1.Pod {
	objs, err := s.typed.Core().V1().Pods().Informer().GetIndexer().ByIndex(podIPIndex, ip)
	if err != nil {
		return nil
	}
	for _, obj := range objs {
		pod := obj.(*corev1.Pod)
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || !podReady(pod) {
			continue
		}
		return pod
	}
	return nil
}

// servePod answers a proxy-form request as the pod whose address it names.
func (s *Simulator) servePod(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.URL.Host)
	if err != nil {
		host = r.URL.Host
	}
	pod := s.answeringPod(host)
	if pod == nil {
		// No response at all: the server closes the connection (ErrAbortHandler is not logged).
		panic(http.ErrAbortHandler)
	}
	s.mu.Lock()
	p := s.podInfo(s.view(), pod)
	p.ready = true // a terminating pod still Ready serves (see above)
	code, ms := s.answer(&route{mesh: proxiedMesh}, p)
	s.mu.Unlock()

	timer := time.NewTimer(time.Duration(ms * float64(time.Millisecond)))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-r.Context().Done():
		return
	}
	w.Header().Set(HeaderPod, pod.Name)
	w.Header().Set(HeaderImage, podImage(pod))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, "%s/%s answered %d\n", pod.Namespace, pod.Name, code)
}

// podImage is the image of the pod's first container, the application's.
func podImage(pod *corev1.Pod) string {
	if len(pod.Spec.Containers) == 0 {
		return ""
	}
	return pod.Spec.Containers[0].Image
}

// indexPodsByIP registers the index servePod looks pods up by; before the informers start.
func (s *Simulator) indexPodsByIP() {
	if err := s.typed.Core().V1().Pods().Informer().AddIndexers(cache.Indexers{podIPIndex: podIPs}); err != nil {
		panic(err) // only fails once the informer runs
	}
}
