package meshsim

import (
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Pods that answer. The stack's real proxy (Traefik) picks a backend pod by its own weights and
// endpoints and sends the request to the pod's address, which nothing serves (kwok's pods run
// no process). Its proxy is the simulator (socks.go), so the request arrives here on a
// connection to <pod ip>:<port>, and the simulator answers as that pod: the status and
// latency its annotations ask for (the same per-pod behaviour as the simulated flows), with
// the headers HeaderPod and HeaderImage, which tell the client an answer came from a pod.
//
// A pod that is unknown, gone or not Ready answers nothing: the connection is refused, or
// closed without a response when the pod died after it was opened. A pod being deleted but still Ready answers, as an
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

// servePod answers a request as the pod its connection was opened to.
func (s *Simulator) servePod(w http.ResponseWriter, r *http.Request) {
	host, _ := r.Context().Value(podAddrKey{}).(string)
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
