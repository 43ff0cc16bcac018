package meshsim

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Pods that answer. The stack's real proxy (Traefik) picks a backend pod by its own weights and
// endpoints and sends the request to the pod's address, which nothing serves (kwok's pods run
// no process). Its proxy is the simulator (socks.go), so the request arrives here on a
// connection to <pod ip>:<port>, and the simulator answers as that pod: the status and
// latency its annotations ask for (the same per-pod behaviour as the simulated flows), with
// the headers HeaderPod and HeaderImage, which tell the client an answer came from a pod. The
// pod's own exporters (the application's histogram) observe each answer (proxied.go).
//
// A pod that is unknown, gone or not Ready answers nothing: the connection is refused, or
// closed without a response when the pod died after it was opened. A deleted pod that was Ready
// keeps answering through its termination grace period (spec.terminationGracePeriodSeconds,
// 30 s by default), as a real pod's application does between SIGTERM and its exit while the
// proxies drop its address: kwok removes a deleted pod within a tenth of a second, and
// Traefik was seen routing to such an address for over a second after (a 502 then). A new pod
// given the same address takes it over. Any port answers: the simulated pods declare none.

// Headers on every answer a pod gives.
const (
	HeaderPod   = "X-Canary-Pod"
	HeaderImage = "X-Canary-Image"
	// HeaderWorkload names the pod's workload (its Deployment): the primary's or the canary's.
	HeaderWorkload = "X-Canary-Workload"
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

// answeringPod is the pod at ip that answers, if any: Ready and not finished, or deleted and
// still in its grace period.
func (s *Simulator) answeringPod(ip string) *corev1.Pod {
	objs, err := s.typed.Core().V1().Pods().Informer().GetIndexer().ByIndex(podIPIndex, ip)
	if err != nil {
		return nil
	}
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok && serving(pod) {
			return pod
		}
	}
	return s.terminating.at(ip, time.Now())
}

func serving(pod *corev1.Pod) bool {
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed && podReady(pod)
}

// terminatingPods are the deleted pods still in their grace period, by address.
type terminatingPods struct {
	mu   sync.Mutex
	pods map[string]terminatingPod
}

type terminatingPod struct {
	pod   *corev1.Pod
	until time.Time
}

// defaultGracePeriod is Kubernetes' default terminationGracePeriodSeconds.
const defaultGracePeriod = 30 * time.Second

func (t *terminatingPods) deleted(obj any, now time.Time) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Status.PodIP == "" || !serving(pod) {
		return
	}
	grace := defaultGracePeriod
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	start := now
	if pod.DeletionTimestamp != nil && pod.DeletionTimestamp.Time.Before(now) {
		start = pod.DeletionTimestamp.Time
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pods == nil {
		t.pods = map[string]terminatingPod{}
	}
	for ip, p := range t.pods {
		if !now.Before(p.until) {
			delete(t.pods, ip)
		}
	}
	t.pods[pod.Status.PodIP] = terminatingPod{pod: pod, until: start.Add(grace)}
}

// all lists the deleted pods still in their grace period.
func (t *terminatingPods) all(now time.Time) []*corev1.Pod {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range t.pods {
		if now.Before(p.until) {
			out = append(out, p.pod)
		}
	}
	return out
}

func (t *terminatingPods) at(ip string, now time.Time) *corev1.Pod {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.pods[ip]; ok && now.Before(p.until) {
		return p.pod
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
	// The pod's own exporters count what it served (proxied.go); the vendors' APIs read it too.
	s.mu.Lock()
	s.metrics.served(p, code, ms)
	s.mu.Unlock()
	now := time.Now()
	s.vendors.answered(now, p, code, ms)
	s.samples.record(now, workloadKey{p.namespace, p.workload}, code, ms)
	w.Header().Set(HeaderPod, pod.Name)
	w.Header().Set(HeaderImage, p.image)
	w.Header().Set(HeaderWorkload, p.workload)
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

// indexPodsByIP registers the index servePod looks pods up by, and remembers deleted pods
// through their grace period; before the informers start.
func (s *Simulator) indexPodsByIP() {
	informer := s.typed.Core().V1().Pods().Informer()
	if err := informer.AddIndexers(cache.Indexers{podIPIndex: podIPs}); err != nil {
		panic(err) // only fails once the informer runs
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) { s.terminating.deleted(obj, time.Now()) },
	})
}
