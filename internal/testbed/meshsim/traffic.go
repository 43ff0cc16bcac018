package meshsim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// maxTickGap caps the time one tick accounts for, so that a stalled process does not send a burst.
const maxTickGap = time.Second

// flowState is what one flow carries from tick to tick.
type flowState struct {
	carry     float64   // fraction of a request owed from earlier ticks
	signature string    // the backends and weights that current belongs to
	current   []float64 // smooth weighted round-robin state
	mirrored  float64   // fraction of a mirrored copy owed (route.mirror)
}

// mirrors tells whether this request is also copied to the route's mirror: exactly percent of
// every 100 requests are, evenly spread.
func (f *flowState) mirrors(percent float64) bool {
	f.mirrored += percent / 100
	if f.mirrored >= 1-1e-9 {
		f.mirrored--
		return true
	}
	return false
}

// pick chooses the next backend by smooth weighted round-robin (nginx's algorithm), so an 80/20
// split sends exactly 4 of every 5 requests to the first backend. It returns -1 when no backend
// has a positive weight.
func (f *flowState) pick(r *route) int {
	if sig := signature(r); sig != f.signature {
		f.signature, f.current = sig, make([]float64, len(r.backends))
	}
	total, best := 0.0, -1
	for i, b := range r.backends {
		if b.weight <= 0 {
			continue
		}
		total += b.weight
		f.current[i] += b.weight
		if best < 0 || f.current[i] > f.current[best] {
			best = i
		}
	}
	if best >= 0 {
		f.current[best] -= total
	}
	return best
}

func signature(r *route) string {
	var sb strings.Builder
	for _, b := range r.backends {
		fmt.Fprintf(&sb, "%s|%s|%s|%g;", b.service, b.cluster, b.broken, b.weight)
	}
	return sb.String()
}

// podInfo is what a request needs to know about the pod that answers it.
type podInfo struct {
	namespace, name, ip    string
	image                  string // the application container's (podImage)
	workloadKind, workload string // owning Deployment (via its ReplicaSet), StatefulSet or DaemonSet, else the Pod itself
	// revision is a StatefulSet pod's controller-revision-hash: the application's metrics carry
	// it, so an analysis by partition tells the updated pods from the others.
	revision             string
	ready                bool
	errorRate, latencyMs float64
	linkerd              bool // injected with a Linkerd proxy (annotation linkerd.io/inject: enabled)
}

// backendPods are the pods a backend Service selects, sorted by name.
type backendPods struct {
	all, ready []podInfo
}

// podLoad holds the state of one pod in one mesh: its owed errors and its latency draws.
type podLoad struct {
	errors float64    // owed 5xx answers
	rng    *rand.Rand // the request durations (latency.go)
}

// fail reports whether this request is answered 500: exactly rate of all requests are.
func (l *podLoad) fail(rate float64) bool {
	l.errors += rate
	if l.errors >= 1-1e-9 {
		l.errors--
		return true
	}
	return false
}

// Tick sends the load owed since the previous tick (the first tick only starts the clock).
func (s *Simulator) Tick(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dt := 0.0
	if !s.lastTick.IsZero() {
		dt = min(max(now.Sub(s.lastTick), 0), maxTickGap).Seconds()
	}
	s.lastTick = now

	v := s.view()
	s.checkStatefulSets(now, v)
	routes := resolveRoutes(v)
	proxied := s.takeProxiedFlows(now, v, routes)
	keys := make([]flowKey, 0, len(routes))
	for k := range routes {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return flowLess(keys[i], keys[j]) })

	seenPods, seenRR := map[string]bool{}, map[string]bool{}
	podsOf := map[string]*backendPods{}
	podsFor := func(b backend) *backendPods {
		if b.broken != "" {
			return &backendPods{}
		}
		// Keyed like the round-robin: an Istio subset is its own set of pods.
		if bp, ok := podsOf[rrKey(b)]; ok {
			return bp
		}
		bp := s.selectPods(v, b.service, b.subset)
		podsOf[rrKey(b)] = bp
		return bp
	}

	// visit declares the series a backend's pods can produce this tick and keeps their state.
	visit := func(r *route, b backend) {
		bp := podsFor(b)
		s.metrics.declare(r, b, bp.all)
		seenRR[rrKey(b)] = true
		for _, p := range bp.all {
			seenPods[podKey(r.mesh, p)] = true
		}
	}

	// The proxies each pod runs, for the requests that reach pods past every router.
	sidecars := map[string]sidecar{}
	for _, key := range keys {
		markSidecars(sidecars, routes[key], podsFor)
	}

	s.metrics.begin()
	s.declareProxied(v, proxied, podsFor, seenPods)
	for _, key := range keys {
		r := routes[key]
		if len(r.backends) == 0 {
			continue // a route that answers without a backend (redirect, direct response)
		}
		r.sidecars = sidecars
		s.checkWeights(now, r)
		for _, b := range r.backends {
			visit(r, b)
		}
		if m := r.mirror; m != nil {
			bp := podsFor(m.backend)
			s.metrics.declareMirror(r, m.backend, bp.all)
			seenRR[rrKey(m.backend)] = true
			for _, p := range bp.all {
				seenPods[podKey(r.mesh, p)] = true
			}
		}
		flow := s.flows[key]
		if flow == nil {
			flow = &flowState{}
			s.flows[key] = flow
		}
		flow.carry += s.flowRPS(v, key) * dt
		n := math.Floor(flow.carry + 1e-9)
		flow.carry -= n
		for range int(n) {
			s.send(now, key, r, flow, podsFor)
		}
	}
	s.sendLoadTests(now, podsFor, visit, sidecars)
	s.metrics.sweep()

	for k := range s.flows {
		if _, ok := routes[k]; !ok {
			delete(s.flows, k)
		}
	}
	for k := range s.pods {
		if !seenPods[k] {
			delete(s.pods, k)
		}
	}
	for k := range s.rr {
		if !seenRR[k] {
			delete(s.rr, k)
		}
	}
}

// send routes one request and records how it was answered.
func (s *Simulator) send(now time.Time, key flowKey, r *route, flow *flowState, podsFor func(backend) *backendPods) {
	i := flow.pick(r)
	if i < 0 {
		// Every weight is 0 (already logged by checkWeights): the mesh has nowhere to send it.
		s.metrics.unavailable(r, backend{}, nil)
		return
	}
	b := r.backends[i]
	if bp := podsFor(b); len(bp.ready) > 0 {
		// A pod answers, and the route's response headers ride on its answer.
		s.recordCookies(now, key, r, b)
	}
	s.deliver(now, r, b, podsFor(b))
	if m := r.mirror; m != nil && flow.mirrors(m.percent) {
		s.mirrorCopy(r, m.backend, podsFor(m.backend))
	}
}

// mirrorCopy has one of the mirror backend's Ready pods answer a copy of a request. Nobody
// waits for the answer: only the pod's own exporters count it, and a copy no Ready pod can
// take is dropped without a trace (it is not user traffic, so no invariant entry either).
func (s *Simulator) mirrorCopy(r *route, b backend, bp *backendPods) {
	if len(bp.ready) == 0 {
		return
	}
	p := bp.ready[s.next(b, len(bp.ready))]
	code, ms := s.answer(r, p)
	s.metrics.mirrored(r, b, p, code, ms)
}

// deliver has one of backend b's Ready pods answer a request and returns the status code: 503
// when there is none, which breaks an invariant unless the request is test traffic.
func (s *Simulator) deliver(now time.Time, r *route, b backend, bp *backendPods) int {
	if len(bp.ready) == 0 {
		if !r.tester {
			s.inv.report(now, r.object, noReadyMessage(b))
		}
		var blame *podInfo
		if len(bp.all) > 0 {
			blame = &bp.all[s.next(b, len(bp.all))]
		}
		s.metrics.unavailable(r, b, blame)
		if blame != nil {
			s.samples.record(now, workloadKey{blame.namespace, blame.workload}, 503, -1)
		}
		return 503
	}
	p := bp.ready[s.next(b, len(bp.ready))]
	code, ms := s.answer(r, p)
	s.metrics.answered(r, b, p, code, ms)
	s.vendors.answered(now, p, code, ms)
	s.samples.record(now, workloadKey{p.namespace, p.workload}, code, ms)
	return code
}

// answer is how pod p answers a request of route r: its status code and duration in ms.
func (s *Simulator) answer(r *route, p podInfo) (int, float64) {
	key := podKey(r.mesh, p)
	load := s.pods[key]
	if load == nil {
		load = &podLoad{rng: podRand(s.cfg.Seed, key)}
		s.pods[key] = load
	}
	code := 200
	if load.fail(p.errorRate) {
		code = 500
	}
	return code, drawLatency(load.rng, p.latencyMs)
}

func noReadyMessage(b backend) string {
	if b.broken != "" {
		return "traffic sent to a backend that leads to no Service: " + b.broken
	}
	return fmt.Sprintf("traffic sent to Service %s, which has no Ready pods", b.service)
}

// checkWeights logs a route whose weights do not sum to 100.
func (s *Simulator) checkWeights(now time.Time, r *route) {
	if !r.weighted {
		return
	}
	sum := 0.0
	for _, b := range r.backends {
		sum += b.weight
	}
	if math.Abs(sum-100) > 1e-9 {
		s.inv.report(now, r.object, "weights sum to "+strconv.FormatFloat(sum, 'f', -1, 64)+", not 100")
	}
}

// next advances the round-robin over a backend's pods.
func (s *Simulator) next(b backend, n int) int {
	k := rrKey(b)
	i := s.rr[k] % n
	s.rr[k]++
	return i
}

func rrKey(b backend) string { return b.service.String() + "|" + b.cluster }

func podKey(m Mesh, p podInfo) string { return string(m) + "/" + p.namespace + "/" + p.name }

func flowLess(a, b flowKey) bool {
	if a.mesh != b.mesh {
		return a.mesh < b.mesh
	}
	return a.apex.String() < b.apex.String()
}

func (s *Simulator) view() *view {
	return &view{
		services: s.typed.Core().V1().Services().Lister(),
		pods:     s.typed.Core().V1().Pods().Lister(),
		rsets:    s.typed.Apps().V1().ReplicaSets().Lister(),
		crds:     s.crds,

		configMaps: s.typed.Core().V1().ConfigMaps().Lister(),
	}
}

// rps is the load entering at an apex: its annotation, or DefaultRPS when it has none (or when
// no such Service exists: the load enters at the gateway either way).
func (s *Simulator) rps(v *view, apex types.NamespacedName) float64 {
	svc, err := v.services.Services(apex.Namespace).Get(apex.Name)
	if err != nil {
		return DefaultRPS
	}
	return s.annotation("Service "+apex.String(), svc.Annotations, AnnotationRPS, DefaultRPS, math.Inf(1))
}

// selectPods lists the pods a Service selects, the way its endpoints would, narrowed to those
// that also carry the subset labels.
func (s *Simulator) selectPods(v *view, svc types.NamespacedName, subset map[string]string) *backendPods {
	out := &backendPods{}
	service, err := v.services.Services(svc.Namespace).Get(svc.Name)
	if err != nil || len(service.Spec.Selector) == 0 {
		return out
	}
	pods, err := v.pods.Pods(svc.Namespace).List(labels.SelectorFromSet(labels.Merge(service.Spec.Selector, subset)))
	if err != nil {
		return out
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		p := s.podInfo(v, pod)
		out.all = append(out.all, p)
		if p.ready {
			out.ready = append(out.ready, p)
		}
	}
	return out
}

func (s *Simulator) podInfo(v *view, pod *corev1.Pod) podInfo {
	who := "Pod " + pod.Namespace + "/" + pod.Name
	p := podInfo{
		namespace:    pod.Namespace,
		name:         pod.Name,
		ip:           pod.Status.PodIP,
		image:        podImage(pod),
		workloadKind: "Pod",
		workload:     pod.Name,
		ready:        pod.DeletionTimestamp == nil && podReady(pod),
		errorRate:    s.annotation(who, pod.Annotations, AnnotationErrorRate, 0, 1),
		latencyMs:    s.annotation(who, pod.Annotations, AnnotationLatencyMs, DefaultLatencyMs, math.Inf(1)),
		linkerd:      pod.Annotations[AnnotationLinkerdInject] == "enabled",
	}
	if owner := metav1.GetControllerOf(pod); owner != nil && owner.Kind == "StatefulSet" {
		p.workloadKind, p.workload, p.revision = "StatefulSet", owner.Name, pod.Labels["controller-revision-hash"]
	}
	if owner := metav1.GetControllerOf(pod); owner != nil && owner.Kind == "DaemonSet" {
		// A mesh names a DaemonSet's pods by their DaemonSet, as it names a Deployment's.
		p.workloadKind, p.workload = "DaemonSet", owner.Name
	}
	if rs := metav1.GetControllerOf(pod); rs != nil && rs.Kind == "ReplicaSet" {
		if set, err := v.rsets.ReplicaSets(pod.Namespace).Get(rs.Name); err == nil {
			if d := metav1.GetControllerOf(set); d != nil && d.Kind == "Deployment" {
				p.workloadKind, p.workload = "Deployment", d.Name
			}
		} else if hash := pod.Labels["pod-template-hash"]; hash != "" && strings.HasSuffix(rs.Name, "-"+hash) {
			// The ReplicaSet is not in the cache (not yet seen, or already deleted while its
			// pod terminates): a Deployment names its ReplicaSets <deployment>-<pod-template-hash>.
			p.workloadKind, p.workload = "Deployment", strings.TrimSuffix(rs.Name, "-"+hash)
		}
	}
	return p
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// annotation reads a number in [0, upper]; a missing one gives def, a bad one def plus a log line
// (once per value, not once per tick).
func (s *Simulator) annotation(who string, annotations map[string]string, key string, def, upper float64) float64 {
	raw, ok := annotations[key]
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
	if err == nil && f >= 0 && f <= upper {
		return f
	}
	if s.warned[who+key] != raw {
		s.warned[who+key] = raw
		s.log.Warn("ignoring bad annotation value", "object", who, "annotation", key, "value", raw, "using", def)
	}
	return def
}
