package provider

// Knative Services in the campaign (issue 32 item 4): about one schedule in eight releases the
// user's Knative Service podinfo (mesh_provider "knative", target_ref serving.knative.dev/v1
// Service) with a weighted canary, the one strategy the driver declares. The release pins a
// primary and a canary revision by annotations on the Service and writes its spec.traffic by
// revisionName (internal/mesh/knative).
//
// The fake API server plays Knative Serving's controllers, as they behave:
//   - the Service's reconciler, a moment (knativeLag) after each change of the Service, copies
//     its template into its Configuration (a new Configuration generation when the template
//     changed), and writes the Service's status: observedGeneration (set even while the
//     Configuration has not reconciled the new template yet: ConfigurationsReady is then
//     Unknown, "OutOfDate", and latestCreatedRevisionName still names the revision before, as
//     pkg/reconciler/service does), latestCreatedRevisionName, latestReadyRevisionName, and
//     status.traffic: spec.traffic resolved (latestRevision to the latest Ready revision, or
//     everything to it without spec.traffic) once every revision it names exists and is Ready;
//     until then the route keeps serving what it served (pkg/reconciler/route/traffic);
//   - the Configuration's reconciler, configLag later (drawn per schedule), makes a Revision
//     <service>-<5-digit configuration generation> of a new template, even one equal to an
//     older revision's, labelled serving.knative.dev/service and /configuration, and its
//     Deployment <revision>-deployment, whose pods carry serving.knative.dev/revision: the pod
//     simulator runs them, so readiness delays and losses and the judge's reads reuse the
//     Deployment machinery;
//   - a Revision is Ready once its Deployment first had a Ready pod, and stays Ready (as a
//     revision scaled to zero does): readiness lost later shows in its pods, not in the
//     condition. The latest Ready revision is the latest created one once it is Ready.
//
// The template sets min-scale (and max-scale) to two, so the autoscaler neither scales a
// revision to zero nor adds pods: no activator is modelled. Revisions are never
// garbage-collected.
//
// The judge reads the Service's spec.traffic: the pinned primary revision's entries are the
// primary side, the pinned canary's the canary side (another revision, or every revision
// while nothing is pinned, is the apex); a side serves while its revision's Deployment has
// Ready pods. The primary is what the pinned primary revision runs: a run's write that pins
// another one is judged as a primary restart (clause 2). The faults that target a primary
// Deployment map onto the Service (its template is the only one the user edits) or onto the
// pinned primary revision's pods (a readiness loss).

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/knative"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// knativeShare is the share of schedules that release a Knative Service.
const knativeShare = 1.0 / 8

// knativeLag is how long Knative's controllers take to act on a change they watch.
const knativeLag = 150 * time.Millisecond

// knativeScale is the replica count of a revision (min-scale and max-scale of the template).
const knativeScale = 2

func init() {
	routerListKinds[knative.ServiceResource] = "ServiceList"
	routerListKinds[knative.RevisionResource] = "RevisionList"
}

// drawKnative makes about knativeShare of the schedules release a Knative Service, keyed apart
// from the schedule's stream (the other draws leave such a schedule alone). What the driver
// cannot run is left out of its shape: iterations (it declares a weighted split only), a
// manifest (a driver-owned target is a target_ref), a replacement onto another router, and a
// tracked ConfigMap (a revision is its template: a config-only change makes no revision).
// Built-in gates are drawn for more of them than for the others.
func drawKnative(s *campaignSchedule) {
	if keyedCoin(s.seed, "knative") >= knativeShare {
		return
	}
	sh := &s.shape
	sh.knative, sh.router, sh.strategy, sh.manifest, sh.trackConfig = true, "knative", strategyCanary, false, false
	if sh.steps == nil {
		sh.steps = [][]int{{20, 40}, {10, 50}, {30}}[int(keyedCoin(s.seed, "knative steps")*3)]
	}
	if len(sh.gates) == 0 && keyedCoin(s.seed, "knative built-in gates") < 0.25 {
		// The driver-owned path's gates (issue 32's hole 2: its runs once skipped them): a
		// quarter more of these schedules hold the promotion for the operator's approval.
		sh.gates = []string{rollout.HookConfirmPromotion}
		if keyedCoin(s.seed, "knative built-in gate "+rollout.HookConfirmTrafficIncrease) < 0.5 {
			sh.gates = append([]string{rollout.HookConfirmTrafficIncrease}, sh.gates...)
		}
	}
	sh.knativeConfigLag = []time.Duration{0, 0, 400 * time.Millisecond, 3 * time.Second}[int(keyedCoin(s.seed, "knative configuration lag")*4)]
	for i := range s.ops {
		s.ops[i].newRouter = ""
		if s.ops[i].kind == opNewConfig {
			s.ops[i].kind = opNewTemplate
		}
	}
}

// knativeConfig makes a configuration's target the Knative Service.
func (s releaseShape) knativeConfig(config map[string]any) {
	if s.knative {
		config["target_ref"] = map[string]any{"api_version": "serving.knative.dev/v1", "kind": "Service", "name": campaignTarget}
	}
}

// knativeTemplateOf is the Service's template for a revision.
func knativeTemplateOf(rev revisionSpec) map[string]any {
	scale := fmt.Sprint(knativeScale)
	return map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{
			"autoscaling.knative.dev/min-scale": scale, "autoscaling.knative.dev/max-scale": scale,
		}},
		"spec": map[string]any{"containers": []any{map[string]any{
			"name": "podinfo", "image": rev.image, "ports": []any{map[string]any{"containerPort": int64(9898)}},
		}}},
	}
}

// applyKnativeService is the user's own apply of the Service's template (its traffic and the
// release's annotations are left as they are).
func (c *campaign) applyKnativeService(ctx context.Context, rev revisionSpec) error {
	api := c.harness.dynamic.Resource(knative.ServiceResource).Namespace(campaignNamespace)
	want := knativeTemplateOf(rev)
	var err error
	for range 5 {
		var svc *unstructured.Unstructured
		svc, err = api.Get(ctx, campaignTarget, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			svc = &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "serving.knative.dev/v1", "kind": "Service",
				"metadata": map[string]any{"name": campaignTarget, "namespace": campaignNamespace},
				"spec":     map[string]any{"template": want},
			}}
			_, err = api.Create(ctx, svc, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		if have, _, _ := unstructured.NestedMap(svc.Object, "spec", "template"); jsonText(have) == jsonText(want) {
			return nil
		}
		if err = unstructured.SetNestedMap(svc.Object, want, "spec", "template"); err != nil {
			return err
		}
		if _, err = api.Update(ctx, svc, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			break
		}
	}
	c.disrupted()
	return err
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// knativeController is the state of Knative's controllers for the Services of one API server.
type knativeController struct {
	// configLag is how long the Configuration's reconciler takes after the Service's.
	configLag time.Duration
	// reconciling serialises the reconciles, as one controller's work queue does per key.
	reconciling sync.Mutex
	services    map[types.NamespacedName]*knativeService
}

// knativeService is what the controllers know of one Service; the API server's lock guards it.
type knativeService struct {
	// template is the Configuration's template; generation its generation, made the one its
	// latest revision was made at.
	template         string
	generation, made int64
	revisions        []string
	ready            map[string]bool
	latestReady      string
	// queued: a reconcile of the Service is due; configQueued: one of its Configuration.
	queued, configQueued bool
}

// knativeState is the controllers' state of a Service; s.mu is held.
func (s *fakeAPIServer) knativeState(key types.NamespacedName) *knativeService {
	if s.knative.services == nil {
		s.knative.services = map[types.NamespacedName]*knativeService{}
	}
	st := s.knative.services[key]
	if st == nil {
		st = &knativeService{ready: map[string]bool{}}
		s.knative.services[key] = st
	}
	return st
}

// knativeFollowing runs Knative's controllers on the writes they watch: the Service's (but its
// own status writes), and its revisions' Deployments' (their pods' readiness).
func (c *campaign) knativeFollowing(next func(apiChange)) func(apiChange) {
	if !c.shape.knative {
		return next
	}
	c.server.knative = &knativeController{configLag: c.shape.knativeConfigLag}
	return func(ch apiChange) {
		next(ch)
		switch {
		case ch.gvr == knative.ServiceResource && ch.verb != "status":
			c.server.queueKnative(types.NamespacedName{Namespace: campaignNamespace, Name: ch.name}, knativeLag)
		case ch.gvr == deploymentsResource:
			for _, obj := range []runtime.Object{ch.after, ch.before} {
				if d, ok := obj.(*appsv1.Deployment); ok && d.Labels[knative.LabelService] != "" {
					c.server.queueKnative(types.NamespacedName{Namespace: d.Namespace, Name: d.Labels[knative.LabelService]}, knativeLag)
					break
				}
			}
		}
	}
}

// queueKnative has the Service's reconciler run after lag, unless a run is due already.
func (s *fakeAPIServer) queueKnative(key types.NamespacedName, lag time.Duration) {
	s.mu.Lock()
	st := s.knativeState(key)
	queued := st.queued
	st.queued = true
	s.mu.Unlock()
	if !queued {
		time.AfterFunc(lag, func() { s.reconcileKnative(key) })
	}
}

// reconcileKnative is one pass of the Service's reconciler, with the revisions' readiness.
func (s *fakeAPIServer) reconcileKnative(key types.NamespacedName) {
	s.knative.reconciling.Lock()
	defer s.knative.reconciling.Unlock()
	s.mu.Lock()
	st := s.knativeState(key)
	st.queued = false
	obj, ok := s.objects[knative.ServiceResource][key]
	if !ok {
		s.mu.Unlock()
		return
	}
	svc := obj.(*unstructured.Unstructured)
	template, _, _ := unstructured.NestedMap(svc.Object, "spec", "template")
	if text := jsonText(template); text != st.template {
		st.template = text
		st.generation++
	}
	configDue := st.made < st.generation && !st.configQueued
	st.configQueued = st.configQueued || configDue
	s.mu.Unlock()
	if configDue {
		if s.knative.configLag == 0 {
			s.reconcileConfiguration(key)
		} else {
			time.AfterFunc(s.knative.configLag, func() {
				s.knative.reconciling.Lock()
				s.reconcileConfiguration(key)
				s.knative.reconciling.Unlock()
				s.queueKnative(key, 0)
			})
		}
	}
	s.knativeRevisionsReady(key)
	s.knativeServiceStatus(key)
}

// reconcileConfiguration is the Configuration's reconciler: a Revision of the template, and its
// Deployment.
func (s *fakeAPIServer) reconcileConfiguration(key types.NamespacedName) {
	s.mu.Lock()
	st := s.knativeState(key)
	st.configQueued = false
	svcObj, ok := s.objects[knative.ServiceResource][key]
	if !ok || st.made >= st.generation {
		s.mu.Unlock()
		return
	}
	var template map[string]any
	if err := json.Unmarshal([]byte(st.template), &template); err != nil {
		s.mu.Unlock()
		panic(fmt.Sprintf("campaign: the Configuration's template: %v", err))
	}
	st.made = st.generation
	name := fmt.Sprintf("%s-%05d", key.Name, st.generation)
	st.revisions = append(st.revisions, name)
	labels := map[string]any{knative.LabelService: key.Name, "serving.knative.dev/configuration": key.Name,
		"serving.knative.dev/configurationGeneration": fmt.Sprint(st.generation)}
	spec, _ := template["spec"].(map[string]any)
	annotations, _, _ := unstructured.NestedMap(template, "metadata", "annotations")
	svc := svcObj.(*unstructured.Unstructured)
	rev := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "serving.knative.dev/v1", "kind": "Revision",
		"metadata": map[string]any{"name": name, "namespace": key.Namespace, "labels": labels, "annotations": annotations,
			"uid": fmt.Sprintf("uid-%d", s.version+1), "generation": int64(1), "creationTimestamp": time.Now().UTC().Format(time.RFC3339),
			"ownerReferences": []any{map[string]any{"apiVersion": "serving.knative.dev/v1", "kind": "Configuration", "name": key.Name, "uid": string(svc.GetUID()), "controller": true}}},
		"spec": spec,
		"status": map[string]any{"observedGeneration": int64(1), "conditions": []any{
			map[string]any{"type": "Ready", "status": "Unknown"},
		}},
	}}
	_, _ = s.commit(knative.RevisionResource, types.NamespacedName{Namespace: key.Namespace, Name: name}, nil, rev, false, "create", harnessWriter)

	var pod corev1.PodSpec
	_ = runtime.DefaultUnstructuredConverter.FromUnstructured(spec, &pod)
	podLabels := map[string]string{knative.LabelService: key.Name, "serving.knative.dev/configuration": key.Name, knative.LabelRevision: name}
	replicas := int32(knativeScale)
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name + "-deployment", Namespace: key.Namespace, Labels: podLabels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{knative.LabelRevision: name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: podLabels}, Spec: corev1.PodSpec{Containers: pod.Containers}},
		},
	}
	_, _ = s.create(deploymentsResource, key.Namespace, d, false, harnessWriter)
}

// knativeRevisionsReady marks Ready the revisions whose Deployment has a Ready pod.
func (s *fakeAPIServer) knativeRevisionsReady(key types.NamespacedName) {
	for {
		s.mu.Lock()
		st := s.knativeState(key)
		var live *unstructured.Unstructured
		for _, name := range st.revisions {
			if st.ready[name] {
				continue
			}
			d, ok := s.objects[deploymentsResource][types.NamespacedName{Namespace: key.Namespace, Name: name + "-deployment"}].(*appsv1.Deployment)
			obj, exists := s.objects[knative.RevisionResource][types.NamespacedName{Namespace: key.Namespace, Name: name}]
			if ok && exists && d.Status.ReadyReplicas > 0 {
				st.ready[name] = true
				live = obj.(*unstructured.Unstructured)
				break
			}
		}
		if live == nil {
			if n := len(st.revisions); n > 0 && st.ready[st.revisions[n-1]] {
				st.latestReady = st.revisions[n-1]
			}
			s.mu.Unlock()
			return
		}
		rev := live.DeepCopy()
		var conditions []any
		for _, typ := range []string{"Ready", "ResourcesAvailable", "ContainerHealthy"} {
			conditions = append(conditions, map[string]any{"type": typ, "status": "True"})
		}
		_ = unstructured.SetNestedSlice(rev.Object, conditions, "status", "conditions")
		_, _ = s.commit(knative.RevisionResource, types.NamespacedName{Namespace: key.Namespace, Name: rev.GetName()}, live, rev, false, "status", harnessWriter)
	}
}

// knativeServiceStatus writes the Service's status, as its reconciler and its Route's do.
func (s *fakeAPIServer) knativeServiceStatus(key types.NamespacedName) {
	s.mu.Lock()
	st := s.knativeState(key)
	obj, ok := s.objects[knative.ServiceResource][key]
	if !ok {
		s.mu.Unlock()
		return
	}
	live := obj.(*unstructured.Unstructured)
	status, _, _ := unstructured.NestedMap(live.Object, "status")
	next := map[string]any{}
	for k, v := range status {
		next[k] = v
	}
	next["observedGeneration"] = live.GetGeneration()
	configured := "True"
	if st.made < st.generation {
		// The Configuration has not reconciled the template yet: the latest revisions are
		// those of the one before (MarkConfigurationNotReconciled).
		configured = "Unknown"
	} else if n := len(st.revisions); n > 0 {
		next["latestCreatedRevisionName"] = st.revisions[n-1]
	}
	if st.latestReady != "" {
		next["latestReadyRevisionName"] = st.latestReady
	}
	routed := "True"
	if served, ok := st.resolveTraffic(live); ok {
		next["traffic"] = served
	} else {
		routed = "False"
	}
	ready := "True"
	if configured != "True" || routed != "True" {
		ready = configured
		if routed != "True" {
			ready = routed
		}
	}
	configurations := map[string]any{"type": "ConfigurationsReady", "status": configured}
	if configured == "Unknown" {
		configurations["reason"] = "OutOfDate"
		configurations["message"] = "The Configuration is still working to reflect the latest desired specification."
	}
	next["conditions"] = []any{
		configurations,
		map[string]any{"type": "Ready", "status": ready},
		map[string]any{"type": "RoutesReady", "status": routed},
	}
	if jsonText(status) == jsonText(next) {
		s.mu.Unlock()
		return
	}
	svc := live.DeepCopy()
	svc.Object["status"] = next
	_, _ = s.commit(knative.ServiceResource, key, live, svc, false, "status", harnessWriter)
}

// resolveTraffic is the traffic the Route serves for the Service's spec.traffic (everything to
// the latest Ready revision without one); false while a revision it names is missing or not
// Ready. Entries for the same revision are merged, as the Route's status shows them.
func (st *knativeService) resolveTraffic(svc *unstructured.Unstructured) ([]any, bool) {
	spec, _, _ := unstructured.NestedSlice(svc.Object, "spec", "traffic")
	if len(spec) == 0 {
		spec = []any{map[string]any{"latestRevision": true, "percent": int64(100)}}
	}
	var out []any
	for _, item := range spec {
		t, _ := item.(map[string]any)
		rev, _ := t["revisionName"].(string)
		latest, _ := t["latestRevision"].(bool)
		if latest {
			rev = st.latestReady
		}
		if rev == "" || !st.ready[rev] {
			return nil, false
		}
		pct, _ := t["percent"].(int64)
		merged := false
		for _, o := range out {
			entry := o.(map[string]any)
			if entry["revisionName"] == rev && entry["latestRevision"] == latest {
				entry["percent"] = entry["percent"].(int64) + pct
				merged = true
			}
		}
		if !merged {
			out = append(out, map[string]any{"revisionName": rev, "latestRevision": latest, "percent": pct})
		}
	}
	return out, true
}

// serveKnativeService answers a write of a Knative Service as the API server does for a
// resource with a status subresource: the main resource's writes keep the live status, and a
// status write keeps the rest.
func (s *fakeAPIServer) serveKnativeService(action k8stesting.UpdateActionImpl, by string) (runtime.Object, error) {
	ns := action.GetNamespace()
	obj, ok := action.GetObject().(*unstructured.Unstructured)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("a %T is no Knative Service", action.GetObject()))
	}
	obj = obj.DeepCopy()
	if live, err := s.get(knative.ServiceResource, ns, obj.GetName()); err == nil {
		l := live.(*unstructured.Unstructured)
		if action.GetSubresource() == "status" {
			status := obj.Object["status"]
			obj = l.DeepCopy()
			obj.SetResourceVersion(action.GetObject().(*unstructured.Unstructured).GetResourceVersion())
			obj.Object["status"] = status
		} else if status, found := l.Object["status"]; found {
			obj.Object["status"] = status
		} else {
			delete(obj.Object, "status")
		}
	}
	return s.update(knative.ServiceResource, ns, obj, len(action.UpdateOptions.DryRun) > 0, by)
}

// knativePods lists the pods of the revisions' Deployments, Ready as their status says.
// s.mu is held.
func (s *fakeAPIServer) knativePods(ns string) []corev1.Pod {
	var pods []corev1.Pod
	for key, obj := range s.objects[deploymentsResource] {
		d := obj.(*appsv1.Deployment)
		if (ns != "" && key.Namespace != ns) || d.Spec.Template.Labels[knative.LabelRevision] == "" {
			continue
		}
		for i := range desiredReplicas(d) {
			ready := corev1.ConditionFalse
			if i < d.Status.ReadyReplicas {
				ready = corev1.ConditionTrue
			}
			pods = append(pods, corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", d.Name, i), Namespace: key.Namespace, Labels: d.Spec.Template.Labels},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}},
			})
		}
	}
	return pods
}

// knativeView is the judge's view of the Service: its pins, traffic and latest revisions.
type knativeView struct {
	exists                     bool
	primary, canary            string
	traffic                    []any
	latestReady, latestCreated string
}

// knativeServiceView reads the Service; s.mu is held.
func (c *campaign) knativeServiceView() knativeView {
	obj, ok := c.server.objects[knative.ServiceResource][types.NamespacedName{Namespace: campaignNamespace, Name: campaignTarget}]
	if !ok {
		return knativeView{}
	}
	svc := obj.(*unstructured.Unstructured)
	a := svc.GetAnnotations()
	v := knativeView{exists: true, primary: a[knative.AnnotationPrimaryRevision], canary: a[knative.AnnotationCanaryRevision]}
	v.traffic, _, _ = unstructured.NestedSlice(svc.Object, "spec", "traffic")
	v.latestReady, _, _ = unstructured.NestedString(svc.Object, "status", "latestReadyRevisionName")
	v.latestCreated, _, _ = unstructured.NestedString(svc.Object, "status", "latestCreatedRevisionName")
	return v
}

func (c *campaign) knativeNow() knativeView {
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	return c.knativeServiceView()
}

// knativeRevisionRuns is what the pods of a revision run (its template's image); s.mu is held.
func (c *campaign) knativeRevisionRuns(revision string) string {
	if revision == "" {
		return ""
	}
	if runs := c.pods.running(campaignNamespace, revision+"-deployment"); runs != "" {
		return runs
	}
	obj, ok := c.server.objects[knative.RevisionResource][types.NamespacedName{Namespace: campaignNamespace, Name: revision}]
	if !ok {
		return ""
	}
	containers, _, _ := unstructured.NestedSlice(obj.(*unstructured.Unstructured).Object, "spec", "containers")
	if len(containers) == 0 {
		return ""
	}
	image, _ := containers[0].(map[string]any)["image"].(string)
	return image
}

// knativeRunning is what a side runs: the primary the pinned primary revision, the canary the
// pinned canary revision; "" with none.
func (c *campaign) knativeRunning(name string) string {
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	v := c.knativeServiceView()
	if name == campaignPrimary {
		return c.knativeRevisionRuns(v.primary)
	}
	return c.knativeRevisionRuns(v.canary)
}

// knativeSides are the sides of the Service's spec.traffic: the pinned primary's and the pinned
// canary's entries, and the apex for a revision neither pin names (all of them while nothing
// is pinned: Knative's default sends everything to the latest Ready revision).
func (c *campaign) knativeSides() []trafficSide {
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	v := c.knativeServiceView()
	if !v.exists {
		return nil
	}
	traffic := v.traffic
	if len(traffic) == 0 {
		traffic = []any{map[string]any{"latestRevision": true, "percent": int64(100)}}
	}
	side := func(name, revision string) trafficSide {
		out := trafficSide{router: "knative", name: name}
		if revision == "" {
			return out
		}
		out.revision = c.knativeRevisionRuns(revision)
		out.template = out.revision
		if d, ok := c.server.objects[deploymentsResource][types.NamespacedName{Namespace: campaignNamespace, Name: revision + "-deployment"}].(*appsv1.Deployment); ok {
			out.serves = d.Status.ReadyReplicas > 0 && desiredReplicas(d) > 0
		}
		return out
	}
	var sides []trafficSide
	index := map[string]int{}
	add := func(name, revision string, weight int) {
		if i, ok := index[name]; ok {
			sides[i].weight += weight
			return
		}
		index[name] = len(sides)
		s := side(name, revision)
		s.weight = weight
		sides = append(sides, s)
	}
	if v.primary != "" {
		add("primary", v.primary, 0)
		canary := v.canary
		if canary == v.primary {
			canary = ""
		}
		add("canary", canary, 0)
	}
	for _, item := range traffic {
		t, _ := item.(map[string]any)
		rev, _ := t["revisionName"].(string)
		if latest, _ := t["latestRevision"].(bool); latest {
			rev = v.latestReady
		}
		pct, _ := t["percent"].(int64)
		switch rev {
		case "":
			// No revision is Ready yet: the Route serves nothing.
		case v.primary:
			add("primary", rev, int(pct))
		case v.canary:
			add("canary", rev, int(pct))
		default:
			name := "apex"
			if i, ok := index[name]; ok && sides[i].revision != c.knativeRevisionRuns(rev) {
				name = "revision " + rev
			}
			add(name, rev, int(pct))
		}
	}
	return sides
}

// knativePinned reports a Service that still holds a pin of the release.
func (c *campaign) knativePinned() bool {
	if !c.shape.knative {
		return false
	}
	v := c.knativeNow()
	return v.primary != "" || v.canary != ""
}

// knativePinWrite is clause 2 for a run's write that pins another primary revision: it is
// judged as a primary restart. And clause 3: a run writes spec.traffic between the pinned
// revisions only, by name, so that the release's split is what the Service holds.
func (c *campaign) knativePinWrite(ch apiChange) {
	if ch.gvr != knative.ServiceResource || ch.verb == "status" {
		return
	}
	c.knativeTrafficOffPins(ch)
	pin := func(obj runtime.Object) string {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return u.GetAnnotations()[knative.AnnotationPrimaryRevision]
		}
		return ""
	}
	before, after := pin(ch.before), pin(ch.after)
	if after == before || after == "" {
		return
	}
	c.judge.mu.Lock()
	c.judge.primaryEditedBehind = ch.by == harnessWriter
	c.judge.mu.Unlock()
	if ch.by == harnessWriter {
		return
	}
	c.server.mu.Lock()
	runs := c.knativeRevisionRuns(after)
	c.server.mu.Unlock()
	c.cover("Knative: a primary revision pinned")
	c.judge.judgeNewPrimary(ch.by, runs, after)
	if c.judge.isAllowed(runs) {
		// The pin is the promotion (or the initialisation): what it pinned is the promoted
		// revision from now on, which clause 3 holds the primary to (a promote-now of a
		// revision allowed before, say, a revert's template).
		c.judge.mu.Lock()
		c.judge.passed = runs
		c.judge.mu.Unlock()
	}
}

// knativeTrafficOffPins fails a run's write that leaves spec.traffic naming a revision no pin
// names (or the latest revision) while the release pins a primary.
func (c *campaign) knativeTrafficOffPins(ch apiChange) {
	svc, ok := ch.after.(*unstructured.Unstructured)
	if !ok || ch.by == harnessWriter {
		return
	}
	a := svc.GetAnnotations()
	primary, canary := a[knative.AnnotationPrimaryRevision], a[knative.AnnotationCanaryRevision]
	if primary == "" {
		return // handed back (Finalize), or never the release's
	}
	traffic, _, _ := unstructured.NestedSlice(svc.Object, "spec", "traffic")
	for _, item := range traffic {
		t, _ := item.(map[string]any)
		rev, _ := t["revisionName"].(string)
		if latest, _ := t["latestRevision"].(bool); latest || (rev != primary && rev != canary) {
			c.judge.fail("clause 3", "", "%s's %s of Knative Service %s wrote spec.traffic %s, which is no split between the pinned primary %s and canary %q",
				ch.by, ch.verb, campaignTarget, jsonText(traffic), primary, canary)
			return
		}
	}
}

// checkKnativeReleased is clause 3 for an apply that succeeded: its status says the release
// is done with the configured template, so the Service's primary runs it (analysed and
// promoted, or refused: then the apply fails). An apply that found "nothing to release" while
// Knative had not made a revision of the template yet claims a release that never ran (the
// next plan shows the drift, but the apply's own status is wrong). Not judged when the
// schedule edited the template in the command, or another host applied meanwhile.
func (c *campaign) checkKnativeReleased() {
	c.mu.Lock()
	behind := c.targetEdited || c.otherHostRan
	c.mu.Unlock()
	if !c.shape.knative || behind || c.judge.primaryEditedBehindRelease() {
		return
	}
	if want, got := c.ws.revision.String(), c.running(campaignPrimary); got != want {
		c.judge.fail("clause 3", "", "the apply of template %s succeeded, but the pinned primary revision runs %s (latest created revision: %q)",
			want, podsOrNone(got), c.knativeNow().latestCreated)
	}
}

// knativeOutOfBand does an edit behind the release's back on the Service; false for an edit
// that is not the Service's (the caller does it).
func (c *campaign) knativeOutOfBand(ctx context.Context, kind outOfBand, when string) bool {
	var err error
	switch kind {
	case oobEditTarget, oobEditPrimary:
		// The Service is its own primary: its template is the only one the user edits.
		c.mu.Lock()
		c.targetEdited = true
		c.mu.Unlock()
		err = c.applyKnativeService(ctx, revisionSpec{image: c.nextImage(keyedCoin(c.seed, "oob quality "+when) < 0.5)})
	case oobDeleteRouter:
		err = fmt.Errorf("the release's router object is the user's Knative Service")
	case oobDeleteStatePrimary:
		// It has no primary copy: its state ConfigMap goes.
		err = c.harness.kube.CoreV1().ConfigMaps(campaignNamespace).Delete(ctx, rollout.StateConfigMapName(campaignRelease), metav1.DeleteOptions{})
		c.mu.Lock()
		c.stateDeleted = true
		c.mu.Unlock()
	default:
		return false
	}
	c.disrupted()
	if err != nil {
		c.tracef("out of band, %s: %s (%v)", when, kind, err)
		return true
	}
	c.tracef("out of band, %s: %s", when, kind)
	c.cover("out of band: " + string(kind) + " (Knative)")
	return true
}

// loseKnativeReadiness takes the Ready pods of a side's pinned revision away: the primary's
// (the latest Ready revision's while none is pinned), or the canary's while it is another.
func (c *campaign) loseKnativeReadiness(side string, recovery time.Duration, when string) {
	v := c.knativeNow()
	revision := v.primary
	switch {
	case side == "canary" && v.canary != v.primary:
		revision = v.canary
	case side == "canary":
		revision = ""
	case revision == "":
		revision = v.latestReady
	}
	if revision == "" {
		return
	}
	if c.server.breakPods(campaignNamespace, revision+"-deployment", recovery) {
		c.disrupted()
		c.tracef("the pods of Knative revision %s (%s) lost their readiness %s (back after %s; 0: at their next restart)", revision, side, when, recovery)
		c.cover("readiness loss: " + side + " (Knative)")
	}
}
