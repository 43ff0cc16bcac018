package provider

// The campaign's cluster: one fake API server per schedule that every simulated process of it
// talks to, with the semantics the engine relies on and client-go's fakes lack (resource
// versions and conflicts, delete preconditions, watches that resume from a list, the scale
// subresource, Deployments whose pods become Ready), and simulated pods, Prometheus and
// webhooks. Everything here runs inside a testing/synctest bubble: time is fake, and nothing
// opens a socket.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	_ "unsafe" // for go:linkname

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/knative"
	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// reflectorNeverExitWatch is client-go's never-firing resync channel, made when the package
// loads: a select on it is not durably blocked inside a synctest bubble, so fake time would
// never advance while an informer runs. A nil channel never fires either, and a select skips
// it, so every informer of the engine waits durably.
//
//go:linkname reflectorNeverExitWatch k8s.io/client-go/tools/cache.neverExitWatch
var reflectorNeverExitWatch <-chan time.Time

func init() { reflectorNeverExitWatch = nil }

var (
	deploymentsResource = appsv1.SchemeGroupVersion.WithResource("deployments")
	servicesResource    = corev1.SchemeGroupVersion.WithResource("services")
	configMapsResource  = corev1.SchemeGroupVersion.WithResource("configmaps")
	leasesResource      = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
)

// routerListKinds lets the dynamic fake list the routers' objects.
var routerListKinds = map[schema.GroupVersionResource]string{
	router.TrafficSplitResource:         "TrafficSplitList",
	router.HTTPRouteResource:            "HTTPRouteList",
	router.GatewayResource:              "GatewayList",
	router.IstioVirtualServiceResource:  "VirtualServiceList",
	router.IstioDestinationRuleResource: "DestinationRuleList",
	autoscaler.ScaledObjects:            "ScaledObjectList",
}

// apiChange is one write that landed, as the invariants see it.
type apiChange struct {
	// by names the writer: a process ("apply 3") or "harness" for what the schedule does
	// behind the release's back.
	by     string
	verb   string
	gvr    schema.GroupVersionResource
	name   string
	before runtime.Object // nil on create
	after  runtime.Object // nil on delete
}

// versionedEvent is a watch event with the resource version it happened at.
type versionedEvent struct {
	version int64
	event   watch.Event
}

type watchScope struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// fakeAPIServer is the shared API server of one schedule.
type fakeAPIServer struct {
	mu       sync.Mutex
	version  int64
	objects  map[schema.GroupVersionResource]map[types.NamespacedName]runtime.Object
	history  map[watchScope][]versionedEvent
	watchers map[watchScope][]*replayWatcher
	pods     *podSimulator
	// onChange receives every write after it landed, outside the lock.
	onChange func(apiChange)
	// statefulSets is the StatefulSet controller's state (campaign_statefulsets_test.go).
	statefulSets map[types.NamespacedName]*stsState
	// knative is Knative Serving's controllers' state (campaign_knative_test.go); nil
	// without a Knative Service.
	knative *knativeController
}

func newFakeAPIServer(pods *podSimulator) *fakeAPIServer {
	return &fakeAPIServer{
		objects:  map[schema.GroupVersionResource]map[types.NamespacedName]runtime.Object{},
		history:  map[watchScope][]versionedEvent{},
		watchers: map[watchScope][]*replayWatcher{},
		pods:     pods,
	}
}

// serve answers one request of a simulated process.
func (s *fakeAPIServer) serve(action k8stesting.Action, by string) (runtime.Object, error) {
	gvr, ns := action.GetResource(), action.GetNamespace()
	if gvr == daemonSetsResource {
		return s.serveDaemonSet(action, by)
	}
	if gvr == statefulSetsResource {
		return s.serveStatefulSet(action, by)
	}
	if update, ok := action.(k8stesting.UpdateActionImpl); ok && gvr == knative.ServiceResource {
		return s.serveKnativeService(update, by)
	}
	if pods, ok := s.servePods(action); ok {
		return pods, nil
	}
	if ok, err := s.deleteStatefulSetPod(action); ok {
		return nil, err
	}
	switch a := action.(type) {
	case k8stesting.GetActionImpl:
		if a.GetSubresource() == "scale" {
			return s.getScale(ns, a.GetName())
		}
		return s.get(gvr, ns, a.GetName())
	case k8stesting.ListActionImpl:
		return s.list(gvr, a.GetKind(), ns)
	case k8stesting.CreateActionImpl:
		if gvr.Resource == "events" {
			// Events take part in no invariant; dropping them keeps a schedule cheap.
			return a.GetObject(), nil
		}
		return s.create(gvr, ns, a.GetObject(), len(a.CreateOptions.DryRun) > 0, by)
	case k8stesting.UpdateActionImpl:
		if a.GetSubresource() == "scale" {
			return s.updateScale(ns, a.GetObject(), by)
		}
		return s.update(gvr, ns, a.GetObject(), len(a.UpdateOptions.DryRun) > 0, by)
	case k8stesting.DeleteActionImpl:
		return nil, s.delete(gvr, ns, a.GetName(), a.DeleteOptions.Preconditions, by)
	case k8stesting.PatchActionImpl:
		return s.patch(gvr, ns, a.GetName(), a.GetPatchType(), a.GetPatch(), len(a.PatchOptions.DryRun) > 0, by)
	}
	return nil, apierrors.NewMethodNotSupported(gvr.GroupResource(), action.GetVerb())
}

func (s *fakeAPIServer) get(gvr schema.GroupVersionResource, ns, name string) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, ok := s.objects[gvr][types.NamespacedName{Namespace: ns, Name: name}]
	if !ok {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	return obj.DeepCopyObject(), nil
}

// list returns every object of a kind in a namespace; the fake clients filter by label.
func (s *fakeAPIServer) list(gvr schema.GroupVersionResource, kind schema.GroupVersionKind, ns string) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var items []runtime.Object
	for key, obj := range s.objects[gvr] {
		if ns == "" || key.Namespace == ns {
			items = append(items, obj.DeepCopyObject())
		}
	}
	if gvr == endpointSlicesResource {
		// Derived from the Services and the pods, as the endpoint controller keeps them.
		items = s.endpointSlices(ns)
	}
	listKind := kind.GroupVersion().WithKind(kind.Kind + "List")
	version := strconv.FormatInt(s.version, 10)
	if typed, err := kubescheme.Scheme.New(listKind); err == nil {
		if err := meta.SetList(typed, items); err != nil {
			return nil, err
		}
		accessor, err := meta.ListAccessor(typed)
		if err != nil {
			return nil, err
		}
		accessor.SetResourceVersion(version)
		return typed, nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(listKind)
	list.SetResourceVersion(version)
	for _, item := range items {
		u, ok := item.(*unstructured.Unstructured)
		if !ok {
			return nil, fmt.Errorf("%s holds a %T", gvr, item)
		}
		list.Items = append(list.Items, *u)
	}
	return list, nil
}

func (s *fakeAPIServer) create(gvr schema.GroupVersionResource, ns string, obj runtime.Object, dryRun bool, by string) (runtime.Object, error) {
	s.mu.Lock()
	obj = obj.DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if m.GetNamespace() == "" {
		m.SetNamespace(ns)
	}
	key := types.NamespacedName{Namespace: ns, Name: m.GetName()}
	if _, exists := s.objects[gvr][key]; exists {
		s.mu.Unlock()
		return nil, apierrors.NewAlreadyExists(gvr.GroupResource(), m.GetName())
	}
	m.SetUID(types.UID(fmt.Sprintf("uid-%d", s.version+1)))
	m.SetCreationTimestamp(metav1.NewTime(time.Now()))
	m.SetGeneration(1)
	if d, ok := obj.(*appsv1.Deployment); ok && !dryRun {
		s.pods.rollOut(s, nil, d)
	}
	return s.commit(gvr, key, nil, obj, dryRun, "create", by)
}

func (s *fakeAPIServer) update(gvr schema.GroupVersionResource, ns string, obj runtime.Object, dryRun bool, by string) (runtime.Object, error) {
	s.mu.Lock()
	obj = obj.DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	key := types.NamespacedName{Namespace: ns, Name: m.GetName()}
	live, exists := s.objects[gvr][key]
	if !exists {
		s.mu.Unlock()
		return nil, apierrors.NewNotFound(gvr.GroupResource(), m.GetName())
	}
	liveMeta, _ := meta.Accessor(live)
	if v := m.GetResourceVersion(); v != "" && v != liveMeta.GetResourceVersion() {
		s.mu.Unlock()
		return nil, apierrors.NewConflict(gvr.GroupResource(), m.GetName(), fmt.Errorf("the object has been modified; resourceVersion %s is not the live %s", v, liveMeta.GetResourceVersion()))
	}
	m.SetUID(liveMeta.GetUID())
	m.SetCreationTimestamp(liveMeta.GetCreationTimestamp())
	m.SetGeneration(liveMeta.GetGeneration())
	if !equality.Semantic.DeepEqual(specOf(live), specOf(obj)) {
		m.SetGeneration(liveMeta.GetGeneration() + 1)
	}
	if d, ok := obj.(*appsv1.Deployment); ok && !dryRun {
		// As the API server: the main resource's writes leave the status subresource alone.
		d.Status = live.(*appsv1.Deployment).Status
		s.pods.rollOut(s, live.(*appsv1.Deployment), d)
	}
	if set, ok := obj.(*appsv1.StatefulSet); ok && !dryRun {
		set.Status = live.(*appsv1.StatefulSet).Status
	}
	return s.commit(gvr, key, live, obj, dryRun, "update", by)
}

// specOf is what a new generation is counted on.
func specOf(obj runtime.Object) any {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return o.Spec
	case *appsv1.StatefulSet:
		return o.Spec
	case *unstructured.Unstructured:
		return o.Object["spec"]
	}
	return nil
}

func (s *fakeAPIServer) delete(gvr schema.GroupVersionResource, ns, name string, pre *metav1.Preconditions, by string) error {
	s.mu.Lock()
	key := types.NamespacedName{Namespace: ns, Name: name}
	live, exists := s.objects[gvr][key]
	if !exists {
		s.mu.Unlock()
		return apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	liveMeta, _ := meta.Accessor(live)
	if pre != nil && ((pre.UID != nil && *pre.UID != liveMeta.GetUID()) || (pre.ResourceVersion != nil && *pre.ResourceVersion != liveMeta.GetResourceVersion())) {
		s.mu.Unlock()
		return apierrors.NewConflict(gvr.GroupResource(), name, fmt.Errorf("the delete's preconditions do not match the live object"))
	}
	if gvr == deploymentsResource {
		s.pods.forget(key)
	}
	_, err := s.commit(gvr, key, live, nil, false, "delete", by)
	return err
}

// patch serves the engine's server-side apply of a manifest as a strategic merge of the
// applied object onto the live one (or its creation): close enough to a force-apply by the
// one field manager that owns the Deployment's spec.
func (s *fakeAPIServer) patch(gvr schema.GroupVersionResource, ns, name string, pt types.PatchType, body []byte, dryRun bool, by string) (runtime.Object, error) {
	if gvr != deploymentsResource || (pt != types.ApplyPatchType && pt != types.StrategicMergePatchType) {
		return nil, apierrors.NewMethodNotSupported(gvr.GroupResource(), "patch "+string(pt))
	}
	live, err := s.get(gvr, ns, name)
	if apierrors.IsNotFound(err) {
		d := &appsv1.Deployment{}
		if err := json.Unmarshal(body, d); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		d.Name, d.Namespace = name, ns
		return s.create(gvr, ns, d, dryRun, by)
	}
	if err != nil {
		return nil, err
	}
	liveJSON, err := json.Marshal(live)
	if err != nil {
		return nil, err
	}
	merged, err := strategicpatch.StrategicMergePatch(liveJSON, body, &appsv1.Deployment{})
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	d := &appsv1.Deployment{}
	if err := json.Unmarshal(merged, d); err != nil {
		return nil, err
	}
	d.ResourceVersion = "" // an apply is never refused as stale
	return s.update(gvr, ns, d, dryRun, by)
}

func (s *fakeAPIServer) getScale(ns, name string) (runtime.Object, error) {
	obj, err := s.get(deploymentsResource, ns, name)
	if err != nil {
		return nil, err
	}
	d := obj.(*appsv1.Deployment)
	return &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, ResourceVersion: d.ResourceVersion},
		Spec:       autoscalingv1.ScaleSpec{Replicas: desiredReplicas(d)},
	}, nil
}

// updateScale sets a Deployment's replicas, as the scale subresource does.
func (s *fakeAPIServer) updateScale(ns string, obj runtime.Object, by string) (runtime.Object, error) {
	scale := obj.(*autoscalingv1.Scale)
	live, err := s.get(deploymentsResource, ns, scale.Name)
	if err != nil {
		return nil, err
	}
	d := live.(*appsv1.Deployment)
	if scale.ResourceVersion != "" && scale.ResourceVersion != d.ResourceVersion {
		return nil, apierrors.NewConflict(deploymentsResource.GroupResource(), d.Name, fmt.Errorf("stale scale"))
	}
	replicas := scale.Spec.Replicas
	d.Spec.Replicas = &replicas
	d.ResourceVersion = ""
	if _, err := s.update(deploymentsResource, ns, d, false, by); err != nil {
		return nil, err
	}
	return scale, nil
}

// commit stores after (nil deletes), stamps a new resource version, tells the watchers and
// then, outside the lock, the invariants. The caller holds s.mu; commit releases it.
func (s *fakeAPIServer) commit(gvr schema.GroupVersionResource, key types.NamespacedName, before, after runtime.Object, dryRun bool, verb, by string) (runtime.Object, error) {
	if dryRun {
		s.mu.Unlock()
		return after, nil
	}
	s.version++
	eventType, subject := watch.Modified, after
	switch {
	case after == nil:
		eventType, subject = watch.Deleted, before.DeepCopyObject()
		delete(s.objects[gvr], key)
	case before == nil:
		eventType = watch.Added
	}
	if m, err := meta.Accessor(subject); err == nil {
		m.SetResourceVersion(strconv.FormatInt(s.version, 10))
	}
	if after != nil {
		if s.objects[gvr] == nil {
			s.objects[gvr] = map[types.NamespacedName]runtime.Object{}
		}
		s.objects[gvr][key] = after
	}
	scope := watchScope{gvr, key.Namespace}
	ev := versionedEvent{version: s.version, event: watch.Event{Type: eventType, Object: subject}}
	s.history[scope] = append(s.history[scope], ev)
	for _, w := range s.watchers[scope] {
		w.send(ev.event)
	}
	var answer runtime.Object
	if after != nil {
		answer = after.DeepCopyObject()
	}
	onChange := s.onChange
	s.mu.Unlock()
	if onChange != nil {
		onChange(apiChange{by: by, verb: verb, gvr: gvr, name: key.Name, before: before, after: answer})
	}
	return answer, nil
}

// watch follows a kind in a namespace from a resource version: the events after it are
// replayed, so a watch started from a list misses nothing, as on a real API server.
func (s *fakeAPIServer) watch(gvr schema.GroupVersionResource, ns, from string) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	scope := watchScope{gvr, ns}
	w := &replayWatcher{result: make(chan watch.Event, 512)}
	if since, err := strconv.ParseInt(from, 10, 64); err == nil && since > 0 {
		for _, ev := range s.history[scope] {
			if ev.version > since {
				w.send(ev.event)
			}
		}
	} else {
		for key, obj := range s.objects[gvr] {
			if key.Namespace == ns {
				w.send(watch.Event{Type: watch.Added, Object: obj.DeepCopyObject()})
			}
		}
	}
	s.watchers[scope] = append(s.watchers[scope], w)
	return w, nil
}

// replayWatcher is a watch whose buffer is large enough for a schedule; a full one is a
// harness error, not a silent loss.
type replayWatcher struct {
	mu      sync.Mutex
	stopped bool
	result  chan watch.Event
}

func (w *replayWatcher) send(ev watch.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	select {
	case w.result <- watch.Event{Type: ev.Type, Object: ev.Object.DeepCopyObject()}:
	default:
		panic("campaign: a watch's buffer is full; raise it")
	}
}

func (w *replayWatcher) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.result)
	}
}

func (w *replayWatcher) ResultChan() <-chan watch.Event { return w.result }

// desiredReplicas is a Deployment's desired replicas, 1 when unset as the API server defaults it.
func desiredReplicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

// simulatedProcess is one terraform-provider process: its own clientsets, whose requests go
// through its faults (a kill makes every later request fail) to the shared API server.
type simulatedProcess struct {
	name    string
	server  *fakeAPIServer
	faults  *processFaults
	kube    *kubefake.Clientset
	dynamic *dynamicfake.FakeDynamicClient
	// machine is where a provider process runs (see campaign_hosts_test.go); nil for the
	// harness's own clients.
	machine *simulatedMachine
}

func (s *fakeAPIServer) newProcess(name string, faults *processFaults) *simulatedProcess {
	p := &simulatedProcess{name: name, server: s, faults: faults}
	p.kube = &kubefake.Clientset{}
	p.kube.AddReactor("*", "*", p.react)
	p.kube.AddWatchReactor("*", p.reactWatch)
	p.dynamic = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), routerListKinds)
	p.dynamic.PrependReactor("*", "*", p.react)
	p.dynamic.PrependWatchReactor("*", p.reactWatch)
	return p
}

func (p *simulatedProcess) react(action k8stesting.Action) (bool, runtime.Object, error) {
	fault, err := p.faults.beforeRequest(action)
	if err != nil {
		return true, nil, err
	}
	obj, err := p.server.serve(p.fromProcess(action), p.name)
	if err == nil && isWriteVerb(action.GetVerb()) {
		p.faults.afterWrite(action)
	}
	if err == nil && fault == faultLostResponse {
		return true, nil, errLostResponse(action)
	}
	return true, p.toProcess(obj), err
}

func (p *simulatedProcess) reactWatch(action k8stesting.Action) (bool, watch.Interface, error) {
	if _, err := p.faults.beforeRequest(action); err != nil {
		return true, nil, err
	}
	from := action.(k8stesting.WatchAction).GetWatchRestrictions().ResourceVersion
	if action.GetResource() == daemonSetsResource {
		w, err := p.server.watchDaemonSets(action.GetNamespace(), from)
		return true, w, err
	}
	w, err := p.server.watch(action.GetResource(), action.GetNamespace(), from)
	if err != nil || p.machine == nil || p.machine.skew == 0 || action.GetResource() != leasesResource {
		return true, w, err
	}
	// The process reads the Lease times against its own clock, as its Gets do (toProcess).
	return true, newShiftedWatch(w, p.toProcess), nil
}

// shiftedWatch is a watch whose events pass through shift. Unlike watch.Filter's, its
// goroutine ends when the watch is stopped with an event still unread, so that no schedule's
// bubble ends with it blocked.
type shiftedWatch struct {
	source watch.Interface
	out    chan watch.Event
	stop   chan struct{}
	once   sync.Once
}

func newShiftedWatch(source watch.Interface, shift func(runtime.Object) runtime.Object) *shiftedWatch {
	w := &shiftedWatch{source: source, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.out)
		for ev := range source.ResultChan() {
			ev.Object = shift(ev.Object)
			select {
			case w.out <- ev:
			case <-w.stop:
				return
			}
		}
	}()
	return w
}

func (w *shiftedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *shiftedWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.source.Stop()
	})
}

// podSimulator plays kubelet and the Deployment controller: a Deployment's pods restart when
// its pod template changes or it scales up from zero, capture the config they read at that
// moment (env and envFrom do not follow later changes), and become Ready after readyDelay,
// unless the schedule broke them.
type podSimulator struct {
	readyDelay time.Duration
	sets       map[types.NamespacedName]*podSet
}

// podSet is what a Deployment's pods run.
type podSet struct {
	// revision is the image and config version the pods started with.
	revision string
	broken   bool
	// lost is how many of its pods a node drain took (campaign_ratio_test.go): not Ready
	// until they are rescheduled or restart.
	lost int32
}

func newPodSimulator(readyDelay time.Duration) *podSimulator {
	return &podSimulator{readyDelay: readyDelay, sets: map[types.NamespacedName]*podSet{}}
}

func (ps *podSimulator) forget(key types.NamespacedName) { delete(ps.sets, key) }

// running is the revision the Deployment's pods run, "" with none.
func (ps *podSimulator) running(ns, name string) string {
	if set := ps.sets[types.NamespacedName{Namespace: ns, Name: name}]; set != nil {
		return set.revision
	}
	return ""
}

// rollOut sets the status a written Deployment gets, restarting its pods when their template
// changed or they come back from zero. s.mu is held.
func (ps *podSimulator) rollOut(s *fakeAPIServer, before, after *appsv1.Deployment) {
	key := types.NamespacedName{Namespace: after.Namespace, Name: after.Name}
	set := ps.sets[key]
	if set == nil {
		set = &podSet{}
		ps.sets[key] = set
	}
	n := desiredReplicas(after)
	restart := before == nil || desiredReplicas(before) == 0 || !equality.Semantic.DeepEqual(before.Spec.Template, after.Spec.Template)
	switch {
	case n == 0:
		set.revision, set.broken = "", false
		after.Status = appsv1.DeploymentStatus{ObservedGeneration: after.Generation}
		return
	case !restart:
		after.Status = podStatus(after, !set.broken, n)
		set.keepLost(&after.Status)
		return
	}
	set.revision, set.broken, set.lost = s.revisionOf(after), false, 0
	if ps.readyDelay == 0 {
		after.Status = podStatus(after, true, n)
		return
	}
	// Old pods keep serving while new ones start (maxUnavailable 0); none from zero.
	serving := int32(0)
	if before != nil && desiredReplicas(before) > 0 {
		serving = before.Status.ReadyReplicas
	}
	after.Status = appsv1.DeploymentStatus{ObservedGeneration: after.Generation, Replicas: n + serving, ReadyReplicas: serving, AvailableReplicas: serving}
	generation := after.Generation
	time.AfterFunc(ps.readyDelay, func() { s.finishRollOut(key, generation) })
}

// podStatus is the status of n pods of d's generation, Ready or not.
func podStatus(d *appsv1.Deployment, ready bool, n int32) appsv1.DeploymentStatus {
	st := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n}
	if ready {
		st.ReadyReplicas, st.AvailableReplicas = n, n
	}
	return st
}

// finishRollOut makes the new pods of a generation Ready, unless a later write replaced it.
func (s *fakeAPIServer) finishRollOut(key types.NamespacedName, generation int64) {
	s.writeStatus(key, func(d *appsv1.Deployment, set *podSet) bool {
		if d.Generation != generation {
			return false
		}
		d.Status = podStatus(d, !set.broken, desiredReplicas(d))
		set.keepLost(&d.Status)
		return true
	})
}

// breakPods takes a Deployment's Ready pods away (a crash, an eviction) until they restart,
// or until recoverAfter when it is positive.
func (s *fakeAPIServer) breakPods(ns, name string, recoverAfter time.Duration) bool {
	key := types.NamespacedName{Namespace: ns, Name: name}
	broke := s.writeStatus(key, func(d *appsv1.Deployment, set *podSet) bool {
		if set.broken || desiredReplicas(d) == 0 {
			return false
		}
		set.broken = true
		d.Status.ReadyReplicas, d.Status.AvailableReplicas = 0, 0
		return true
	})
	if broke && recoverAfter > 0 {
		time.AfterFunc(recoverAfter, func() { s.healPods(key) })
	}
	return broke
}

func (s *fakeAPIServer) healPods(key types.NamespacedName) {
	s.writeStatus(key, func(d *appsv1.Deployment, set *podSet) bool {
		if !set.broken {
			return false
		}
		set.broken = false
		if d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == desiredReplicas(d) {
			d.Status = podStatus(d, true, desiredReplicas(d))
			set.keepLost(&d.Status)
		}
		return true
	})
}

// writeStatus changes a Deployment's status as its controller does; change reports whether it
// changed anything.
func (s *fakeAPIServer) writeStatus(key types.NamespacedName, change func(*appsv1.Deployment, *podSet) bool) bool {
	s.mu.Lock()
	live, ok := s.objects[deploymentsResource][key]
	set := s.pods.sets[key]
	if !ok || set == nil {
		s.mu.Unlock()
		return false
	}
	d := live.DeepCopyObject().(*appsv1.Deployment)
	if !change(d, set) {
		s.mu.Unlock()
		return false
	}
	_, _ = s.commit(deploymentsResource, key, live, d, false, "status", "harness")
	return true
}

// revisionOf is what pods of d would run: its image and the version of the config it reads
// through envFrom. s.mu is held.
func (s *fakeAPIServer) revisionOf(d *appsv1.Deployment) string {
	spec := d.Spec.Template.Spec
	if len(spec.Containers) == 0 {
		return ""
	}
	c := spec.Containers[0]
	revision := c.Image
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			continue
		}
		cm, ok := s.objects[configMapsResource][types.NamespacedName{Namespace: d.Namespace, Name: from.ConfigMapRef.Name}]
		if !ok {
			return revision + "+config-missing"
		}
		revision += "+" + cm.(*corev1.ConfigMap).Data[campaignConfigKey]
	}
	return revision
}

// simulatedPrometheus answers the campaign's one metric: a good revision of the canary passes,
// a bad one fails; the schedule can take it down or make it answer NaN or nothing.
type simulatedPrometheus struct {
	h *campaign
}

func (q simulatedPrometheus) Query(ctx context.Context, _ string) (float64, error) {
	return q.h.answerQuery(ctx)
}

// Prometheus outages the schedule can cause.
const (
	outageNone  = ""
	outageDown  = "down"
	outageNaN   = "NaN"
	outageEmpty = "empty"
)

// prometheusAnswer turns an outage into the error the real client gives.
func prometheusAnswer(outage string, value float64) (float64, error) {
	switch outage {
	case outageDown:
		return 0, fmt.Errorf("%w: prometheus is down (simulated)", metrics.ErrQuery)
	case outageNaN:
		return 0, fmt.Errorf("%w: the query returned NaN", metrics.ErrNoValues)
	case outageEmpty:
		return 0, fmt.Errorf("%w: the query returned an empty vector", metrics.ErrNoValues)
	}
	return value, nil
}

// simulatedWebhooks is every webhook and event sink, in memory: it answers 200 after delay
// (a slow event sink), or when the call's context ends first.
type simulatedWebhooks struct {
	delay time.Duration
	// calling counts the call in flight; it returns what ends it.
	calling func() func()
}

func (w simulatedWebhooks) RoundTrip(req *http.Request) (*http.Response, error) {
	defer w.calling()()
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	if w.delay > 0 {
		t := time.NewTimer(w.delay)
		defer t.Stop()
		select {
		case <-req.Context().Done():
			return nil, req.Context().Err()
		case <-t.C:
		}
	}
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}, Request: req}, nil
}
