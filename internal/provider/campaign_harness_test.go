package provider

// The harness: one schedule's world (the fake cluster, the simulated Prometheus, the processes
// that ran) and what the schedule does behind the release's back: readiness losses,
// out-of-band edits, Prometheus outages and another host's apply.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// campaign is one schedule's world.
type campaign struct {
	seed  int64
	shape releaseShape
	start time.Time

	server *fakeAPIServer
	pods   *podSimulator
	hosts  *campaignHosts
	// observer reads for the invariants; harness writes what the schedule does behind the
	// release's back. Two clientsets, since a fake clientset holds its lock while it serves.
	observer *simulatedProcess
	harness  *simulatedProcess
	judge    *campaignJudge
	ws       tfWorkspace

	traceMu sync.Mutex
	trace   []string
	// coverage counts the events of the schedule by kind.
	coverage map[string]int

	mu        sync.Mutex
	providers map[string]bool
	processes map[string]*processFaults
	routers   map[string]router.Router
	// leaseHolder is the process whose write of the release's Lease landed last.
	leaseHolder string
	// leaseIdentities names the process of each holder identity written into the Lease.
	leaseIdentities map[string]string
	// leaseTakenBy names, by process, the process that took the Lease from it.
	leaseTakenBy     map[string]string
	lastDisruptAt    time.Time
	armed            *armedEvents
	outage           string
	outageChecks     int
	statePrimaryGone bool
	// initialised is set once the release's first initialisation completed, and cleared by a
	// destroy that leaves nothing of it: until then the primary may run any revision.
	initialised bool
	// step names what the schedule is doing, for the violations' classification.
	step string
	// webhooksInFlight and lastWebhookAt follow the event webhook's calls.
	webhooksInFlight int
	lastWebhookAt    time.Time
	// deposedDeleted is set while a command ran a replacement's deposed Delete.
	deposedDeleted bool
	// targetEdited, leaseDeleted and stateDeleted are set while a command saw the schedule
	// edit the target's template, delete the release's Lease, or its state ConfigMap.
	targetEdited, leaseDeleted, stateDeleted bool
	// promoteNowAsked is set while a command saw the operator's promote-now annotation, and
	// failedChecks holds the revisions a check of which failed in that command: a promote-now
	// may promote only a revision none of whose checks failed (the engine's rule, per run).
	promoteNowAsked bool
	failedChecks    map[string]bool
	// twoWriters is set while a command saw another run write the release while it held the
	// Lease (checkOneWriter).
	twoWriters bool
	// otherHostRan is set while a command started another host's apply.
	otherHostRan bool
	// forgedRecord: the schedule, not a run, wrote the record last (noteRecordWriter).
	forgedRecord bool
	// destroyInterrupted is set once a destroy of the schedule was killed or failed.
	destroyInterrupted bool
	// destroyedRouter is the mesh_provider of the instance the current destroy removes.
	destroyedRouter string
	otherHosts      sync.WaitGroup
	templates       int
	// controls are the operators' controls (campaign_controls_test.go).
	controls *campaignControls
	// records are copies of the record a replay puts back (campaign_records_test.go).
	records recordCopies
	// sts is the StatefulSet judge's memory, hpa the user's autoscaler (nil without one).
	sts *campaignStatefulSet
	hpa *campaignAutoscaler
	// abortChecks are the checks after an abort (campaign_controls_checks_test.go).
	abortChecks abortChecks
	// previousKilled: the schedule's last command was killed (campaign_moments_test.go).
	previousKilled bool
	// recordUnverifiable: the command's run holds no key for the record (state rm, import,
	// a create after one), until a run of it writes the record afresh.
	recordUnverifiable bool
	// knativeWrittenAt is when a run last wrote the Knative Service.
	knativeWrittenAt time.Time
	// leaseGoneByHand: the schedule deleted the Lease, and no run created it since;
	// quietUntil is when the quiet wait of the run that did ends at the latest;
	// leaseCleanedAfterKill: the user deleted the Lease a killed command left before this one.
	leaseGoneByHand       bool
	quietUntil            time.Time
	leaseCleanedAfterKill bool
}

// armedEvents are the current command's events and which of them fired.
type armedEvents struct {
	process string
	events  applyEvents
	fired   map[string]bool
	// snapshot is the workspace as the command started: another host's copy of the state.
	snapshot tfWorkspace
}

func newCampaign(s campaignSchedule) *campaign {
	c := &campaign{seed: s.seed, shape: s.shape, start: time.Now(), providers: map[string]bool{s.shape.router: true}, coverage: map[string]int{},
		processes: map[string]*processFaults{}, routers: map[string]router.Router{}, leaseTakenBy: map[string]string{}, leaseIdentities: map[string]string{}}
	c.pods = newPodSimulator(s.shape.readyDelay)
	c.hosts = newCampaignHosts(s.seed)
	c.server = newFakeAPIServer(c.pods)
	c.judge = newCampaignJudge(c)
	c.server.onChange = c.judge.afterWrite
	c.observer = c.server.newProcess(harnessWriter, c.newProcessFaults(harnessWriter, faultPlan{}))
	c.harness = c.server.newProcess(harnessWriter, c.newProcessFaults(harnessWriter, faultPlan{}))
	c.controls = newCampaignControls(c)
	c.server.onChange = c.records.following(c.server.onChange)
	c.server.onChange = c.phaseEdits(c.server.onChange)
	c.server.onChange = c.statefulSets(c.server.onChange)
	c.server.onChange = c.analysisEvents(c.server.onChange)
	c.server.onChange = c.abortFollowing(c.server.onChange)
	c.server.onChange = c.knativeFollowing(c.server.onChange)
	c.server.onChange = c.momentsFollowing(c.server.onChange)
	c.server.onChange = c.autoscalersFollowing(c.server.onChange)
	return c
}

func (c *campaign) elapsed() time.Duration { return time.Since(c.start) }

// setUpCluster creates what exists before the release: the target (target_ref), its config
// and the Gateway.
func (c *campaign) setUpCluster(ctx context.Context) error {
	c.ws.revision = revisionSpec{image: c.nextImage(false)}
	if c.shape.trackConfig {
		c.ws.revision.config = "c1-good"
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: campaignConfigMap, Namespace: campaignNamespace}, Data: map[string]string{campaignConfigKey: c.ws.revision.config}}
		if _, err := c.harness.kube.CoreV1().ConfigMaps(campaignNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	gateway := &unstructured.Unstructured{}
	gateway.SetAPIVersion("gateway.networking.k8s.io/v1")
	gateway.SetKind("Gateway")
	gateway.SetName(campaignGateway)
	if _, err := c.harness.dynamic.Resource(router.GatewayResource).Namespace(campaignNamespace).Create(ctx, gateway, metav1.CreateOptions{}); err != nil {
		return err
	}
	switch {
	case c.shape.knative:
		if err := c.applyKnativeService(ctx, c.ws.revision); err != nil {
			return err
		}
	case c.shape.statefulSet:
		if _, err := c.harness.kube.AppsV1().StatefulSets(campaignNamespace).Create(ctx, c.shape.statefulSetObject(c.ws.revision), metav1.CreateOptions{}); err != nil {
			return err
		}
	case !c.shape.manifest:
		if _, err := c.harness.kube.AppsV1().Deployments(campaignNamespace).Create(ctx, c.shape.workload(c.ws.revision), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := c.setUpAutoscaler(ctx); err != nil {
		return err
	}
	if err := c.setUpIngress(ctx); err != nil {
		return err
	}
	c.ws.previous = c.ws.revision
	return nil
}

// nextImage names a new template; bad ones fail every check.
func (c *campaign) nextImage(bad bool) string {
	c.templates++
	quality := "good"
	if bad {
		quality = "bad"
	}
	return fmt.Sprintf("podinfo:v%d-%s", c.templates, quality)
}

// running is the revision a Deployment's pods run, "" with none.
func (c *campaign) running(name string) string {
	if c.shape.statefulSet {
		return c.statefulSetRunning(name)
	}
	if c.shape.knative {
		return c.knativeRunning(name)
	}
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	return c.pods.running(campaignNamespace, name)
}

func (c *campaign) providersUsed() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range campaignRouters {
		if c.providers[p] {
			out = append(out, p)
		}
	}
	return out
}

// observerRouter is a router that reads the live objects for the invariants.
func (c *campaign) observerRouter(provider string) (router.Router, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rt, ok := c.routers[provider]; ok {
		return rt, nil
	}
	if c.shape.statefulSet && provider == "kubernetes" {
		c.routers[provider] = c.statefulSetRouter()
		return c.routers[provider], nil
	}
	rt, err := registry.NewRouter(provider, router.Clients{Dynamic: c.observer.dynamic, Kube: c.observer.kube}, c.shape.routerSpec(provider))
	if err == nil {
		c.routers[provider] = rt
	}
	return rt, err
}

// setStep names what the schedule does now.
func (c *campaign) setStep(step string) {
	c.mu.Lock()
	c.step = step
	c.mu.Unlock()
}

func (c *campaign) currentStep() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.step
}

// registerProcess keeps a process's faults, so the invariants know whether it was killed.
func (c *campaign) registerProcess(f *processFaults) {
	c.mu.Lock()
	c.processes[f.process] = f
	c.mu.Unlock()
}

// faultsInjected counts the faults every process met so far.
func (c *campaign) faultsInjected() int {
	c.mu.Lock()
	processes := make([]*processFaults, 0, len(c.processes))
	for _, f := range c.processes {
		processes = append(processes, f)
	}
	c.mu.Unlock()
	n := 0
	for _, f := range processes {
		n += f.faultsInjected()
	}
	return n
}

// trackLeaseHolder follows who holds the release's Lease, by whose write landed last, and which
// process took it from a holder that had not given it back.
func (c *campaign) trackLeaseHolder(ch apiChange) {
	if ch.by == harnessWriter && ch.after != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if previous := c.leaseHolder; previous != "" && ch.by != previous && ch.by != harnessWriter {
		c.leaseTakenBy[previous] = ch.by
	}
	if lease, ok := ch.after.(*coordinationv1.Lease); !ok || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		c.leaseHolder = "" // deleted, or released (a released Lease stays, without a holder)
		return
	}
	c.leaseHolder = ch.by
	if lease, ok := ch.after.(*coordinationv1.Lease); ok && lease.Spec.HolderIdentity != nil {
		c.leaseIdentities[*lease.Spec.HolderIdentity] = ch.by
	}
}

// processByIdentity is the process that wrote identity into the release's Lease; nil if none.
func (c *campaign) processByIdentity(identity string) *processFaults {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.processes[c.leaseIdentities[identity]]
}

// leaseTakenFrom is the process that took the release's Lease from process while it held it;
// "" when none did.
func (c *campaign) leaseTakenFrom(process string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leaseTakenBy[process]
}

func (c *campaign) currentLeaseHolder() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leaseHolder
}

// processExited frees the pid of a process that ended (killed, or done), as the kernel would:
// a Lease it still holds names a process that is gone, or whose pid a later process took.
func (c *campaign) processExited(f *processFaults) {
	if f.machine != nil && c.hosts.exit(f.machine) {
		c.tracef("%s exited; pid %d on %s is another process's now", f.process, f.machine.self.Pid, f.machine.space.host)
	}
}

// processRuns reports that a process of the schedule has not ended.
func (c *campaign) processRuns(process string) bool {
	c.mu.Lock()
	f := c.processes[process]
	c.mu.Unlock()
	return f != nil && !f.hasExited()
}

// liveRunInCharge reports that a live process holds the release's Lease: only then can the
// engine be expected to move traffic.
func (c *campaign) liveRunInCharge() bool {
	c.mu.Lock()
	holder := c.leaseHolder
	f := c.processes[holder]
	c.mu.Unlock()
	return f != nil && !f.hasExited()
}

// lastHolderKilled reports that the last run to hold the release was killed: a process that
// is gone moves no traffic.
func (c *campaign) lastHolderKilled() bool {
	c.mu.Lock()
	f := c.processes[c.leaseHolder]
	c.mu.Unlock()
	return f != nil && f.wasKilled()
}

// disrupted records a harness action that may take Ready pods or routes away.
func (c *campaign) disrupted() {
	c.mu.Lock()
	c.lastDisruptAt = time.Now()
	c.mu.Unlock()
}

func (c *campaign) lastDisruption() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastDisruptAt
}

// arm makes a command's events live for its process.
func (c *campaign) arm(process string, e applyEvents, snapshot tfWorkspace) {
	c.mu.Lock()
	c.armed = &armedEvents{process: process, events: e, fired: map[string]bool{}, snapshot: snapshot}
	c.mu.Unlock()
}

func (c *campaign) disarm() {
	c.mu.Lock()
	c.armed = nil
	c.mu.Unlock()
}

// fire reports, once per command, that an armed event of process is due at key.
func (c *campaign) fire(process, event, key string, perMille int) (applyEvents, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.armed
	if a == nil || a.process != process || a.fired[event] || !c.chance(event+" "+key, perMille) {
		return applyEvents{}, false
	}
	a.fired[event] = true
	return a.events, true
}

func (c *campaign) armedEvents(process string) (applyEvents, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed == nil || c.armed.process != process {
		return applyEvents{}, false
	}
	return c.armed.events, true
}

// atRequest lets the armed events fire at one of the command's requests.
func (c *campaign) atRequest(f *processFaults, at string) {
	e, ok := c.armedEvents(f.process)
	if !ok {
		return
	}
	if e.lossSide != "" && e.lossPhase == "" {
		if _, due := c.fire(f.process, "loss", at, e.lossPerMille); due {
			c.loseReadiness(e.lossSide, e.lossRecovery, "at "+at)
		}
	}
	if e.oob != "" {
		if _, due := c.fire(f.process, "oob", at, e.oobPerMille); due {
			c.outOfBand(context.Background(), e.oob, "at "+at)
		}
	}
	// The operator's promote-now at a random moment of one command in five; a keyed coin
	// of its own, so the schedules the seeds draw stay what they were.
	if keyedCoin(c.seed, "promote-now command "+f.process) < 0.2 {
		if _, due := c.fire(f.process, "promote-now", at, 15); due {
			c.operatorPromoteNow(context.Background(), "at "+at)
		}
	}
	c.controlsAtRequest(f, at)
	c.tamperAtRequest(f, at)
	c.autoscalerAtRequest(f, at)
	c.foreignWriterAtRequest(f, at)
	if e.outage != "" {
		if _, due := c.fire(f.process, "outage", at, e.outagePerMille); due {
			c.startOutage(e.outage, e.outageChecks, at)
		}
	}
	if e.otherHostPerMille > 0 {
		if _, due := c.fire(f.process, "other host", at, e.otherHostPerMille); due {
			c.startOtherHost(f.process, e.otherHostStale, at)
		}
	}
}

// afterStateWrite notes a completed first initialisation, and fires a readiness loss armed
// for the phase the state ConfigMap now records.
func (c *campaign) afterStateWrite(ch apiChange) {
	if ch.after == nil || ch.name != rollout.StateConfigMapName(campaignRelease) || ch.by == harnessWriter {
		return
	}
	st, ok := c.recordedStatus()
	if !ok {
		return
	}
	if st.Initialized || (st.Phase != "" && st.Phase != rollout.PhaseInitializing) {
		c.mu.Lock()
		c.initialised = true
		c.mu.Unlock()
	}
	e, armed := c.armedEvents(ch.by)
	if !armed || e.lossPhase == "" || st.Phase != e.lossPhase {
		return
	}
	if _, due := c.fire(ch.by, "loss", string(st.Phase), 1000); due {
		c.loseReadiness(e.lossSide, e.lossRecovery, "as the state ConfigMap recorded "+string(st.Phase))
	}
}

// loseReadiness takes a side's Ready pods away.
func (c *campaign) loseReadiness(side string, recovery time.Duration, when string) {
	if c.shape.statefulSet {
		c.loseStatefulSetReadiness(side, recovery, when)
		return
	}
	if c.shape.knative {
		c.loseKnativeReadiness(side, recovery, when)
		return
	}
	if side == sideDrainedPrimary {
		c.drainNode(recovery, when)
		return
	}
	name := campaignTarget
	if side == "primary" {
		name = campaignPrimary
	}
	if c.server.breakPods(campaignNamespace, name, recovery) {
		c.disrupted()
		c.tracef("%s lost its Ready pods %s (back after %s; 0: at its next restart)", name, when, recovery)
		c.cover("readiness loss: " + side)
	}
}

// healAll gives every Deployment its Ready pods back, for the convergence at the end.
func (c *campaign) healAll() {
	c.server.mu.Lock()
	var broken, drained []types.NamespacedName
	for key, set := range c.pods.sets {
		if set.broken {
			broken = append(broken, key)
		}
		if set.lost > 0 {
			drained = append(drained, key)
		}
	}
	c.server.mu.Unlock()
	for _, key := range broken {
		c.server.healPods(key)
	}
	for _, key := range drained {
		c.server.rescheduleLost(key)
	}
	if c.shape.statefulSet {
		c.server.healStatefulSetPods(types.NamespacedName{Namespace: campaignNamespace, Name: campaignTarget}, nil)
	}
}

// startOutage makes Prometheus fail the next checks.
func (c *campaign) startOutage(outage string, checks int, at string) {
	c.mu.Lock()
	c.outage, c.outageChecks = outage, checks
	c.mu.Unlock()
	c.tracef("Prometheus %s for %d checks, from %s", outage, checks, at)
	if outage != outageNone {
		c.cover("Prometheus " + outage)
	}
}

// takeOutage is the outage the next check meets, if any.
func (c *campaign) takeOutage() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.outageChecks == 0 {
		return outageNone
	}
	c.outageChecks--
	return c.outage
}

// answerQuery is the simulated Prometheus: the canary's pods' revision decides.
func (c *campaign) answerQuery(ctx context.Context) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	revision := c.running(campaignTarget)
	outage := c.takeOutage()
	if outage == outageNone && revision == "" {
		outage = outageNaN // no canary pods: no requests to measure
	}
	if outage != outageNone {
		c.tracef("check of %s: Prometheus %s", podsOrNone(revision), outage)
		if outage != outageDown {
			c.judge.observeCheck(revision, false)
		}
		return prometheusAnswer(outage, 0)
	}
	passed := !isBadRevision(revision)
	value := 100.0
	if !passed {
		value = 50
	}
	c.tracef("check of %s: %g", revision, value)
	c.judge.observeCheck(revision, passed)
	return value, nil
}

// outOfBand does an edit behind the release's back.
func (c *campaign) outOfBand(ctx context.Context, kind outOfBand, when string) {
	if c.shape.statefulSet && c.statefulSetOutOfBand(ctx, kind, when) {
		return
	}
	if c.shape.knative && c.knativeOutOfBand(ctx, kind, when) {
		return
	}
	kube := c.harness.kube.AppsV1().Deployments(campaignNamespace)
	var err error
	switch kind {
	case oobEditTarget, oobEditPrimary:
		name := campaignTarget
		if kind == oobEditPrimary {
			name = campaignPrimary
		} else {
			c.mu.Lock()
			c.targetEdited = true
			c.mu.Unlock()
		}
		var d *appsv1.Deployment
		if d, err = kube.Get(ctx, name, metav1.GetOptions{}); err == nil {
			d.Spec.Template.Spec.Containers[0].Image = c.nextImage(keyedCoin(c.seed, "oob quality "+when) < 0.5)
			_, err = kube.Update(ctx, d, metav1.UpdateOptions{})
		}
	case oobDeleteRouter, oobResetRouter:
		err = c.editRouter(ctx, kind)
	case oobDeleteState:
		err = c.harness.kube.CoreV1().ConfigMaps(campaignNamespace).Delete(ctx, rollout.StateConfigMapName(campaignRelease), metav1.DeleteOptions{})
		c.mu.Lock()
		c.stateDeleted = true
		c.mu.Unlock()
	case oobDeleteStatePrimary:
		err = c.harness.kube.CoreV1().ConfigMaps(campaignNamespace).Delete(ctx, rollout.StateConfigMapName(campaignRelease), metav1.DeleteOptions{})
		if err == nil {
			err = kube.Delete(ctx, campaignPrimary, metav1.DeleteOptions{})
			c.mu.Lock()
			c.statePrimaryGone, c.stateDeleted = true, true
			c.mu.Unlock()
		}
	case oobRewriteRecord:
		err = c.rewriteRecord(ctx)
	case oobPromoteCanaryRecord:
		err = c.rewriteRecordToCanary(ctx)
	case oobReplayRecord:
		err = c.replayRecord(ctx, when)
	case oobDeleteLease:
		err = c.harness.kube.CoordinationV1().Leases(campaignNamespace).Delete(ctx, campaignRelease+"-canary-release-lock", metav1.DeleteOptions{})
		c.mu.Lock()
		c.leaseDeleted = true
		c.mu.Unlock()
	}
	c.disrupted()
	if err != nil {
		c.tracef("out of band, %s: %s (%v)", when, kind, err)
		return
	}
	c.tracef("out of band, %s: %s", when, kind)
	c.cover("out of band: " + string(kind))
}

// rewriteRecord makes the record say that the revision it rejected was promoted, leaving its
// MAC and sequence as they were.
func (c *campaign) rewriteRecord(ctx context.Context) error {
	cms := c.harness.kube.CoreV1().ConfigMaps(campaignNamespace)
	cm, err := cms.Get(ctx, rollout.StateConfigMapName(campaignRelease), metav1.GetOptions{})
	if err != nil {
		return err
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(cm.Data["status.json"]), &st); err != nil {
		return err
	}
	rejected, _ := st["rejected"].(map[string]any)
	if rejected == nil {
		return fmt.Errorf("the record holds no rejection to promote")
	}
	st["lastPromotedSpec"], st["rejected"] = rejected["revision"], nil
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	cm.Data["status.json"] = string(b)
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
	return err
}

// operatorPromoteNow annotates the state ConfigMap with promote-now, as kubectl annotate does.
func (c *campaign) operatorPromoteNow(ctx context.Context, when string) {
	cms := c.harness.kube.CoreV1().ConfigMaps(campaignNamespace)
	cm, err := cms.Get(ctx, rollout.StateConfigMapName(campaignRelease), metav1.GetOptions{})
	if err == nil {
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		cm.Annotations[controls.PromoteNow] = "true"
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-annotate"})
	}
	if err != nil {
		c.tracef("operator, %s: promote-now not set (%v)", when, err)
		return
	}
	c.mu.Lock()
	c.promoteNowAsked = true
	c.mu.Unlock()
	c.tracef("operator, %s: promote-now", when)
	c.cover("operator's promote-now")
}

// checkFailed notes a failed check of revision in this command.
func (c *campaign) checkFailed(revision string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failedChecks == nil {
		c.failedChecks = map[string]bool{}
	}
	c.failedChecks[revision] = true
}

// promoteNowAllows reports an operator's promote-now in this command that may promote
// revision: no check of it failed in this command.
func (c *campaign) promoteNowAllows(revision string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.promoteNowAsked && !c.failedChecks[revision]
}

// editRouter deletes the current router's object, or sets it to 100/0.
func (c *campaign) editRouter(ctx context.Context, kind outOfBand) error {
	if kind == oobDeleteRouter {
		if ok, err := c.deleteRouterObject(ctx, c.shape.router); ok {
			return err
		}
	}
	switch c.shape.router {
	case "kubernetes":
		if kind == oobDeleteRouter {
			return fmt.Errorf("the kubernetes router has no object of its own")
		}
	case "osm":
		if kind == oobDeleteRouter {
			return c.harness.dynamic.Resource(router.TrafficSplitResource).Namespace(campaignNamespace).Delete(ctx, campaignTarget, metav1.DeleteOptions{})
		}
	case "gatewayapi":
		if kind == oobDeleteRouter {
			return c.harness.dynamic.Resource(router.HTTPRouteResource).Namespace(campaignNamespace).Delete(ctx, campaignTarget, metav1.DeleteOptions{})
		}
	case "istio":
		if kind == oobDeleteRouter {
			return c.harness.dynamic.Resource(router.IstioVirtualServiceResource).Namespace(campaignNamespace).Delete(ctx, campaignTarget, metav1.DeleteOptions{})
		}
	}
	rt, err := registry.NewRouter(c.shape.router, router.Clients{Dynamic: c.harness.dynamic, Kube: c.harness.kube}, c.shape.routerSpec(c.shape.router))
	if err != nil {
		return err
	}
	return rt.SetRoutes(ctx, router.Weights{Primary: 100})
}

// releaseInitialised reports whether the release completed its first initialisation.
func (c *campaign) releaseInitialised() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.initialised
}

// forgetIfNothingLeft starts the release's life over when the cluster holds nothing of it
// (no state ConfigMap, no primary, no generated Service): its next initialisation is a first
// install, as the docs say.
func (c *campaign) forgetIfNothingLeft() {
	c.server.mu.Lock()
	_, state := c.server.objects[configMapsResource][types.NamespacedName{Namespace: campaignNamespace, Name: rollout.StateConfigMapName(campaignRelease)}]
	_, primary := c.server.objects[deploymentsResource][types.NamespacedName{Namespace: campaignNamespace, Name: campaignPrimary}]
	_, services := c.server.objects[servicesResource][types.NamespacedName{Namespace: campaignNamespace, Name: campaignTarget + "-primary"}]
	c.server.mu.Unlock()
	if !state && !primary && !services && c.releaseInitialised() && !c.statefulSetHeld() && !c.knativePinned() {
		c.mu.Lock()
		c.initialised, c.statePrimaryGone = false, false
		c.mu.Unlock()
		c.tracef("oracle: nothing of the release is left; its next initialisation is a first one")
	}
}

// newCommand forgets what the previous command saw, for the classification of the next one's
// violations.
func (c *campaign) newCommand() {
	// A promote-now the last command's run recorded (its promotion then stopped) is the
	// operator's still: the next run's recovery finishes that promotion.
	st, ok := c.recordedStatus()
	recorded := ok && st.Phase == rollout.PhasePromoting && st.PromoteNow != nil
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deposedDeleted, c.targetEdited, c.leaseDeleted, c.stateDeleted, c.twoWriters, c.otherHostRan = false, false, false, false, false, false
	if !c.promoteNowAsked || !recorded {
		c.promoteNowAsked, c.failedChecks = false, nil
	}
}

// twoWritersThisCommand reports that two runs wrote the release at once in this command.
func (c *campaign) twoWritersThisCommand() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.twoWriters
}

// destroyWasInterrupted reports a destroy of the schedule that was killed or failed.
func (c *campaign) destroyWasInterrupted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.destroyInterrupted
}

// runsOverlapAfterLeaseDeleted reports that the schedule deleted the Lease in this command while
// another process works on the release: the lock no longer keeps their writes apart.
func (c *campaign) runsOverlapAfterLeaseDeleted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.leaseDeleted {
		return false
	}
	live := 0
	for _, f := range c.processes {
		if !f.hasExited() {
			live++
		}
	}
	return live > 1
}

// stateAndPrimaryWereDeleted reports whether the state ConfigMap and the primary were deleted
// behind the release's back in this schedule.
func (c *campaign) stateAndPrimaryWereDeleted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.statePrimaryGone
}

// The classification of violations into the open items: narrow signatures, so a new
// finding is never taken for a known one.

// classifyUnanalysedPrimary: item 3 follows the state ConfigMap's and the primary's deletion;
// N4 is a revision whose image passed analysis on pods that still ran an older config.
func (c *campaign) classifyUnanalysedPrimary(revision string) string {
	switch {
	case c.stateAndPrimaryWereDeleted():
		return "3"
	case c.judge.imagePassedWithOtherConfig(revision):
		return "N4"
	}
	return ""
}

// classifyUncappedCanary: N6 is a canary whose template changed once its analysis passed (an
// edit behind the release, or the next apply's new template after a killed promotion).
func (c *campaign) classifyUncappedCanary() string {
	if c.leaseDeletedThisCommand() {
		return "Q2"
	}
	if c.targetEditedBehind() || c.recordSaysPassed() {
		return "N6"
	}
	return ""
}

// targetEditedBehind reports that the schedule edited the target's template in this command.
func (c *campaign) targetEditedBehind() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.targetEdited
}

// classifyDismantling: item 4 is a replacement's deposed Delete that dismantles what its
// successor took over (N9 when the state ConfigMap, which records the owner, was deleted
// behind it); N2 an old router's object left routing to the release after a
// replacement changed mesh_provider; N5 the apex Service pointed back at a primary without
// Ready pods, after a destroy left it on the target.
func (c *campaign) classifyDismantling(unserved []trafficSide, ch apiChange) string {
	switch {
	case (c.currentStep() == stepDeposedDelete || c.deposedDeleteRan()) && c.stateDeletedThisCommand():
		return "N9"
	case c.currentStep() == stepDeposedDelete || c.deposedDeleteRan():
		return "4"
	case staleRouterOnly(unserved, c.currentRouter()), c.destroying() && staleRouterOnly(unserved, c.routerDestroyed()):
		return "N2"
	case ch.gvr == servicesResource && ch.verb == "update" && ch.name == campaignTarget:
		return "N5"
	}
	return ""
}

// stateDeletedThisCommand reports that the schedule deleted the state ConfigMap in this command.
func (c *campaign) stateDeletedThisCommand() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stateDeleted
}

// deposedDeleteRan reports that a replacement's deposed Delete ran in the current command.
func (c *campaign) deposedDeleteRan() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deposedDeleted
}

// routerDestroyed is the mesh_provider of the instance being destroyed.
func (c *campaign) routerDestroyed() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.destroyedRouter
}

func (c *campaign) currentRouter() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shape.router
}

// staleRouterOnly reports sides that only routers other than the release's current one reach.
func staleRouterOnly(sides []trafficSide, current string) bool {
	for _, side := range sides {
		if side.router == current {
			return false
		}
	}
	return len(sides) > 0
}

// allSides reports sides that are all the primary, or all the canary (of any router).
func allSides(sides []trafficSide, name string) bool {
	for _, side := range sides {
		if side.name != name {
			return false
		}
	}
	return len(sides) > 0
}

// classifyLateReaction: item 2 is a canary that lost its pods once its analysis passed; N1 a
// primary that did (while it rolled or at Finalising, on any router, with or without a
// replacement) and kept its share although the passed canary served; item 8 a reaction that
// waited for an event webhook.
func (c *campaign) classifyLateReaction(unserved []trafficSide) string {
	switch {
	case c.knativeRunWritesNothing():
		return "K1"
	case allSides(unserved, "canary") && c.quietWaitUnverified():
		return "Q1"
	case allSides(unserved, "primary") && c.quietWaitAfterKilledRun():
		return "Q3"
	case staleRouterOnly(unserved, c.currentRouter()) && allSides(unserved, "apex") && c.recordSaysPassed():
		// The old router's object is gone, but its mesh still sends the apex host to the apex
		// Service, which selects the primary: N1's path, on the apex.
		return "N1"
	case staleRouterOnly(unserved, c.currentRouter()), c.destroying() && staleRouterOnly(unserved, c.routerDestroyed()):
		return "N2"
	case allSides(unserved, "canary") && c.judge.isAllowed(unserved[0].revision):
		return "2"
	case allSides(unserved, "primary") && c.recordSaysPassed():
		return "N1"
	}
	if c.webhookBusy() {
		return "8"
	}
	return ""
}

func (c *campaign) classifySlowRollback() string {
	if c.webhookBusy() {
		return "8"
	}
	return ""
}

// webhookBusy reports an event webhook call in flight, or one that ended within an interval.
func (c *campaign) webhookBusy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.webhooksInFlight > 0 || time.Since(c.lastWebhookAt) <= c.shape.interval()
}

// callingWebhook counts a webhook call in flight; call the returned function when it ends.
func (c *campaign) callingWebhook() func() {
	c.mu.Lock()
	c.webhooksInFlight++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.webhooksInFlight--
		c.lastWebhookAt = time.Now()
		c.mu.Unlock()
	}
}

// destroying reports that the schedule destroys the release (not a deposed instance): then
// the apex host may stop answering.
func (c *campaign) destroying() bool { return c.currentStep() == stepDestroy }

// recordSaysPassed reports that the state ConfigMap records a completed analysis: only then
// may the engine give the canary all the traffic.
func (c *campaign) recordSaysPassed() bool {
	st, ok := c.recordedStatus()
	return ok && st.PassedSpec != ""
}
