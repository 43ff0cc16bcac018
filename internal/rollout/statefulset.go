package rollout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout/promotion"
)

// A StatefulSet is released in place: a "-primary" copy would duplicate its volumes. Between
// releases its RollingUpdate partition is held at HoldPartitionMax, above any replica count the
// set can reach whatever an autoscaler's bounds become, so neither a template change nor a
// scale-up starts a pod of an unanalysed revision; a rollout
// lowers the partition step by step, so that the updated share of the pods follows the steps,
// and compares the updated pods with the others by their controller-revision-hash. The
// revision a proof names is the StatefulSet controller's own revision name (the pods'
// controller-revision-hash), so the pods say which one each runs.

// KindStatefulSet is target_ref.kind for a StatefulSet.
const KindStatefulSet = "StatefulSet"

// HoldPartitionMax is the partition held between releases. Not an autoscaler's maxReplicas:
// raising that bound together with the template would let the scale-up start the new
// revision on the pods above the old bound before any analysis.
const HoldPartitionMax int32 = math.MaxInt32

// statefulSetPoll is how often the waits for the StatefulSet controller read the pods.
const statefulSetPoll = 250 * time.Millisecond

func (r Release) statefulSet() bool { return r.TargetKind == KindStatefulSet }

// stsRun is one engine call on a StatefulSet release. It is a run of the phase machine's
// kind on the same record, so that the operator's controls (controls.go) and the gates
// (phase_gates.go) act on it through the very code that serves a Deployment's run; its
// hash is the revision under analysis.
type stsRun struct {
	*run
}

func (e *Engine) newStsRun(rel Release, st Status, spec []byte) *stsRun {
	return &stsRun{run: e.newRun(rel, st, spec)}
}

// PodsForWeight is the number of updated pods a step's weight gives a set of replicas pods:
// the weight's share rounded down, but at least one pod (a step of no pod analyses nothing)
// and at most all of them.
func PodsForWeight(weight int, replicas int32) int32 {
	k := int32(int64(replicas) * int64(weight) / 100)
	return max(1, min(k, replicas))
}

func (e *Engine) applyStatefulSet(ctx context.Context, rel Release, spec []byte, prior Status) (Status, error) {
	return e.withLock(ctx, rel, false, func(ctx context.Context) (Status, error) {
		s := e.newStsRun(rel, prior, spec)
		defer s.finish(ctx)
		if err := s.check(); err != nil {
			return prior, err
		}
		cs, _, found, err := loadState(ctx, e.Kube, rel.Namespace, rel.Name)
		if err != nil {
			return prior, err
		}
		if found {
			if cs.Status.Target != "" && cs.Status.Target != rel.Target {
				return prior, fmt.Errorf("the cluster's record of canary_release %s/%s says it releases %q, not StatefulSet %q: set target_ref.name back, or remove this release first",
					rel.Namespace, rel.Name, cs.Status.Target, rel.Target)
			}
			// An unverifiable record is read as untrusted.go says. A first initialisation's
			// record is kept as one while the Terraform state knows no promoted revision: a
			// StatefulSet release has no Services to tell an established release by.
			if why := cs.Verify(rel.Seal); why != nil && (!cs.Status.claimsFirstInit() || prior.LastPromotedSpec != "") {
				kept := cs.Status.untrusted(prior, "")
				if cs.Status.claimsDiffer(kept, rel) {
					e.warnUntrusted(rel, cs.Status, kept, why)
				}
				cs.Status = kept
			} else if why == nil {
				rel.Seal.trustedSequence(cs)
			}
			s.st = cs.Status
			if s.st.LastPromotedSpec == "" {
				s.st.LastPromotedSpec = prior.LastPromotedSpec
			}
		}
		set, err := s.read(ctx)
		if err != nil {
			return s.st, err
		}
		if !s.st.Initialized {
			return s.initialize(ctx, set, found)
		}
		return s.release(ctx, set)
	})
}

// check refuses what a release by partition cannot do, naming the attribute.
func (s *stsRun) check() error {
	a := s.rel.Analysis
	switch {
	case s.rel.Manifest != nil:
		return errors.New("manifest: a StatefulSet is released through target_ref with kind = \"StatefulSet\"; manifest takes a Deployment only")
	case a.Iterations > 0:
		return fmt.Errorf("analysis.iterations: a StatefulSet is released by its partition, step by step (step_weight or step_weights); blue/green and A/B testing need a second copy, which a StatefulSet does not get")
	case !s.rel.SkipAnalysis && len((canaryStrategy{a}).Steps()) == 0:
		return errors.New("analysis: a StatefulSet release needs step_weight or step_weights")
	}
	for _, h := range a.Webhooks {
		if !slices.Contains(StatefulSetHookTypes, h.Type) {
			return fmt.Errorf("analysis.webhooks[%q].type = %q: a StatefulSet release runs %s webhooks only", h.Name, h.Type, strings.Join(StatefulSetHookTypes, ", "))
		}
	}
	return nil
}

// StatefulSetHookTypes are the webhook types a StatefulSet release runs: the checks of its
// steps, and the gates that hold it (with a url, or built in without one).
var StatefulSetHookTypes = []string{HookRollout, HookConfirmRollout, HookConfirmTrafficIncrease, HookConfirmPromotion}

// finish ends what the run started besides its record: the controls' watch, the batched
// Events and the notifications.
func (s *stsRun) finish(ctx context.Context) {
	s.stopFollowingControls()
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	s.flushEvents(cctx)
	s.drainNotifications(cctx)
}

// read returns the set once the controller has seen its spec, so that its status's update
// revision names the template the spec holds.
func (s *stsRun) read(ctx context.Context) (*appsv1.StatefulSet, error) {
	deadline := time.Now().Add(s.deadline())
	for {
		set, err := s.e.Kube.AppsV1().StatefulSets(s.rel.Namespace).Get(ctx, s.rel.Target, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("target_ref: reading StatefulSet %s/%s: %w", s.rel.Namespace, s.rel.Target, err)
		}
		if t := set.Spec.UpdateStrategy.Type; t != "" && t != appsv1.RollingUpdateStatefulSetStrategyType {
			return nil, fmt.Errorf("target_ref: StatefulSet %s/%s has updateStrategy %s; a release by partition needs RollingUpdate", s.rel.Namespace, s.rel.Target, t)
		}
		if set.Status.ObservedGeneration >= set.Generation && set.Status.UpdateRevision != "" {
			return set, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("StatefulSet %s/%s: the StatefulSet controller has not observed generation %d within %s (is kube-controller-manager running?)",
				s.rel.Namespace, s.rel.Target, set.Generation, s.deadline())
		}
		if err := sleep(ctx, statefulSetPoll); err != nil {
			return nil, err
		}
	}
}

func (s *stsRun) deadline() time.Duration {
	if s.rel.ProgressDeadline > 0 {
		return s.rel.ProgressDeadline
	}
	return 10 * time.Minute
}

func replicasOf(set *appsv1.StatefulSet) int32 {
	if set.Spec.Replicas == nil {
		return 1
	}
	return *set.Spec.Replicas
}

func partitionOf(set *appsv1.StatefulSet) int32 {
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return *ru.Partition
	}
	return 0
}

func (s *stsRun) record(ctx context.Context, phase Phase, message string) error {
	if s.st.Phase != phase {
		s.st.LastTransitionTime = s.e.now().UTC().Truncate(time.Second)
		s.store.event(ctx, normalEvent, string(phase), message)
	}
	s.st.Phase, s.st.Message = phase, message
	s.e.report(Progress{Kind: ProgressPhase, Namespace: s.rel.Namespace, Name: s.rel.Name, Message: fmt.Sprintf("%s: %s", phase, message)})
	return s.save(ctx)
}

func (s *stsRun) save(ctx context.Context) error {
	if s.rel.Instance != "" {
		s.st.Owner = s.rel.Instance
	}
	s.st.Target, s.st.Router = s.rel.Target, s.rel.Provider
	if err := s.store.save(ctx, s.st, s.spec); err != nil {
		return fmt.Errorf("saving release state in ConfigMap %s/%s: %w", s.rel.Namespace, StateConfigMapName(s.rel.Name), err)
	}
	return nil
}

// initialize makes the set's template the promoted one (the release's first initialisation,
// or the template it last promoted) and holds the partition.
func (s *stsRun) initialize(ctx context.Context, set *appsv1.StatefulSet, found bool) (Status, error) {
	candidate := set.Status.UpdateRevision
	var proof promotion.Proof
	var err error
	if s.st.LastPromotedSpec != "" {
		proof, err = promotion.PromotedBefore(s.st.LastPromotedSpec, candidate)
	} else {
		proof, err = promotion.FirstInitialisation(promotion.Evidence{OtherRecord: found && s.st.Phase != PhaseInitializing && s.st.Phase != ""}, candidate)
	}
	if err != nil {
		return s.st, &Failure{Status: s.st, Reason: fmt.Sprintf("StatefulSet %s/%s cannot be initialised from revision %s: %v", s.rel.Namespace, s.rel.Target, candidate, err)}
	}
	s.st.LastPromotedSpec = candidate
	if err := s.record(ctx, PhaseInitializing, fmt.Sprintf("initialising StatefulSet %s in place from revision %s", s.rel.Target, candidate)); err != nil {
		return s.st, err
	}
	if err := s.rollAll(ctx, proof); err != nil {
		return s.st, err
	}
	before := partitionOf(set)
	if err := s.holdNow(ctx); err != nil {
		return s.st, err
	}
	if before != HoldPartitionMax {
		s.e.warn(s.rel, "canary_release holds the StatefulSet's partition",
			fmt.Sprintf("canary_release set spec.updateStrategy.rollingUpdate.partition of StatefulSet %s/%s to %d (it was %d), above any replica count the set can reach, "+
				"so that neither a template change nor a scale-up runs an unanalysed pod: each release lowers it step by step. "+
				"If another tool manages the StatefulSet, make it ignore that field (lifecycle ignore_changes, or a server-side apply field manager of its own).",
				s.rel.Namespace, s.rel.Target, HoldPartitionMax, before))
	}
	s.st.Initialized, s.st.PrimarySpec, s.st.CanaryWeight = true, candidate, 0
	if err := s.record(ctx, PhaseInitialized, fmt.Sprintf("StatefulSet %s runs revision %s; its partition is held at %d", s.rel.Target, candidate, HoldPartitionMax)); err != nil {
		return s.st, err
	}
	return s.st, nil
}

// release finishes what an earlier run left, then settles or rolls out the set's revision.
func (s *stsRun) release(ctx context.Context, set *appsv1.StatefulSet) (Status, error) {
	candidate := set.Status.UpdateRevision
	switch {
	case s.st.Phase == PhaseRollingBack:
		return s.rollback(ctx, s.st.Message)
	case (s.st.Phase == PhasePromoting || s.st.Phase == PhaseFinalising) && s.st.PassedSpec == candidate:
		return s.promote(ctx, candidate)
	case candidate == s.st.LastPromotedSpec:
		return s.settle(ctx, candidate)
	}
	if s.st.Rejected != nil && s.st.Rejected.Revision == candidate && s.st.Rejected.Retry == s.rel.RetryRejected {
		return s.st, &Failure{Status: s.st, Reason: fmt.Sprintf("revision %s of StatefulSet %s/%s failed its analysis before (%s); change the template, or retry_rejected to analyse it again",
			candidate, s.rel.Namespace, s.rel.Target, s.st.Rejected.Reason)}
	}
	return s.progress(ctx, candidate)
}

// settle rolls every pod to the promoted revision (a run that stopped half-way may have
// left some on another) and holds the partition.
func (s *stsRun) settle(ctx context.Context, promoted string) (Status, error) {
	proof, err := promotion.PromotedBefore(s.st.LastPromotedSpec, promoted)
	if err != nil {
		return s.st, err
	}
	if err := s.rollAll(ctx, proof); err != nil {
		return s.st, err
	}
	if err := s.holdNow(ctx); err != nil {
		return s.st, err
	}
	s.st.CanaryWeight, s.st.FailedChecks, s.st.PrimarySpec = 0, 0, promoted
	if s.st.Phase != PhaseInitialized {
		s.st.Phase = PhaseSucceeded
	}
	s.st.Message = "nothing to release: the StatefulSet's template is the last promoted revision"
	return s.st, s.save(ctx)
}

// rollAll lowers the partition to 0 for the revision proof admits, when a pod runs another
// revision, and waits until every pod runs it and is Ready.
func (s *stsRun) rollAll(ctx context.Context, proof promotion.Proof) error {
	pods, err := s.podRevisions(ctx)
	if err != nil {
		return err
	}
	set, err := s.read(ctx)
	if err != nil {
		return err
	}
	if pods.allOn(proof.Revision(), replicasOf(set)) {
		return nil
	}
	if err := s.setPartition(ctx, partitionMove{to: 0, proof: proof}); err != nil {
		return err
	}
	return s.waitPods(ctx, proof.Revision(), replicasOf(set))
}

// holdNow raises the partition to HoldPartitionMax.
func (s *stsRun) holdNow(ctx context.Context) error {
	return s.setPartition(ctx, partitionMove{to: HoldPartitionMax})
}

// progress walks the steps, analysing the updated pods at each, then promotes. It holds where
// the phase machine holds (awaitGateChecking): at confirm-rollout before any pod moves, at the
// operator's pause and confirm-traffic-increase before each partition change, and at
// confirm-promotion before the promotion, the checks going on once pods run the revision.
func (s *stsRun) progress(ctx context.Context, candidate string) (Status, error) {
	s.hash = candidate
	s.st.CanarySpec, s.st.LastAppliedSpec, s.st.PassedSpec = candidate, candidate, ""
	s.st.FailedChecks, s.st.Iterations, s.st.Step, s.st.CanaryWeight = 0, 0, 0, 0
	s.st.PromoteNow, s.canaryReady = nil, false
	// The operator's one-shot controls set before this run are for another run: its first
	// record removes them, and the run follows those set from now on.
	s.store.clearOneShot = true
	if s.rel.SkipAnalysis {
		s.st.PassedSpec = candidate
		if err := s.record(ctx, PhasePromoting, fmt.Sprintf("skip_analysis: promoting revision %s of StatefulSet %s", candidate, s.rel.Target)); err != nil {
			return s.st, err
		}
		s.logDroppedControls(s.store.dropped)
		return s.promote(ctx, candidate)
	}
	if err := s.record(ctx, PhaseProgressing, fmt.Sprintf("new revision %s of StatefulSet %s detected, releasing it by partition", candidate, s.rel.Target)); err != nil {
		return s.st, err
	}
	s.logDroppedControls(s.store.dropped)
	s.store.dropped = nil
	s.followControls(ctx)
	set, err := s.readCandidate(ctx, candidate)
	if err != nil {
		return s.rollbackOn(ctx, err)
	}
	a := s.analyzer(set)
	interval := s.rel.Analysis.Interval
	if interval <= 0 {
		interval = time.Minute
	}
	c := &stsChecks{candidate: candidate, pace: &pacer{interval: interval}, queryErrors: map[string]int{}}
	if next, err := s.awaitGateChecking(ctx, a, HookConfirmRollout, PhaseWaiting, c.pace, nil); next != "" || err != nil {
		return s.steered(ctx, candidate, next, err)
	}
	steps := canaryStrategy{s.rel.Analysis}.Steps()
	for i, w := range steps {
		if set, err = s.readCandidate(ctx, candidate); err != nil {
			return s.rollbackOn(ctx, err)
		}
		gate := HookConfirmTrafficIncrease
		if n := replicasOf(set); int(PodsForWeight(w, n)*100/n) <= s.st.CanaryWeight {
			gate = "" // no more pods: only a pause holds the step
		}
		// Before the first step no pod runs the revision: nothing to check while held.
		var held heldCheck
		if i > 0 {
			held = func(ctx context.Context) (Phase, error) { _, next, err := s.checkInterval(ctx, c); return next, err }
		}
		if next, err := s.awaitGateChecking(ctx, a, gate, PhaseProgressing, c.pace, held); next != "" || err != nil {
			return s.steered(ctx, candidate, next, err)
		}
		if set, err = s.readCandidate(ctx, candidate); err != nil {
			return s.rollbackOn(ctx, err)
		}
		n := replicasOf(set)
		k := PodsForWeight(w, n)
		s.st.Step, s.st.CanaryWeight = i, int(k*100/n)
		if err := s.save(ctx); err != nil {
			return s.st, err
		}
		if n-k < partitionOf(set) {
			if err := s.setPartition(ctx, partitionMove{to: n - k}); err != nil {
				return s.rollbackOn(ctx, err)
			}
		}
		s.e.report(Progress{Kind: ProgressWeight, Namespace: s.rel.Namespace, Name: s.rel.Name, Weight: s.st.CanaryWeight,
			Message: fmt.Sprintf("%d of %d pods on revision %s (%d%%, step %d%%)", k, n, candidate, s.st.CanaryWeight, w)})
		if err := s.waitPods(ctx, candidate, k); err != nil {
			return s.rollbackOn(ctx, err)
		}
		s.canaryReady = true
		c.pace.restart()
		c.overSince = time.Time{}
		// As in Flagger, a failed check holds the step: the next interval judges it again,
		// until it passes or the failed checks reach the threshold.
		for passed := false; !passed; {
			var next Phase
			if passed, next, err = s.checkInterval(ctx, c); next != "" || err != nil {
				return s.steered(ctx, candidate, next, err)
			}
		}
	}
	check := func(ctx context.Context) (Phase, error) { _, next, err := s.checkInterval(ctx, c); return next, err }
	if next, err := s.awaitGateChecking(ctx, a, HookConfirmPromotion, PhaseWaitingPromotion, c.pace, check); next != "" || err != nil {
		return s.steered(ctx, candidate, next, err)
	}
	s.st.PassedSpec = candidate
	if err := s.record(ctx, PhasePromoting, fmt.Sprintf("revision %s passed its analysis; rolling it to every pod of StatefulSet %s", candidate, s.rel.Target)); err != nil {
		return s.st, err
	}
	return s.promote(ctx, candidate)
}

// readCandidate reads the set, refusing a template changed since the analysis began.
func (s *stsRun) readCandidate(ctx context.Context, candidate string) (*appsv1.StatefulSet, error) {
	set, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	if set.Status.UpdateRevision != candidate {
		return nil, fmt.Errorf("the StatefulSet's template changed during the analysis (revision %s, not %s)", set.Status.UpdateRevision, candidate)
	}
	return set, nil
}

// steered ends the analysis where a check, a gate or the operator's control ended it: a
// rollback (the reason and any rejection are on the run) or the operator's promote-now.
func (s *stsRun) steered(ctx context.Context, candidate string, next Phase, err error) (Status, error) {
	switch {
	case err != nil:
		return s.st, err
	case next == PhaseRollingBack:
		return s.rollback(ctx, s.reason)
	case next == PhasePromoting && s.st.PromoteNow != nil:
		p := s.st.PromoteNow
		if err := s.record(ctx, PhasePromoting, fmt.Sprintf("promoting revision %s of StatefulSet %s before its analysis completed, as the operator asked: %s=true (set by %s at %s)",
			candidate, s.rel.Target, ControlPromoteNow, managerName(p.Manager), p.At.UTC().Format(time.RFC3339))); err != nil {
			return s.st, err
		}
		return s.promote(ctx, candidate)
	}
	return s.st, fmt.Errorf("internal error: the analysis of StatefulSet %s/%s ended in phase %s", s.rel.Namespace, s.rel.Target, next)
}

// stopReason words why a run that cannot go on rolls back; an interrupted apply says so.
func (s *stsRun) stopReason(ctx context.Context, cause error) string {
	if ctx.Err() != nil {
		return interruptedReason(cause)
	}
	return fmt.Sprintf("the release of StatefulSet %s stopped: %v", s.rel.Target, cause)
}

// rollbackOn rolls back a run that cannot go on; an interrupted apply leaves the record for
// the next run, which rolls back first thing.
func (s *stsRun) rollbackOn(ctx context.Context, cause error) (Status, error) {
	return s.rollback(ctx, s.stopReason(ctx, cause))
}

// promote rolls the passed revision to every pod, the one promotion of a StatefulSet.
func (s *stsRun) promote(ctx context.Context, candidate string) (Status, error) {
	proof, err := promotion.Analysis(s.st.PassedSpec, candidate)
	switch {
	case err != nil && s.rel.SkipAnalysis:
		proof, err = promotion.SkipAnalysis(true, candidate)
	case s.st.PromoteNow != nil:
		// The operator's promote-now, recorded with the revision and the failed checks.
		proof, err = promotion.OperatorPromoteNow(s.st.PromoteNow.Revision, s.st.PromoteNow.FailedChecks, candidate)
	}
	if err != nil {
		return s.st, err
	}
	if err := s.rollAll(ctx, proof); err != nil {
		return s.st, err
	}
	if err := s.holdNow(ctx); err != nil {
		return s.st, err
	}
	s.st.LastPromotedSpec, s.st.PrimarySpec, s.st.CanaryWeight, s.st.FailedChecks = candidate, candidate, 0, 0
	done := fmt.Sprintf("revision %s promoted: every pod of StatefulSet %s runs it", candidate, s.rel.Target)
	if p := s.st.PromoteNow; p != nil && p.Revision == candidate {
		done += fmt.Sprintf(" (promoted before its analysis completed, by the operator's promote-now: %s at %s)", managerName(p.Manager), p.At.UTC().Format(time.RFC3339))
	}
	if err := s.record(ctx, PhaseSucceeded, done); err != nil {
		return s.st, err
	}
	return s.st, nil
}

// rollback restores the promoted template with the partition where it is, so the StatefulSet
// controller rolls the updated pods back, waits until every pod runs the promoted revision
// and is Ready, then holds the partition again.
func (s *stsRun) rollback(ctx context.Context, reason string) (Status, error) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	s.recordRejection()
	if err := s.record(cctx, PhaseRollingBack, reason); err != nil {
		return s.st, err
	}
	promoted := s.st.LastPromotedSpec
	proof, err := promotion.PromotedBefore(promoted, promoted)
	if err != nil {
		return s.st, err
	}
	template, err := s.revisionTemplate(cctx, promoted)
	if err != nil {
		return s.st, err
	}
	if err := s.setPartition(cctx, partitionMove{restore: template, proof: proof}); err != nil {
		return s.st, fmt.Errorf("rolling StatefulSet %s/%s back to revision %s: %w", s.rel.Namespace, s.rel.Target, promoted, err)
	}
	set, err := s.read(cctx)
	if err != nil {
		return s.st, err
	}
	if err := s.waitPods(cctx, promoted, replicasOf(set)); err != nil {
		return s.st, fmt.Errorf("rolling StatefulSet %s/%s back to revision %s: %w", s.rel.Namespace, s.rel.Target, promoted, err)
	}
	if err := s.holdNow(cctx); err != nil {
		return s.st, err
	}
	s.st.CanaryWeight, s.st.Step = 0, 0
	if err := s.record(cctx, PhaseFailed, reason+"; every pod runs revision "+promoted+" again"); err != nil {
		return s.st, err
	}
	return s.st, &Failure{Status: s.st, Reason: reason + fmt.Sprintf(": rolled back, every pod of StatefulSet %s/%s runs revision %s again and is Ready", s.rel.Namespace, s.rel.Target, promoted)}
}

// revisionTemplate reads the pod template a revision holds (the StatefulSet controller's
// ControllerRevision, which it keeps while a pod runs it).
func (s *stsRun) revisionTemplate(ctx context.Context, name string) (*corev1.PodTemplateSpec, error) {
	cr, err := s.e.Kube.AppsV1().ControllerRevisions(s.rel.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading ControllerRevision %s/%s, the promoted template of StatefulSet %s: %w", s.rel.Namespace, name, s.rel.Target, err)
	}
	template, err := templateOfRevision(cr.Data.Raw)
	if err != nil {
		return nil, fmt.Errorf("ControllerRevision %s/%s: %w", s.rel.Namespace, name, err)
	}
	return template, nil
}

// podRevisions are the set's pods by ordinal.
type podRevisions map[int32]corev1.Pod

func (p podRevisions) allOn(revision string, replicas int32) bool {
	for i := range replicas {
		pod, ok := p[i]
		if !ok || pod.Labels[appsv1.ControllerRevisionHashLabelKey] != revision || !podReady(pod) {
			return false
		}
	}
	return true
}

// updated counts the Ready pods that run revision, and every pod that runs it.
func (p podRevisions) updated(revision string) (ready, all int32) {
	for _, pod := range p {
		if pod.Labels[appsv1.ControllerRevisionHashLabelKey] == revision && pod.DeletionTimestamp == nil {
			all++
			if podReady(pod) {
				ready++
			}
		}
	}
	return ready, all
}

func podReady(pod corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (s *stsRun) podRevisions(ctx context.Context) (podRevisions, error) {
	set, err := s.e.Kube.AppsV1().StatefulSets(s.rel.Namespace).Get(ctx, s.rel.Target, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("StatefulSet %s/%s: its selector: %w", s.rel.Namespace, s.rel.Target, err)
	}
	list, err := s.e.Kube.CoreV1().Pods(s.rel.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	out := podRevisions{}
	prefix := s.rel.Target + "-"
	for _, pod := range list.Items {
		ordinal, err := strconv.ParseInt(strings.TrimPrefix(pod.Name, prefix), 10, 32)
		if !strings.HasPrefix(pod.Name, prefix) || err != nil {
			continue
		}
		out[int32(ordinal)] = pod
	}
	return out, nil
}

// waitPods waits until at least want pods run revision and are Ready, and every pod of the
// set is Ready.
func (s *stsRun) waitPods(ctx context.Context, revision string, want int32) error {
	deadline := time.Now().Add(s.deadline())
	for {
		pods, err := s.podRevisions(ctx)
		if err == nil {
			set, serr := s.e.Kube.AppsV1().StatefulSets(s.rel.Namespace).Get(ctx, s.rel.Target, metav1.GetOptions{})
			if serr != nil {
				return serr
			}
			ready, _ := pods.updated(revision)
			allReady := int32(0)
			for _, pod := range pods {
				if podReady(pod) {
					allReady++
				}
			}
			if ready >= want && allReady >= replicasOf(set) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("StatefulSet %s/%s: %d of the %d pods wanted on revision %s are Ready after %s (progress_deadline)",
					s.rel.Namespace, s.rel.Target, ready, want, revision, s.deadline())
			}
		}
		if err := sleep(ctx, statefulSetPoll); err != nil {
			return err
		}
	}
}

// analyzer runs the interval's checks, the built-in queries comparing the updated pods
// (candidate) with the others by their controller-revision-hash.
func (s *stsRun) analyzer(set *appsv1.StatefulSet) analyzer {
	rel := s.rel
	rel.Analysis.Metrics = statefulSetMetrics(rel.Analysis.Metrics, set.Status.UpdateRevision, set.Status.CurrentRevision)
	return analyzer{rel: rel, querier: s.e.Metrics, http: s.e.HTTP, insecureHTTP: s.e.InsecureHTTP,
		report: func(p Progress) { p.Namespace, p.Name = s.rel.Namespace, s.rel.Name; s.e.report(p) }}
}

// deleteStatefulSet gives the set back to ordinary rolling updates when nothing unanalysed is
// held back (partition 0 then changes no pod); otherwise it leaves the partition, and says so.
func (e *Engine) deleteStatefulSet(ctx context.Context, rel Release) error {
	_, err := e.withLock(ctx, rel, true, func(ctx context.Context) (Status, error) {
		s := e.newStsRun(rel, Status{}, nil)
		cs, _, found, err := loadState(ctx, e.Kube, rel.Namespace, rel.Name)
		if err != nil || !found {
			return Status{}, err
		}
		s.st = cs.Status
		set, err := e.Kube.AppsV1().StatefulSets(rel.Namespace).Get(ctx, rel.Target, metav1.GetOptions{})
		if err == nil && set.Status.UpdateRevision == s.st.LastPromotedSpec && set.Status.ObservedGeneration >= set.Generation {
			proof, perr := promotion.PromotedBefore(s.st.LastPromotedSpec, s.st.LastPromotedSpec)
			if perr == nil {
				err = s.setPartition(ctx, partitionMove{to: 0, proof: proof})
			}
		} else if err == nil {
			e.warn(rel, "StatefulSet partition left held", fmt.Sprintf("StatefulSet %s/%s holds revision %s, which never passed analysis, behind its partition %d; "+
				"the partition was left so that destroying the release does not roll it out. Lower it yourself once you want it.", rel.Namespace, rel.Target, set.Status.UpdateRevision, partitionOf(set)))
		}
		if err != nil {
			return Status{}, fmt.Errorf("giving StatefulSet %s/%s its partition back: %w", rel.Namespace, rel.Target, err)
		}
		return Status{}, s.store.delete(ctx)
	})
	return err
}

// statefulSetDrift lists what the next apply repairs: a new template, a partition not held.
func (e *Engine) statefulSetDrift(ctx context.Context, rel Release, st Status) ([]string, error) {
	set, err := e.Kube.AppsV1().StatefulSets(rel.Namespace).Get(ctx, rel.Target, metav1.GetOptions{})
	if err != nil {
		return []string{fmt.Sprintf("target StatefulSet %s/%s cannot be read: %v", rel.Namespace, rel.Target, err)}, nil
	}
	var out []string
	if st.LastPromotedSpec != "" && set.Status.UpdateRevision != "" && set.Status.UpdateRevision != st.LastPromotedSpec {
		out = append(out, fmt.Sprintf("target StatefulSet %s/%s: its template (revision %s) differs from the last promoted revision; the next apply analyses it", rel.Namespace, rel.Target, set.Status.UpdateRevision))
	}
	if !st.Phase.Active() && st.Initialized && partitionOf(set) < HoldPartitionMax && set.Status.UpdateRevision != set.Status.CurrentRevision {
		out = append(out, fmt.Sprintf("target StatefulSet %s/%s: its partition is %d, below the held %d; the next apply holds it again", rel.Namespace, rel.Target, partitionOf(set), HoldPartitionMax))
	}
	return out, nil
}
