package provider

// StatefulSets in the campaign (issue 32 item 4): about one schedule in four releases a
// StatefulSet (target_ref.kind) in place, through its RollingUpdate partition, on mesh_provider
// "kubernetes". The fake API server plays the StatefulSet controller with partition semantics:
// the set's template names its update revision (a ControllerRevision the controller keeps),
// pods with an ordinal at or above the partition are rolled to it one at a time from the
// highest, each once the one before is Ready, the others keep the current revision, a scale-up
// gives each new pod the revision its ordinal's side of the partition runs, and once every pod
// runs the update revision it becomes the current one. Pods are listed with their
// controller-revision-hash and Ready condition, as the driver reads them.
//
// The judge reads the pods, never the engine's record:
//   - clause 1: the set's Service sends each request to a Ready pod, so a side's share of the
//     traffic is its share of the Ready pods (as for a replica ratio); a run's write that
//     leaves no pod Ready leaves the apex host unanswered.
//   - clause 2: a run that lowers the partition for a revision that has not passed analysis
//     admits no more pods than the step the oracle saw it reach (PodsForWeight of that step's
//     weight, at the set's replica count), and a revision runs on every pod only once it
//     passed (the run's promotion), when the release's first initialisation pinned it (the
//     revision its record promoted, which the judge maps to what its pods run through the
//     set's ControllerRevisions: the one place the judge reads the record), or through the
//     operator's promote-now. The oracle counts a passing check towards the next step only when the pods
//     on the revision were within the step it had reached: a check taken while an autoscaler
//     put more pods on it counts for nothing (hole 4).
//   - clause 3 and the controls read the pods' share through the driver's own GetRoutes.

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/workload/statefulset"
)

// statefulSetShare is the share of schedules that release a StatefulSet.
const statefulSetShare = 1.0 / 4

// statefulSetReplicas is a StatefulSet's replica count before any autoscaler acts.
const statefulSetReplicas = 5

var (
	statefulSetsResource        = appsv1.SchemeGroupVersion.WithResource("statefulsets")
	controllerRevisionsResource = appsv1.SchemeGroupVersion.WithResource("controllerrevisions")
	podsResource                = corev1.SchemeGroupVersion.WithResource("pods")
)

// drawStatefulSet makes about statefulSetShare of the schedules release a StatefulSet, keyed
// apart from the schedule's stream, unless a replica ratio or a DaemonSet was drawn. What a
// release in place cannot run (the provider refuses it at plan time) is left out of its shape:
// a manifest, iterations, step_weight_promotion, rollback_window, an event webhook (a release in
// place runs the rollout and confirm-* webhooks only), a replacement onto another router, and a
// tracked ConfigMap (a StatefulSet's revision is its template: a config-only change is no
// release of it).
func drawStatefulSet(s *campaignSchedule) {
	if s.shape.ratioRouted() || s.shape.daemonSet || s.shape.knative || keyedCoin(s.seed, "statefulset") >= statefulSetShare {
		return
	}
	sh := &s.shape
	sh.statefulSet, sh.manifest, sh.router, sh.strategy, sh.replicas = true, false, "kubernetes", strategyCanary, statefulSetReplicas
	if sh.steps == nil {
		sh.steps = [][]int{{20, 40}, {10, 50}, {30}}[int(keyedCoin(s.seed, "statefulset steps")*3)]
	}
	sh.promotionSteps, sh.rollbackWindow, sh.eventSinkDelay, sh.trackConfig = false, 0, 0, false
	for i := range s.ops {
		s.ops[i].newRouter = ""
		if s.ops[i].kind == opNewConfig {
			s.ops[i].kind = opNewTemplate
		}
	}
	drawAutoscaler(s)
}

// statefulSetConfig makes a configuration's target a StatefulSet.
func (s releaseShape) statefulSetConfig(config map[string]any) {
	if s.statefulSet {
		config["target_ref"] = map[string]any{"name": campaignTarget, "kind": statefulset.Kind}
	}
}

// statefulSetObject is the StatefulSet a revision runs, without a partition: the release's
// first initialisation holds it.
func (s releaseShape) statefulSetObject(rev revisionSpec) *appsv1.StatefulSet {
	d := s.workload(rev)
	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: campaignTarget, Namespace: campaignNamespace},
		Spec: appsv1.StatefulSetSpec{Replicas: d.Spec.Replicas, Selector: d.Spec.Selector, Template: d.Spec.Template, ServiceName: campaignTarget,
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}},
	}
}

// stsPod is one pod of a simulated StatefulSet.
type stsPod struct {
	// revision is its controller revision, runs what that revision runs (image and config).
	revision, runs string
	started        bool
	broken         bool
	seq            int
}

func (p *stsPod) ready() bool { return p.started && !p.broken }

// stsState is what the simulated StatefulSet controller knows of one set.
type stsState struct {
	pods            map[int32]*stsPod
	current, update string
	// runs is what each revision's pods run.
	runs map[string]string
	seq  int
}

// templateRevisionName names a template's revision as the controller does, by a hash of it.
func templateRevisionName(name string, template corev1.PodTemplateSpec) string {
	raw, _ := json.Marshal(template)
	h := fnv.New32a()
	_, _ = h.Write(raw)
	return fmt.Sprintf("%s-%08x", name, h.Sum32())
}

// serveStatefulSets answers the statefulsets resource, and runs the controller after each write.
func (s *fakeAPIServer) serveStatefulSet(action k8stesting.Action, by string) (runtime.Object, error) {
	ns := action.GetNamespace()
	var key types.NamespacedName
	var obj runtime.Object
	var err error
	switch a := action.(type) {
	case k8stesting.GetActionImpl:
		return s.get(statefulSetsResource, ns, a.GetName())
	case k8stesting.ListActionImpl:
		return s.list(statefulSetsResource, a.GetKind(), ns)
	case k8stesting.CreateActionImpl:
		set, ok := a.GetObject().(*appsv1.StatefulSet)
		if !ok {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("a %T is no StatefulSet", a.GetObject()))
		}
		key = types.NamespacedName{Namespace: ns, Name: set.Name}
		obj, err = s.create(statefulSetsResource, ns, set, len(a.CreateOptions.DryRun) > 0, by)
	case k8stesting.UpdateActionImpl:
		set, ok := a.GetObject().(*appsv1.StatefulSet)
		if !ok || a.GetSubresource() != "" {
			return nil, apierrors.NewMethodNotSupported(statefulSetsResource.GroupResource(), "update "+a.GetSubresource())
		}
		key = types.NamespacedName{Namespace: ns, Name: set.Name}
		obj, err = s.update(statefulSetsResource, ns, set, len(a.UpdateOptions.DryRun) > 0, by)
	case k8stesting.DeleteActionImpl:
		key = types.NamespacedName{Namespace: ns, Name: a.GetName()}
		err = s.delete(statefulSetsResource, ns, a.GetName(), a.DeleteOptions.Preconditions, by)
	default:
		return nil, apierrors.NewMethodNotSupported(statefulSetsResource.GroupResource(), action.GetVerb())
	}
	if err == nil {
		s.syncStatefulSet(key)
	}
	return obj, err
}

// statefulSetState is the controller's state of a set; s.mu is held.
func (s *fakeAPIServer) statefulSetState(key types.NamespacedName) *stsState {
	if s.statefulSets == nil {
		s.statefulSets = map[types.NamespacedName]*stsState{}
	}
	st := s.statefulSets[key]
	if st == nil {
		st = &stsState{pods: map[int32]*stsPod{}, runs: map[string]string{}}
		s.statefulSets[key] = st
	}
	return st
}

// syncStatefulSet is the StatefulSet controller's pass over one set: the revisions, the pods
// the partition and the replica count ask for (one pod rolled at a time, from the highest
// ordinal, each once the pods rolled before are Ready), and the status.
func (s *fakeAPIServer) syncStatefulSet(key types.NamespacedName) {
	s.mu.Lock()
	live, ok := s.objects[statefulSetsResource][key].(*appsv1.StatefulSet)
	if !ok {
		delete(s.statefulSets, key)
		s.mu.Unlock()
		return
	}
	st := s.statefulSetState(key)
	set := live.DeepCopy()
	rev := templateRevisionName(set.Name, set.Spec.Template)
	if _, known := st.runs[rev]; !known {
		st.runs[rev] = s.revisionOf(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace}, Spec: appsv1.DeploymentSpec{Template: set.Spec.Template}})
		raw, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": set.Spec.Template}})
		if s.objects[controllerRevisionsResource] == nil {
			s.objects[controllerRevisionsResource] = map[types.NamespacedName]runtime.Object{}
		}
		s.objects[controllerRevisionsResource][types.NamespacedName{Namespace: key.Namespace, Name: rev}] = &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: rev, Namespace: key.Namespace, ResourceVersion: "1"}, Data: runtime.RawExtension{Raw: raw}}
	}
	if st.current == "" {
		st.current = rev
	}
	st.update = rev
	n, p := statefulset.Replicas(set), statefulset.Partition(set)
	for ord := range st.pods {
		if ord >= n {
			delete(st.pods, ord)
		}
	}
	for ord := range n {
		if st.pods[ord] == nil {
			want := st.current
			if ord >= p {
				want = st.update
			}
			s.startStatefulSetPod(key, st, ord, want)
		}
	}
	for target := n - 1; target >= p && target >= 0; target-- {
		pod := st.pods[target]
		if pod.revision != st.update {
			pod = s.startStatefulSetPod(key, st, target, st.update)
		}
		if !pod.ready() {
			break
		}
	}
	all := n > 0 && int32(len(st.pods)) == n
	for _, pod := range st.pods {
		all = all && pod.revision == st.update
	}
	if all {
		st.current = st.update
	}
	status := appsv1.StatefulSetStatus{ObservedGeneration: set.Generation, Replicas: n, CurrentRevision: st.current, UpdateRevision: st.update}
	for _, pod := range st.pods {
		if pod.ready() {
			status.ReadyReplicas++
			status.AvailableReplicas++
		}
		if pod.revision == st.current {
			status.CurrentReplicas++
		}
		if pod.revision == st.update {
			status.UpdatedReplicas++
		}
	}
	if equality.Semantic.DeepEqual(status, live.Status) {
		s.mu.Unlock()
		return
	}
	set.Status = status
	_, _ = s.commit(statefulSetsResource, key, live, set, false, "status", harnessWriter)
}

// startStatefulSetPod (re)creates the pod of an ordinal on a revision: Ready after the pods'
// ready delay. s.mu is held.
func (s *fakeAPIServer) startStatefulSetPod(key types.NamespacedName, st *stsState, ord int32, revision string) *stsPod {
	st.seq++
	pod := &stsPod{revision: revision, runs: st.runs[revision], seq: st.seq, started: s.pods.readyDelay == 0}
	st.pods[ord] = pod
	if !pod.started {
		seq := st.seq
		time.AfterFunc(s.pods.readyDelay, func() {
			s.mu.Lock()
			if live := s.statefulSets[key]; live != nil && live.pods[ord] != nil && live.pods[ord].seq == seq {
				live.pods[ord].started = true
			}
			s.mu.Unlock()
			s.syncStatefulSet(key)
		})
	}
	return pod
}

// statefulSetPods lists the simulated sets' pods, as the StatefulSet controller names them.
func (s *fakeAPIServer) statefulSetPods(ns string) *corev1.PodList {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := &corev1.PodList{}
	list.ResourceVersion = fmt.Sprint(s.version)
	for key, st := range s.statefulSets {
		set, ok := s.objects[statefulSetsResource][key].(*appsv1.StatefulSet)
		if !ok || (ns != "" && key.Namespace != ns) {
			continue
		}
		for ord, pod := range st.pods {
			labels := map[string]string{appsv1.ControllerRevisionHashLabelKey: pod.revision}
			for k, v := range set.Spec.Template.Labels {
				labels[k] = v
			}
			ready := corev1.ConditionFalse
			if pod.ready() {
				ready = corev1.ConditionTrue
			}
			list.Items = append(list.Items, corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", key.Name, ord), Namespace: key.Namespace, Labels: labels},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}},
			})
		}
	}
	return list
}

// servePods answers a list of pods with the StatefulSets' pods; false for any other request.
func (s *fakeAPIServer) servePods(action k8stesting.Action) (runtime.Object, bool) {
	s.mu.Lock()
	simulated := len(s.statefulSets) > 0 || s.knative != nil
	s.mu.Unlock()
	if _, isList := action.(k8stesting.ListActionImpl); !isList || !simulated || action.GetResource() != podsResource {
		return nil, false
	}
	list := s.statefulSetPods(action.GetNamespace())
	s.mu.Lock()
	list.Items = append(list.Items, s.knativePods(action.GetNamespace())...)
	s.mu.Unlock()
	return list, true
}

// deleteStatefulSetPod deletes a simulated set's pod, which the controller then recreates (on
// its current revision below the partition, as kube-controller-manager does); false for any
// other request.
func (s *fakeAPIServer) deleteStatefulSetPod(action k8stesting.Action) (bool, error) {
	a, ok := action.(k8stesting.DeleteActionImpl)
	if !ok || action.GetResource() != podsResource {
		return false, nil
	}
	s.mu.Lock()
	var key types.NamespacedName
	found, simulated := false, len(s.statefulSets) > 0
	for k, st := range s.statefulSets {
		if k.Namespace != a.GetNamespace() || !strings.HasPrefix(a.GetName(), k.Name+"-") {
			continue
		}
		ord, err := strconv.ParseInt(strings.TrimPrefix(a.GetName(), k.Name+"-"), 10, 32)
		if err != nil || st.pods[int32(ord)] == nil {
			continue
		}
		delete(st.pods, int32(ord))
		key, found = k, true
		break
	}
	s.mu.Unlock()
	if !found {
		return simulated, apierrors.NewNotFound(podsResource.GroupResource(), a.GetName())
	}
	s.syncStatefulSet(key)
	return true, nil
}

// breakStatefulSetPods takes the Ready pods of one side of the set away (the canary: the pods
// not on the current revision), until they restart or recoverAfter passes.
func (s *fakeAPIServer) breakStatefulSetPods(key types.NamespacedName, side string, recoverAfter time.Duration) bool {
	s.mu.Lock()
	st := s.statefulSets[key]
	var broken []int
	if st != nil {
		for _, pod := range st.pods {
			if pod.ready() && (pod.revision == st.current) == (side == "primary") {
				pod.broken = true
				broken = append(broken, pod.seq)
			}
		}
	}
	s.mu.Unlock()
	if len(broken) == 0 {
		return false
	}
	s.syncStatefulSet(key)
	if recoverAfter > 0 {
		time.AfterFunc(recoverAfter, func() { s.healStatefulSetPods(key, broken) })
	}
	return true
}

// healStatefulSetPods gives the pods of seqs (all, when nil) their readiness back.
func (s *fakeAPIServer) healStatefulSetPods(key types.NamespacedName, seqs []int) {
	s.mu.Lock()
	if st := s.statefulSets[key]; st != nil {
		for _, pod := range st.pods {
			if seqs == nil || slices.Contains(seqs, pod.seq) {
				pod.broken = false
			}
		}
	}
	s.mu.Unlock()
	s.syncStatefulSet(key)
}

// stsView is the judge's view of the set: its replica count and partition, and its pods.
type stsView struct {
	exists               bool
	replicas, partition  int32
	current, update      string
	currentRuns, updRuns string
	// onCurrent and onOther count the pods, and the Ready ones, on the current revision and
	// on any other.
	onCurrent, readyCurrent, onOther, readyOther int32
	otherRuns                                    string
	// onUpdate counts the pods on the update revision.
	onUpdate int32
}

func (c *campaign) statefulSetView() stsView {
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	key := types.NamespacedName{Namespace: campaignNamespace, Name: campaignTarget}
	set, ok := c.server.objects[statefulSetsResource][key].(*appsv1.StatefulSet)
	st := c.server.statefulSets[key]
	if !ok || st == nil {
		return stsView{}
	}
	v := stsView{exists: true, replicas: statefulset.Replicas(set), partition: statefulset.Partition(set), current: st.current, update: st.update,
		currentRuns: st.runs[st.current], updRuns: st.runs[st.update]}
	for _, pod := range st.pods {
		if pod.revision == st.current {
			v.onCurrent++
			if pod.ready() {
				v.readyCurrent++
			}
			continue
		}
		v.onOther++
		v.otherRuns = pod.runs
		if pod.revision == st.update {
			v.onUpdate++
		}
		if pod.ready() {
			v.readyOther++
		}
	}
	return v
}

// statefulSetRunning is what a side of the set runs: the primary the current revision, the
// canary the update revision while it is another; "" with none.
func (c *campaign) statefulSetRunning(name string) string {
	v := c.statefulSetView()
	switch {
	case !v.exists:
		return ""
	case name == campaignPrimary && v.onCurrent > 0:
		return v.currentRuns
	case name == campaignTarget && v.update != v.current && v.onOther > 0:
		return v.updRuns
	}
	return ""
}

// statefulSetSides are the set's two sides behind its Service: each gets its share of the
// Ready pods, as kube-proxy sends the requests.
func (c *campaign) statefulSetSides() []trafficSide {
	v := c.statefulSetView()
	if !v.exists {
		return nil
	}
	primary := trafficSide{router: "kubernetes", name: "primary", revision: v.currentRuns, template: v.currentRuns, ratio: true, inPlace: true,
		pods: v.readyCurrent, beside: v.readyOther, replicas: v.replicas}
	canary := trafficSide{router: "kubernetes", name: "canary", revision: v.otherRuns, template: v.updRuns, ratio: true, inPlace: true,
		pods: v.readyOther, beside: v.readyCurrent, replicas: v.replicas}
	if total := primary.pods + canary.pods; total > 0 {
		canary.weight = int(100 * canary.pods / total)
		if canary.pods > 0 && canary.weight == 0 {
			canary.weight = 1
		}
		primary.weight = 100 - canary.weight
	} else {
		// No pod Ready: the Service has no endpoint, the requests go nowhere.
		primary.weight = 100
	}
	primary.serves, canary.serves = primary.pods > 0, canary.pods > 0
	return []trafficSide{primary, canary}
}

// statefulSetRollingBack reports a set whose template is back on its current revision while
// pods of another still run: the rollback is under way, one pod at a time.
func (c *campaign) statefulSetRollingBack() bool {
	v := c.statefulSetView()
	return v.exists && v.update == v.current
}

// statefulSetPodsRunning counts the set's pods that run runs (an image and config, as a
// revision's pods run it).
func (c *campaign) statefulSetPodsRunning(runs string) int {
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	st := c.server.statefulSets[types.NamespacedName{Namespace: campaignNamespace, Name: campaignTarget}]
	if st == nil {
		return 0
	}
	n := 0
	for _, pod := range st.pods {
		if pod.runs == runs {
			n++
		}
	}
	return n
}

// campaignStatefulSet is the judge's memory of the set's writes.
type campaignStatefulSet struct {
	mu sync.Mutex
	// reached is, by revision, how many steps its passing checks within the step passed.
	reached map[string]int
	// partitionBy and templateBy wrote the partition and the template last, at partitionAt
	// and templateAt.
	partitionBy, templateBy string
	partitionAt, templateAt int
	writes                  int
	// wedged: the convergence met S2 (or S3); raisedByHand: the schedule raised the
	// partition behind the release.
	wedged, raisedByHand, heldOver bool
	// s1Revision is the revision an S1 initialisation rolled out.
	s1Revision  string
	initialised bool
}

// statefulSets follows the writes for the StatefulSet's judge.
func (c *campaign) statefulSets(next func(apiChange)) func(apiChange) {
	if !c.shape.statefulSet {
		return next
	}
	c.sts = &campaignStatefulSet{reached: map[string]int{}}
	return func(ch apiChange) {
		next(ch)
		switch {
		case ch.gvr == statefulSetsResource:
			c.judgeStatefulSetWrite(ch)
		case ch.gvr == configMapsResource && ch.name == rollout.StateConfigMapName(campaignRelease):
			initialised := c.releaseInitialised()
			c.sts.mu.Lock()
			first := initialised && !c.sts.initialised
			c.sts.initialised = initialised
			c.sts.mu.Unlock()
			if first {
				c.allowFirstInitialisation()
			}
		}
	}
}

// allowFirstInitialisation allows, when the record first says the release is initialised, the
// revision its very first initialisation pinned: the one the record promoted (LastPromotedSpec,
// a ControllerRevision's name), by what that revision's pods run. Not whatever the pods run at
// that write: an edit of the template behind the release's back, while nothing held the set's
// partition yet, may have rolled them to a revision no initialisation pinned (seed 1876).
func (c *campaign) allowFirstInitialisation() {
	st, ok := c.recordedStatus()
	if !ok || st.LastPromotedSpec == "" {
		c.tracef("oracle: the record that says the release is initialised names no promoted revision: no first initialisation to allow")
		return
	}
	if runs := c.statefulSetRevisionRuns(st.LastPromotedSpec); runs != "" {
		c.judge.allow(runs, "the release's first initialisation")
		return
	}
	c.tracef("oracle: the first initialisation's revision %s is none of StatefulSet %s's ControllerRevisions", st.LastPromotedSpec, campaignTarget)
}

// statefulSetRevisionRuns is what the pods of the set's ControllerRevision revision run; "" for
// a revision the controller never made.
func (c *campaign) statefulSetRevisionRuns(revision string) string {
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	if st := c.server.statefulSets[types.NamespacedName{Namespace: campaignNamespace, Name: campaignTarget}]; st != nil {
		return st.runs[revision]
	}
	return ""
}

// judgeStatefulSetWrite is clause 2 for the set: a run's write of the partition admits no more
// pods than the step reached, and the pods go all onto a revision only when it may be the
// primary.
func (c *campaign) judgeStatefulSetWrite(ch apiChange) {
	before, _ := ch.before.(*appsv1.StatefulSet)
	after, _ := ch.after.(*appsv1.StatefulSet)
	if after == nil {
		return
	}
	c.sts.mu.Lock()
	c.sts.writes++
	now := c.sts.writes
	if ch.verb != "status" {
		if before == nil || statefulset.Partition(before) != statefulset.Partition(after) {
			c.sts.partitionBy, c.sts.partitionAt = ch.by, now
		}
		if before == nil || !equality.Semantic.DeepEqual(before.Spec.Template, after.Spec.Template) {
			c.sts.templateBy, c.sts.templateAt = ch.by, now
		}
	}
	responsible := c.sts.partitionBy
	if c.sts.templateAt > c.sts.partitionAt {
		responsible = c.sts.templateBy
	}
	c.sts.mu.Unlock()
	v := c.statefulSetView()
	if ch.by != harnessWriter && before != nil && statefulset.Partition(after) < statefulset.Partition(before) && v.update != v.current {
		c.judgeControlsOnPartition(ch, before, after)
		if c.releaseInitialised() {
			c.judgeAdmitted(ch, after, v)
		}
	}
	if before == nil || after.Status.CurrentRevision == before.Status.CurrentRevision || after.Status.CurrentRevision == "" || before.Status.CurrentRevision == "" {
		return
	}
	runs := v.currentRuns
	c.judge.mu.Lock()
	c.judge.primaryEditedBehind = responsible == harnessWriter
	c.judge.mu.Unlock()
	if responsible == harnessWriter || runs == "" {
		return
	}
	if !c.releaseInitialised() {
		c.judge.allow(runs, "the release's first initialisation")
		return
	}
	if !c.judge.isAllowed(runs) && c.promoteNowAllows(runs) {
		c.judge.allow(runs, "the operator's promote-now, no check of it failed in this command")
		c.judge.mu.Lock()
		c.judge.passed = runs
		c.judge.mu.Unlock()
	}
	c.cover("StatefulSet: every pod on a new revision")
	if !c.judge.isAllowed(runs) {
		c.judge.fail("clause 2", c.classifyStatefulSet(runs), "every pod of StatefulSet %s runs %s since %s's write, which never passed analysis (allowed: %s)",
			campaignTarget, runs, responsible, c.judge.allowedText())
	}
}

// judgeAdmitted: a run lowered the partition; a revision that may not be the primary gets no
// more pods than the step the oracle saw it reach.
func (c *campaign) judgeAdmitted(ch apiChange, after *appsv1.StatefulSet, v stsView) {
	runs := v.updRuns
	if runs != "" && statefulset.Partition(after) == 0 && !c.judge.isAllowed(runs) && c.promoteNowAllows(runs) {
		// The promotion's write: the pods roll one by one, the last perhaps in a later command.
		c.judge.allow(runs, "the operator's promote-now, no check of it failed in this command")
		c.judge.mu.Lock()
		c.judge.passed = runs
		c.judge.mu.Unlock()
	}
	if runs == "" || c.judge.isAllowed(runs) || c.promoteNowAllows(runs) {
		return
	}
	n := statefulset.Replicas(after)
	admitted := max(0, n-statefulset.Partition(after))
	c.sts.mu.Lock()
	reached := c.sts.reached[runs]
	c.sts.mu.Unlock()
	steps := c.shape.steps
	allowed := statefulset.PodsForWeight(steps[min(reached, len(steps)-1)], n)
	c.cover("StatefulSet: partition lowered by a run")
	if admitted > allowed {
		c.judge.fail("clause 2", c.classifyStatefulSet(runs), "%s lowered the partition of StatefulSet %s to %d: %d of %d pods for %s, which passed %d of its steps %v, and the step it reached allows %d",
			ch.by, campaignTarget, statefulset.Partition(after), admitted, n, runs, reached, steps, allowed)
	}
}

// statefulSetCheckPasses is the oracle's part for a passing check of revision on the set: it
// counts for the step reached only when the pods on the revision were within that step; the
// revision passed its analysis once it counted for every step.
func (c *campaign) statefulSetCheckPasses(revision string) bool {
	v := c.statefulSetView()
	if !v.exists || v.update == v.current || v.updRuns != revision || v.onUpdate == 0 {
		return false
	}
	steps := c.shape.steps
	c.sts.mu.Lock()
	defer c.sts.mu.Unlock()
	reached := c.sts.reached[revision]
	if reached >= len(steps) {
		return true
	}
	if allowed := statefulset.PodsForWeight(steps[reached], v.replicas); v.onUpdate > allowed {
		c.tracef("oracle: the check of %s does not count: %d of %d pods run it, the step of %d%% it reached allows %d", revision, v.onUpdate, v.replicas, steps[reached], allowed)
		c.cover("StatefulSet: a check over the step")
		return false
	}
	c.sts.reached[revision] = reached + 1
	return reached+1 >= len(steps)
}

// statefulSetOutOfBand does an edit behind the release's back on the set; false for an edit
// that is not the set's (the caller does it).
func (c *campaign) statefulSetOutOfBand(ctx context.Context, kind outOfBand, when string) bool {
	var err error
	switch kind {
	case oobEditTarget, oobEditPrimary:
		// A StatefulSet is its own primary: either edit changes its template.
		c.mu.Lock()
		c.targetEdited = true
		c.mu.Unlock()
		err = c.updateStatefulSet(ctx, func(set *appsv1.StatefulSet) {
			set.Spec.Template.Spec.Containers[0].Image = c.nextImage(keyedCoin(c.seed, "oob quality "+when) < 0.5)
		})
	case oobResetRouter:
		// Its router is its partition: held again by hand.
		c.sts.mu.Lock()
		c.sts.raisedByHand = true
		c.sts.mu.Unlock()
		err = c.updateStatefulSet(ctx, func(set *appsv1.StatefulSet) {
			hold := statefulset.HoldPartitionMax
			set.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: &hold}
		})
	case oobDeleteRouter:
		err = fmt.Errorf("a StatefulSet release has no router object")
	case oobDeleteStatePrimary:
		// It has no primary copy either: its state ConfigMap goes.
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
	c.cover("out of band: " + string(kind) + " (StatefulSet)")
	return true
}

// updateStatefulSet changes the set as its user's tools do: a read, a change, an update,
// again on a conflict.
func (c *campaign) updateStatefulSet(ctx context.Context, change func(*appsv1.StatefulSet)) error {
	api := c.harness.kube.AppsV1().StatefulSets(campaignNamespace)
	var err error
	for range 5 {
		var set *appsv1.StatefulSet
		if set, err = api.Get(ctx, campaignTarget, metav1.GetOptions{}); err != nil {
			return err
		}
		change(set)
		if _, err = api.Update(ctx, set, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// applyStatefulSet is the workload's own apply of the set's template (its replicas are its
// autoscaler's, its partition the release's).
func (c *campaign) applyStatefulSet(ctx context.Context, rev revisionSpec) error {
	want := c.shape.statefulSetObject(rev)
	api := c.harness.kube.AppsV1().StatefulSets(campaignNamespace)
	set, err := api.Get(ctx, campaignTarget, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
		return err
	}
	if err != nil || equality.Semantic.DeepEqual(set.Spec.Template, want.Spec.Template) {
		return err
	}
	err = c.updateStatefulSet(ctx, func(set *appsv1.StatefulSet) { set.Spec.Template = want.Spec.Template })
	c.disrupted()
	return err
}

// loseStatefulSetReadiness takes a side's Ready pods away.
func (c *campaign) loseStatefulSetReadiness(side string, recovery time.Duration, when string) {
	if side == sideDrainedPrimary {
		side = "primary"
	}
	if c.server.breakStatefulSetPods(types.NamespacedName{Namespace: campaignNamespace, Name: campaignTarget}, side, recovery) {
		c.disrupted()
		c.tracef("the %s pods of StatefulSet %s lost their readiness %s (back after %s; 0: at their next restart)", side, campaignTarget, when, recovery)
		c.cover("readiness loss: " + side + " (StatefulSet)")
	}
}

// statefulSetRouter is the observer's router of a StatefulSet release: the driver, which reads
// the share of the pods on the update revision.
func (c *campaign) statefulSetRouter() router.Router {
	return statefulset.New(c.observer.kube, campaignNamespace, campaignTarget, statefulset.Options{})
}

// statefulSetHeld reports a StatefulSet whose partition the release holds: something of the
// release is left, whatever else is gone.
func (c *campaign) statefulSetHeld() bool {
	v := c.statefulSetView()
	return c.shape.statefulSet && v.exists && v.partition == statefulset.HoldPartitionMax
}

// classifyStatefulSet: S1 is a run that takes a release that ran before (its partition held)
// for a first initialisation, and rolls the set onto the template pending behind the partition.
func (c *campaign) classifyStatefulSet(runs string) string {
	c.sts.mu.Lock()
	defer c.sts.mu.Unlock()
	if st, ok := c.recordedStatus(); ok && st.Phase == rollout.PhaseInitializing && st.LastPromotedSpec == "" {
		c.sts.s1Revision = runs
	}
	if runs != "" && runs == c.sts.s1Revision {
		// The pods go on rolling onto it once its record is gone again.
		return "S1"
	}
	return ""
}

// classifyStatefulSetConvergence: S2 is a StatefulSet release that took no revision as
// promoted and cannot roll back.
func (c *campaign) classifyStatefulSetConvergence(last commandResult, item string) string {
	// The signatures are the StatefulSet's own: they take precedence over a generic item
	// (N7, a destroy interrupted earlier), which is not why the apply fails.
	if !c.shape.statefulSet || last.err == nil {
		return item
	}
	v := c.statefulSetView()
	c.sts.mu.Lock()
	defer c.sts.mu.Unlock()
	switch text := last.err.Error(); {
	case strings.Contains(text, `is not the last promoted one ("")`):
		c.sts.wedged = true
		return "S2"
	case strings.Contains(text, "pods wanted on revision") && v.update == v.current && v.onOther > 0:
		// The template is back on the current revision, and pods off it stay below the
		// partition: no roll reaches them.
		c.sts.wedged, c.sts.heldOver = true, true
		return "S3"
	}
	return item
}

// statefulSetWedged reports a convergence that met S2: the canary's pods stay where the
// refused rollback left them.
func (c *campaign) statefulSetWedged() string {
	if c.sts == nil {
		return ""
	}
	c.sts.mu.Lock()
	defer c.sts.mu.Unlock()
	switch {
	case !c.sts.wedged:
		return ""
	case c.sts.heldOver:
		return "S3"
	}
	return "S2"
}

// judgeControlsOnPartition is clause 4 for the set: once the operator's pause or abort has had
// its grace, a run that analyses its canary lowers the partition no more.
func (c *campaign) judgeControlsOnPartition(ch apiChange, before, after *appsv1.StatefulSet) {
	st, ok := c.recordedStatus()
	if !ok || !analysing(st.Phase) {
		return
	}
	k := c.controls
	k.mu.Lock()
	pausedAt, abortedAt := k.pausedAt, k.abortedAt
	k.mu.Unlock()
	now := time.Now()
	for _, control := range []struct {
		name string
		at   time.Time
	}{{"pause", pausedAt}, {"abort", abortedAt}} {
		if !control.at.IsZero() && now.Sub(control.at) > controlGrace && c.liveControls()[controlKey(control.name)] == "true" {
			c.judge.fail("clause 4", "", "%s: the partition of StatefulSet %s went from %d to %d %s after the operator's %s",
				ch.by, campaignTarget, statefulset.Partition(before), statefulset.Partition(after), now.Sub(control.at), control.name)
		}
	}
}

// controlKey is the annotation of a pause or an abort.
func controlKey(name string) string {
	if name == "pause" {
		return controls.Pause
	}
	return controls.Abort
}
