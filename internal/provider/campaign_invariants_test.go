package provider

// The judge: the invariant's three clauses, checked after every write that lands on the fake
// API server (and by timers, for what must happen within a bound), with an oracle of its own
// for what passed analysis: the harness, not the engine, says which revisions may become the
// primary.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/knative"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Bounds the engine is held to. A side that lost its Ready pods must lose its weight "at
// once": within reactionGrace, or faultGrace when the API server refused writes meanwhile
// (each refused write costs the client's backoff).
const (
	reactionGrace = 1500 * time.Millisecond
	faultGrace    = 8 * time.Second
)

// campaignViolation is one broken promise.
type campaignViolation struct {
	at     time.Duration
	clause string
	text   string
	// item is the open issue item it matches, "" for a new finding.
	item string
}

func (v campaignViolation) String() string {
	return fmt.Sprintf("%9s  %s", v.at.Round(time.Millisecond), v.describe())
}

// describe is the violation without its time, as the trace shows it.
func (v campaignViolation) describe() string {
	s := fmt.Sprintf("VIOLATION %s: %s", v.clause, v.text)
	if v.item != "" {
		s += fmt.Sprintf(" [known: issue 20 item %s]", v.item)
	}
	return s
}

// trafficSide is one side the router sends traffic to.
type trafficSide struct {
	name string // "primary", "canary", or "apex": what the apex Service selects
	// router is the mesh_provider whose object (or apex Service) routes to the side.
	router string
	weight int
	// matched: the requests that match analysis.match reach this side (A/B testing).
	matched  bool
	serves   bool
	revision string
	// template is the revision a pod started now would run (image and tracked config as
	// they are now): a pod of the side that restarts, or is added, runs it.
	template string
	// ratio: a side of a replica ratio, which has pods Ready endpoints of the apex beside
	// the other side's beside; replicas is the primary's replica count.
	ratio                  bool
	pods, beside, replicas int32
	// inPlace: a side of a StatefulSet, whose pods are judged by the partition's writes
	// (campaign_statefulsets_test.go).
	inPlace bool
}

// hasTraffic reports a side that receives requests.
func (s trafficSide) hasTraffic() bool { return s.weight > 0 || s.matched }

// campaignJudge holds the oracle and what the timed checks need.
type campaignJudge struct {
	c  *campaign
	mu sync.Mutex
	// allowed are the revisions that may become the primary, with the reason.
	allowed map[string]string
	// passes counts the passing checks of each revision (iterations strategies).
	passes map[string]int
	// passed is the revision whose analysis passed last: what a promotion promotes.
	passed string
	// primaryEditedBehind: the schedule's edit, not a run, restarted the primary last.
	primaryEditedBehind bool
	// capRecheckPending: a check of the canary's cap waits out the grace of an edit.
	capRecheckPending bool
	// firstWrite is when each process (a command's run) first wrote.
	firstWrite map[string]time.Time
	// primaryServedAtRunWrite: the primary had Ready pods at the last write of a run.
	primaryServedAtRunWrite bool
	// unservedSince is when traffic last started going to a side without Ready pods while
	// a run was in charge; zero while every weighted side serves.
	unservedSince time.Time
	faultsAtStart int
	// lastSides is the traffic as the last write left it.
	lastSides  []trafficSide
	violations []campaignViolation
	reported   map[string]bool
}

func newCampaignJudge(c *campaign) *campaignJudge {
	return &campaignJudge{c: c, allowed: map[string]string{}, firstWrite: map[string]time.Time{}, passes: map[string]int{}, reported: map[string]bool{}}
}

// allow records a revision that may become the primary.
func (j *campaignJudge) allow(revision, why string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.allowed[revision]; !ok {
		j.allowed[revision] = why
		j.c.tracef("oracle: %s may be the primary (%s)", revision, why)
	}
}

func (j *campaignJudge) isAllowed(revision string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok := j.allowed[revision]
	return ok || j.c.shape.skipAnalysis
}

// fail records a violation once per clause and text.
func (j *campaignJudge) fail(clause, item, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	if item == "" && j.c.runsOverlapAfterLeaseDeleted() {
		item = "N8"
	}
	if item == "" && j.c.twoWritersThisCommand() {
		// What two runs do to each other's work once the lock let both in.
		item = "6"
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.reported[clause+text] {
		return
	}
	j.reported[clause+text] = true
	v := campaignViolation{at: j.c.elapsed(), clause: clause, text: text, item: item}
	j.violations = append(j.violations, v)
	j.c.tracef("%s", v.describe())
}

// afterWrite is every write's check.
func (j *campaignJudge) afterWrite(ch apiChange) {
	switch ch.gvr {
	case deploymentsResource:
		j.checkPrimaryRestart(ch)
	case configMapsResource:
		j.c.noteRecordWriter(ch)
		j.c.afterStateWrite(ch)
	case knative.ServiceResource:
		j.c.knativePinWrite(ch)
	case leasesResource:
		j.c.trackLeaseHolder(ch)
	}
	j.checkOneWriter(ch)
	sides := j.c.liveTraffic()
	j.checkCanaryCap(ch, sides)
	j.checkWriteKeepsServing(ch, sides)
	j.checkUnservedTraffic(sides)
}

// checkOneWriter is the lock's promise: two runs never write the release at the same time. A
// run's write lands while another live process holds the release's Lease, or after another
// process took the Lease from it, only when the lock let a second run in: item 6 (a holder
// judged by its skewed clock, or by a pid of another PID namespace), or N8 (a Lease deleted
// by hand).
func (j *campaignJudge) checkOneWriter(ch apiChange) {
	if ch.by == harnessWriter || ch.gvr == leasesResource {
		return
	}
	what := ""
	if taker := j.c.leaseTakenFrom(ch.by); taker != "" {
		what = fmt.Sprintf("after %s took the release's Lease from it", taker)
	} else if holder := j.c.currentLeaseHolder(); holder != "" && holder != ch.by && j.c.processRuns(holder) {
		what = fmt.Sprintf("while %s, still running, holds the release's Lease", holder)
	} else {
		return
	}
	item := "6"
	if j.c.runsOverlapAfterLeaseDeleted() {
		item = "N8"
	}
	j.c.mu.Lock()
	j.c.twoWriters = true
	j.c.mu.Unlock()
	j.fail("lock", item, "%s's %s of %s %s landed %s: two runs write the release (the other apply runs from %s)",
		ch.by, ch.verb, ch.gvr.Resource, ch.name, what, j.c.hosts.other.kind)
}

// checkPrimaryRestart is clause 2: when a run restarts the primary's pods, they run a revision
// that passed analysis, the release's first, or a skip_analysis release's.
func (j *campaignJudge) checkPrimaryRestart(ch apiChange) {
	if ch.name != campaignPrimary || (ch.after != nil && !restartsPods(ch)) {
		return
	}
	j.mu.Lock()
	j.primaryEditedBehind = ch.by == harnessWriter
	j.mu.Unlock()
	if ch.by == harnessWriter || ch.after == nil {
		return
	}
	spec := ""
	if after, ok := ch.after.(*appsv1.Deployment); ok {
		spec = after.Annotations[rollout.AnnotationPrimarySpec]
	}
	j.judgeNewPrimary(ch.by, j.c.running(campaignPrimary), spec)
}

// judgeNewPrimary is clause 2 for a run that made the primary run revision (spec is the
// primary's template hash, or its pinned revision).
func (j *campaignJudge) judgeNewPrimary(by, revision, spec string) {
	if !j.c.releaseInitialised() {
		j.allow(revision, "the release's first initialisation")
		return
	}
	st, recorded := j.c.recordedStatus()
	// The record names the operator's promote-now of the template the primary now runs (by
	// hash, or pinned revision): the run promotes by that route, whatever else let the
	// revision be the primary.
	promotedNow := recorded && spec != "" && st.PromoteNow != nil && st.PromoteNow.Revision == spec
	if j.c.promoteNowAllows(revision) && (!j.isAllowed(revision) || promotedNow) {
		j.allow(revision, "the operator's promote-now, no check of it failed in this command")
		// A promote-now completes the promotion route: the revision is the promoted one now,
		// which the status and clause 3 then hold the primary to. So it is for a revision
		// allowed before (the release's first, promoted again after a later one), which the
		// operator's promote-now brings back.
		j.mu.Lock()
		j.passed = revision
		j.mu.Unlock()
	}
	if recorded && spec != "" && st.Revert != "" && st.Revert == spec && j.isAllowed(revision) {
		// A revert within rollback_window: the run recorded it (by template hash) before the
		// promotion, and the revision was promoted (so allowed) before. The record's history
		// must hold it within the window; then it is the promoted revision, which clause 3
		// holds the primary to.
		if i := slices.Index(st.PromotedHistory(), st.Revert); i < 0 || i > j.c.shape.rollbackWindow {
			j.fail("clause 2", "", "%s made the primary run %s as a revert, outside rollback_window %d (the record's history: %v)", by, revision, j.c.shape.rollbackWindow, st.PromotedHistory())
		} else {
			j.c.cover("promotion: a revert within rollback_window")
			j.mu.Lock()
			j.passed = revision
			j.mu.Unlock()
		}
	}
	if !j.isAllowed(revision) {
		j.fail("clause 2", j.c.classifyUnanalysedPrimary(revision), "%s made the primary run %s, which never passed analysis (allowed: %s)", by, revision, j.allowedText())
	}
}

// revertStarting reports a record that announces a revert within rollback_window that is
// not yet promoted: the template it reverts to is one of the rollback_window.revisions
// templates its history holds before the current one (at index 0).
func (c *campaign) revertStarting(st rollout.Status) bool {
	if c.shape.rollbackWindow <= 0 || st.Revert == "" || st.Revert != st.PassedSpec {
		return false
	}
	i := slices.Index(st.PromotedHistory(), st.Revert)
	return i > 0 && i <= c.shape.rollbackWindow
}

// restartsPods reports a Deployment write that restarts its pods (see podSimulator).
func restartsPods(ch apiChange) bool {
	after, _ := ch.after.(*appsv1.Deployment)
	before, _ := ch.before.(*appsv1.Deployment)
	return after != nil && desiredReplicas(after) > 0 &&
		(before == nil || desiredReplicas(before) == 0 || !equality.Semantic.DeepEqual(before.Spec.Template, after.Spec.Template))
}

// primaryEditedBehindRelease reports that the schedule, not a run, last changed what the
// primary's pods run, or deleted it.
func (j *campaignJudge) primaryEditedBehindRelease() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.primaryEditedBehind
}

func (j *campaignJudge) allowedText() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(slices.Sorted(maps.Keys(j.allowed)), ", ")
}

// checkCanaryCap is clause 2's other half: an unanalysed revision gets no more than the last
// step of its strategy.
//
// The schedule may edit the target a moment before a run's write: the run cannot know yet,
// and gets the grace to take the traffic off the edited template.
func (j *campaignJudge) checkCanaryCap(ch apiChange, sides []trafficSide) {
	if ch.by == harnessWriter && ch.verb != "timer" {
		return
	}
	// A run that finds the traffic on an edited canary when it starts (nothing ran while the
	// schedule edited it) gets the same grace from its first write.
	wait := time.Since(j.c.lastDisruption())
	if ch.by != harnessWriter {
		serves := j.c.primaryServes()
		j.mu.Lock()
		j.primaryServedAtRunWrite = serves
		if _, ok := j.firstWrite[ch.by]; !ok {
			j.firstWrite[ch.by] = time.Now()
		}
		wait = min(wait, time.Since(j.firstWrite[ch.by]))
		j.mu.Unlock()
	}
	if edited := wait; edited <= reactionGrace {
		j.mu.Lock()
		pending := j.capRecheckPending
		j.capRecheckPending = true
		j.mu.Unlock()
		if !pending {
			time.AfterFunc(reactionGrace-edited+time.Millisecond, func() {
				j.mu.Lock()
				j.capRecheckPending = false
				j.mu.Unlock()
				j.checkCanaryCap(apiChange{by: harnessWriter, verb: "timer"}, j.c.liveTraffic())
			})
		}
		return
	}
	if !j.c.primaryServes() {
		return // nowhere else to send the traffic
	}
	j.mu.Lock()
	leftUnserved := !j.primaryServedAtRunWrite
	j.mu.Unlock()
	if ch.verb == "timer" && !j.c.liveRunInCharge() && (leftUnserved || j.c.lastHolderKilled()) {
		// No run is there to move the traffic: the last one left it where the primary could
		// not take it, and the primary got its pods back (converge heals, then waits a
		// minute); or it was killed, with the traffic on a passed canary whose template the
		// next command's Terraform then changed (Kubernetes rolls the target's pods at once,
		// before the provider runs). The next run gets the grace from its first write.
		return
	}
	for _, side := range sides {
		if side.name == "canary" && side.overCap(j.c.shape.canaryCap()) && side.revision != "" && !j.isAllowed(side.revision) {
			j.fail("clause 2", j.c.classifyUncappedCanary(), "the canary running %s has %d%% (seen at %s's %s), above the last step (%d%%) of an analysis it has not passed",
				side.revision, side.weight, ch.by, ch.verb, j.c.shape.canaryCap())
		}
	}
}

// Clause 1 and the apex host's answer: every side with traffic has Ready pods.
//
// checkWriteKeepsServing fails a run's write that takes the Ready pods (or the route) from a
// side that served traffic, or leaves the apex host unanswered, unless the schedule disrupted
// the release a moment before or the run destroys the release.
func (j *campaignJudge) checkWriteKeepsServing(ch apiChange, sides []trafficSide) {
	j.mu.Lock()
	before := j.lastSides
	j.lastSides = sides
	j.mu.Unlock()
	if ch.by == harnessWriter || time.Since(j.c.lastDisruption()) <= reactionGrace {
		return
	}
	served := map[string]bool{}
	for _, side := range before {
		served[side.router+side.name] = side.hasTraffic() && side.serves
	}
	for _, side := range sides {
		if served[side.router+side.name] && side.hasTraffic() && !side.serves {
			j.fail("clause 1", j.c.classifyDismantling([]trafficSide{side}, ch), "%s's %s of %s %s took the Ready pods from the %s side, which has traffic (%s)",
				ch.by, ch.verb, ch.gvr.Resource, ch.name, side.name, side)
		}
	}
	// Only the routers judged before and after count: the record's takeover of the traffic by
	// a new mesh_provider's router stops the old router's apex fallback being judged (see
	// carryingRouters), which is not the apex host falling silent.
	if answering(sameRouters(before, sides)) && !answering(sides) && !j.c.destroying() {
		j.fail("clause 1", j.c.classifyDismantling(nil, ch), "%s's %s of %s %s left the apex host unanswered, although the release was not destroyed",
			ch.by, ch.verb, ch.gvr.Resource, ch.name)
	}
}

// sameRouters are the sides of before whose router also has sides in after.
func sameRouters(before, after []trafficSide) []trafficSide {
	routers := map[string]bool{}
	for _, side := range after {
		routers[side.router] = true
	}
	var out []trafficSide
	for _, side := range before {
		if routers[side.router] {
			out = append(out, side)
		}
	}
	return out
}

// answering reports that some side with traffic has Ready pods: the apex host answers.
func answering(sides []trafficSide) bool {
	for _, side := range sides {
		if side.hasTraffic() && side.serves {
			return true
		}
	}
	return false
}

// checkUnservedTraffic fails traffic left on a side without Ready pods for longer than the
// grace, once a live run holds the release's lock and another side may take the traffic: the
// primary, or a canary that the engine's record and the oracle both say passed.
func (j *campaignJudge) checkUnservedTraffic(sides []trafficSide) {
	var unserved []trafficSide
	fixable := false
	for _, side := range sides {
		switch {
		case side.hasTraffic() && !side.serves:
			unserved = append(unserved, side)
		case side.serves && (side.name != "canary" || (j.isAllowed(side.revision) && j.isAllowed(side.template) && j.c.recordSaysPassed() && j.c.recordTrustedByRun())):
			// A canary whose tracked config changed since its pods started may not take more:
			// every pod it starts or restarts runs the unanalysed config.
			fixable = true
		}
	}
	now := time.Now()
	j.mu.Lock()
	switch {
	case len(unserved) == 0, !j.c.liveRunInCharge(), !fixable:
		// Served; or nobody can act yet, or no side may take the traffic: the clock starts later.
		j.unservedSince = time.Time{}
		j.mu.Unlock()
		return
	case j.unservedSince.IsZero():
		j.unservedSince, j.faultsAtStart = now, j.c.faultsInjected()
		j.mu.Unlock()
		for _, after := range []time.Duration{reactionGrace, faultGrace} {
			time.AfterFunc(after+time.Millisecond, func() { j.checkUnservedTraffic(j.c.liveTraffic()) })
		}
		return
	}
	since, faults := j.unservedSince, j.faultsAtStart
	j.mu.Unlock()
	grace := reactionGrace
	if j.c.faultsInjected() != faults {
		grace = faultGrace
	}
	if now.Sub(since) > grace {
		j.fail("clause 1", j.c.classifyLateReaction(unserved), "traffic stayed %s on sides without Ready pods while another side could take it: %s",
			now.Sub(since).Round(time.Millisecond), sidesText(unserved))
	}
}

// String names a side for a violation: its router, weight and pods.
func (s trafficSide) String() string {
	matched := ""
	if s.matched {
		matched = " and matched requests"
	}
	return fmt.Sprintf("%s %s, %d%%%s, %s", s.router, s.name, s.weight, matched, podsOrNone(s.revision))
}

func sidesText(sides []trafficSide) string {
	texts := make([]string, len(sides))
	for i, side := range sides {
		texts[i] = side.String()
	}
	return strings.Join(texts, "; ")
}

func podsOrNone(s string) string {
	if s == "" {
		return "no pods"
	}
	return s
}

// liveTraffic reads where the routers send traffic now, with whether each side serves.
func (c *campaign) liveTraffic() []trafficSide {
	if c.shape.statefulSet {
		return c.statefulSetSides()
	}
	if c.shape.knative {
		return c.knativeSides()
	}
	var sides []trafficSide
	carrier := c.carryingRouters()
	for _, provider := range c.providersUsed() {
		if provider == "kubernetes" {
			if carrier[provider] {
				sides = append(sides, c.apexSides(provider)...)
			}
			continue
		}
		rt, err := c.observerRouter(provider)
		if err != nil {
			continue
		}
		w, err := rt.GetRoutes(context.Background())
		if router.IsNotFound(err) && apexWithoutRouterObject(provider) {
			// Without its TrafficSplit or VirtualService, the mesh sends the apex host to the
			// apex Service.
			if carrier[provider] {
				sides = append(sides, c.apexSides(provider)...)
			}
			continue
		}
		if err != nil {
			continue
		}
		canary := c.serviceSide(provider, "canary", campaignTarget+"-canary", w.Canary)
		canary.matched = w.Matched
		sides = append(sides, c.serviceSide(provider, "primary", campaignTarget+"-primary", w.Primary), canary)
	}
	return sides
}

// carryingRouters are the routers that carry the release's traffic: the current one, and the
// one the record names until a run took the traffic over from it after a mesh_provider change.
// An old router's object is judged while it exists, whoever carries the traffic; but the apex
// Service, which a router without an object of its own (or without its object) leaves the
// traffic to, is the release's own entrance once another router took the traffic over, as it
// is for direct clients of the apex under any router, and is judged as such no more.
func (c *campaign) carryingRouters() map[string]bool {
	out := map[string]bool{c.currentRouter(): true}
	if st, ok := c.recordedStatus(); ok && st.Router != "" {
		out[st.Router] = true
	}
	if c.destroying() {
		out[c.routerDestroyed()] = true
	}
	return out
}

// apexSide is what the apex Service selects, with all the traffic.
func (c *campaign) apexSide(provider string) trafficSide {
	side := c.serviceSide(provider, "apex", campaignTarget, 100)
	if side.revision == "" && !side.serves {
		side.weight = 0 // no apex Service: nothing is routed
	}
	return side
}

// serviceSide is a side reached through a Service: it serves when a Deployment it selects has
// Ready pods.
func (c *campaign) serviceSide(provider, name, service string, weight int) trafficSide {
	side := trafficSide{router: provider, name: name, weight: weight}
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	obj, ok := c.server.objects[servicesResource][types.NamespacedName{Namespace: campaignNamespace, Name: service}]
	if !ok {
		if service == campaignTarget {
			side.weight = 0
		}
		return side
	}
	selector := labels.SelectorFromSet(obj.(*corev1.Service).Spec.Selector)
	for key, d := range c.server.objects[deploymentsResource] {
		dep := d.(*appsv1.Deployment)
		if key.Namespace != campaignNamespace || !selector.Matches(labels.Set(dep.Spec.Template.Labels)) {
			continue
		}
		side.revision, side.template = c.pods.running(key.Namespace, key.Name), c.server.revisionOf(dep)
		if dep.Status.ReadyReplicas > 0 && desiredReplicas(dep) > 0 {
			side.serves = true
			return side
		}
	}
	return side
}

// observeCheck is the oracle's view of one analysis check of the canary's revision: a
// weighted canary passes its analysis with a passing check at its last step, an iterations
// strategy with as many passing checks as iterations. A failing check that reaches the
// threshold must move the traffic within one interval.
func (j *campaignJudge) observeCheck(revision string, passed bool) {
	s := j.c.shape
	j.c.checkAfterAbort()
	canary, _ := j.c.liveCanaryWeight()
	if !passed {
		j.c.checkFailed(revision)
		j.expectRollback(revision)
		return
	}
	j.mu.Lock()
	j.passes[revision]++
	n := j.passes[revision]
	j.mu.Unlock()
	switch {
	case s.statefulSet:
		if !j.c.statefulSetCheckPasses(revision) {
			return
		}
		j.allow(revision, fmt.Sprintf("passed a check within the pods of each step %v", s.steps))
	case j.c.ratioRoutedNow():
		if !j.c.canaryAtLastStepByRatio() {
			return
		}
		j.allow(revision, fmt.Sprintf("passed a check at the last step's share of a whole primary's pods, %d%%", s.lastStep()))
	case s.strategy == strategyCanary && canary == s.lastStep():
		j.allow(revision, fmt.Sprintf("passed a check at the last step, %d%%", canary))
	case s.strategy != strategyCanary && n >= s.iterations:
		j.allow(revision, fmt.Sprintf("passed %d checks", n))
	default:
		return
	}
	j.mu.Lock()
	j.passed = revision
	j.mu.Unlock()
}

// imagePassedWithOtherConfig reports a revision whose image passed analysis with another
// config version.
func (j *campaignJudge) imagePassedWithOtherConfig(revision string) bool {
	image, _, _ := strings.Cut(revision, "+")
	j.mu.Lock()
	defer j.mu.Unlock()
	for allowed := range j.allowed {
		if other, _, _ := strings.Cut(allowed, "+"); other == image && allowed != revision {
			return true
		}
	}
	return false
}

func (j *campaignJudge) lastPassed() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.passed
}

// expectRollback starts the clock of a failing check that reaches the threshold: one
// analysis interval later the canary must have no traffic left, whatever the notifications
// do, unless the primary cannot take it or the API server refused writes meanwhile.
func (j *campaignJudge) expectRollback(revision string) {
	recorded, ok := j.c.recordedStatus()
	if !ok || recorded.FailedChecks+1 < j.c.shape.threshold || j.c.recordForged() {
		// The count is the run's own only when its record is: a record the schedule put back
		// or rewrote since the run's last write holds another run's count.
		return
	}
	if !j.c.primaryServes() {
		return // the rollback is held: the primary cannot take the traffic
	}
	faults := j.c.faultsInjected()
	holder := j.c.currentLeaseHolder()
	j.c.tracef("oracle: the check of %s that reaches the threshold failed; the canary must lose its traffic within %s", revision, j.c.shape.interval())
	time.AfterFunc(j.c.shape.interval()+time.Millisecond, func() {
		if j.c.faultsInjected() != faults || j.c.currentLeaseHolder() != holder || !j.c.liveRunInCharge() {
			return
		}
		current := j.c.currentRouter()
		for _, side := range j.c.liveTraffic() {
			switch {
			case side.router != current:
			case side.name == "primary" && !side.serves:
				return // the rollback is held: the primary cannot take the traffic
			case side.name == "canary" && side.weight > 0 && side.inPlace && j.c.statefulSetRollingBack():
				// The set's template is back on the promoted revision: its pods roll back one
				// at a time, each once the one before is Ready.
			case side.name == "canary" && side.weight > 0 && side.inPlace && j.c.statefulSetPodsRunning(revision) == 0:
				// No pod runs the failing revision any more: the pods off the promoted one run
				// a template edited in behind the release after the rollback's write (the
				// partition the step lowered lets the controller roll them), which is no
				// canary of this check; clause 2 judges them (seed 1008116).
			case side.name == "canary" && side.weight > 0:
				j.fail("rollback", j.c.classifySlowRollback(), "the canary still had %d%% one interval (%s) after the failing check that reached the threshold", side.weight, j.c.shape.interval())
			}
		}
	})
}

// primaryServes reports that the release's current router sends traffic, or may, to a primary
// with Ready pods.
func (c *campaign) primaryServes() bool {
	current := c.currentRouter()
	for _, side := range c.liveTraffic() {
		if side.router == current && (side.name == "primary" || side.name == "apex") {
			return side.serves
		}
	}
	return false
}

// recordedStatus is the status the state ConfigMap holds now.
func (c *campaign) recordedStatus() (rollout.Status, bool) {
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	obj, ok := c.server.objects[configMapsResource][types.NamespacedName{Namespace: campaignNamespace, Name: rollout.StateConfigMapName(campaignRelease)}]
	if !ok {
		return rollout.Status{}, false
	}
	var st rollout.Status
	if json.Unmarshal([]byte(obj.(*corev1.ConfigMap).Data["status.json"]), &st) != nil {
		return rollout.Status{}, false
	}
	return st, true
}

// liveCanaryWeight is the canary's live weight as the release's current router holds it.
func (c *campaign) liveCanaryWeight() (int, bool) {
	rt, err := c.observerRouter(c.currentRouter())
	if err != nil {
		return 0, false
	}
	w, err := rt.GetRoutes(context.Background())
	if err != nil {
		return 0, false
	}
	return w.Canary, true
}

// gatewayAnswers is "" when the Gateway routes the apex host to pods that answer through the
// route of provider attached to it: the HTTPRoute <apex> (its parentRefs) or the Istio
// VirtualService <apex> (its gateways), whose last rule (the one that matches on the path
// alone) sends some weight to a Service with Ready pods. Otherwise it says what is missing.
func (c *campaign) gatewayAnswers(provider string) string {
	gvr, kind, parents, rules, backends, host := router.HTTPRouteResource, "HTTPRoute", "parentRefs", "rules", "backendRefs", []string{"name"}
	if provider == "istio" {
		gvr, kind, parents, rules, backends, host = router.IstioVirtualServiceResource, "VirtualService", "gateways", "http", "route", []string{"destination", "host"}
	}
	c.server.mu.Lock()
	obj, ok := c.server.objects[gvr][types.NamespacedName{Namespace: campaignNamespace, Name: campaignTarget}]
	var route *unstructured.Unstructured
	if ok {
		route = obj.DeepCopyObject().(*unstructured.Unstructured)
	}
	c.server.mu.Unlock()
	if route == nil {
		return fmt.Sprintf("no %s %s routes it", kind, campaignTarget)
	}
	attached := false
	refs, _, _ := unstructured.NestedSlice(route.Object, "spec", parents)
	for _, p := range refs {
		ref, _ := p.(map[string]any)
		if p == campaignGateway || ref["name"] == campaignGateway {
			attached = true
		}
	}
	ruleList, _, _ := unstructured.NestedSlice(route.Object, "spec", rules)
	if !attached || len(ruleList) == 0 {
		return fmt.Sprintf("%s %s has no rule attached to it", kind, campaignTarget)
	}
	last, _ := ruleList[len(ruleList)-1].(map[string]any)
	dests, _ := last[backends].([]any)
	var tried []string
	for _, d := range dests {
		dest, _ := d.(map[string]any)
		weight := int64(1) // the default of both kinds for a lone destination
		switch w := dest["weight"].(type) {
		case int64:
			weight = w
		case float64:
			weight = int64(w)
		}
		name, _, _ := unstructured.NestedString(dest, host...)
		if weight == 0 || name == "" {
			continue
		}
		side := c.serviceSide(provider, name, name, int(weight))
		if side.serves {
			return ""
		}
		tried = append(tried, fmt.Sprintf("%s (weight %d, %s)", name, weight, podsOrNone(side.revision)))
	}
	return fmt.Sprintf("%s %s sends it to %v, none with Ready pods", kind, campaignTarget, tried)
}

// returnedToPromoted reports a Succeeded apply whose configuration went back to the revision
// the primary runs, after a later revision had passed its analysis without being promoted (its
// promotion interrupted, or its run killed): the run rolled that one back, as the
// configuration no longer asks for it, and settled on the primary. The primary runs the
// configured revision, which passed analysis before, and the record says it is the promoted
// template while the passed one was not: that revision is the promoted one from now on.
func (c *campaign) returnedToPromoted(running string) bool {
	st, ok := c.recordedStatus()
	if ok && c.shape.statefulSet {
		return c.statefulSetReturnedToPromoted(st, running)
	}
	if !ok || running != c.ws.revision.String() || !c.judge.isAllowed(running) || st.PassedSpec == st.LastPromotedSpec {
		return false
	}
	c.server.mu.Lock()
	primary, _ := c.server.objects[deploymentsResource][types.NamespacedName{Namespace: campaignNamespace, Name: campaignPrimary}].(*appsv1.Deployment)
	spec := ""
	if primary != nil {
		spec = primary.Annotations[rollout.AnnotationPrimarySpec]
	}
	if c.shape.knative {
		spec = c.knativeServiceView().primary
	}
	c.server.mu.Unlock()
	if spec == "" || spec != st.LastPromotedSpec {
		return false
	}
	c.cover("promotion: the configuration returned to the primary's revision")
	c.judge.mu.Lock()
	c.judge.passed = running
	c.judge.mu.Unlock()
	return true
}

// statefulSetReturnedToPromoted is returnedToPromoted for a set released in place, which has no
// primary copy to carry the promoted template: the configuration asks for the revision the set's
// pods run, one that may be the primary (clause 2), and the record names the set's current
// revision as the promoted one, so status, state and pods agree (clause 3). A later revision
// promoted in between, by a run this one cannot verify the record of (another host's, after a
// state rm), is then no longer the promoted one (campaign seed 1818).
func (c *campaign) statefulSetReturnedToPromoted(st rollout.Status, running string) bool {
	v := c.statefulSetView()
	if !v.exists || running != c.ws.revision.String() || !c.judge.isAllowed(running) || st.LastPromotedSpec != v.current || v.onOther > 0 {
		return false
	}
	c.cover("promotion: the configuration returned to the set's revision (StatefulSet)")
	c.judge.mu.Lock()
	c.judge.passed = running
	c.judge.mu.Unlock()
	return true
}
