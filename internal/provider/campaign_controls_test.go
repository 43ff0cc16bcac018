package provider

// The operators' controls in the campaign (issue 32 item 4): the seven controls (pause,
// resume, abort, promote-now and the three approvals) set at random moments of an apply and
// between applies, by an operator who holds the steer verb and by an intruder who may only
// edit ConfigMaps, with the control policy (examples/rbac/policy-controls.yaml) modelled as
// installed in half of the schedules. The policy is modelled where it acts, at the API
// server: the writers' clients answer Forbidden for the writes it denies them.
//
// What the judge holds the controls to: a pause seen for longer than controlGrace holds the
// canary's weight and the promotion; an abort seen that long rolls back (no more weight, no
// promotion); a closed built-in gate holds what it guards; an operator's promote-now is a
// promotion route (promoteNowAllows); and a control the policy denied changes nothing.

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/controlpolicy"
	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// The writers of controls besides the harness (an administrator, who holds every verb).
const (
	// writerOperator holds the steer verb (examples/rbac/clusterrole-operator.yaml).
	writerOperator = "operator"
	// writerIntruder may edit ConfigMaps in the namespace (the built-in edit role) and holds
	// neither of the policy's verbs.
	writerIntruder = "intruder"
)

// The seven controls a schedule sets.
const (
	controlPause         = "pause"
	controlResume        = "resume"
	controlAbort         = "abort"
	controlPromoteNow    = "promote-now"
	controlApproveStart  = "approve " + rollout.HookConfirmRollout
	controlApproveWeight = "approve " + rollout.HookConfirmTrafficIncrease
	controlApprovePromo  = "approve " + rollout.HookConfirmPromotion
)

var allControls = []string{controlPause, controlResume, controlAbort, controlPromoteNow, controlApproveStart, controlApproveWeight, controlApprovePromo}

// controlGrace is how long a run may take to see a control: it reads them on a watch at each
// check, one interval apart, and a write it started before may still land.
const controlGrace = 2*time.Second + reactionGrace

// campaignControls is what one schedule's controls did, for the judge.
type campaignControls struct {
	c *campaign
	// policy: the control policy is installed and enforced in the namespace.
	policy   bool
	operator *simulatedProcess
	intruder *simulatedProcess

	mu sync.Mutex
	// pausedAt is when a pause landed; zero while the release is not paused. pausedWeight is
	// the lowest canary weight seen since, once the grace ran out.
	pausedAt     time.Time
	pausedWeight int
	// abortedAt is when an abort landed while a run analysed its canary; zero otherwise.
	abortedAt     time.Time
	abortedWeight int
	// approved holds the gate types an approval of which landed, and no run dropped since.
	approved map[string]bool
	// lastPhase is the phase the record held before the last write.
	lastPhase rollout.Phase
	// answering is set once the operator was asked to answer a gate of this revision.
	answering map[string]bool
}

func newCampaignControls(c *campaign) *campaignControls {
	k := &campaignControls{c: c, policy: keyedCoin(c.seed, "control policy installed") < 0.5, approved: map[string]bool{}, answering: map[string]bool{}}
	k.operator = k.writer(writerOperator, true)
	k.intruder = k.writer(writerIntruder, false)
	next := c.server.onChange
	c.server.onChange = func(ch apiChange) {
		next(ch)
		k.afterWrite(ch)
	}
	return k
}

// writer is a client whose writes the judge sees as the harness's (behind the release's
// back), and which the policy, when installed, holds to its verbs.
func (k *campaignControls) writer(name string, steer bool) *simulatedProcess {
	p := k.c.server.newProcess(harnessWriter, k.c.newProcessFaults(harnessWriter, faultPlan{}))
	p.kube.PrependReactor("*", "configmaps", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if err := k.admit(name, steer, action); err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	return p
}

// admit is the policy's decision on a write of the state ConfigMap: changing a control needs
// the steer verb, changing the record (data, or the ConfigMap itself) the record verb.
func (k *campaignControls) admit(name string, steer bool, action k8stesting.Action) error {
	update, ok := action.(k8stesting.UpdateAction)
	if !k.policy || !ok {
		return nil // the writers only get and update
	}
	state := rollout.StateConfigMapName(campaignRelease)
	after, ok := update.GetObject().(*corev1.ConfigMap)
	if !ok || after.Name != state {
		return nil
	}
	live, err := k.c.server.get(configMapsResource, campaignNamespace, state)
	if err != nil {
		return nil //nolint:nilerr // no verdict here: the update itself fails as it would
	}
	before, ok := live.(*corev1.ConfigMap)
	if !ok {
		return nil
	}
	if !mapsEqual(before.Data, after.Data) {
		return forbidden(name, controlpolicy.VerbRecord, "update")
	}
	if !steer && !mapsEqual(controlsOnConfigMap(before), controlsOnConfigMap(after)) {
		return forbidden(name, controlpolicy.VerbSteer, "update")
	}
	return nil
}

func forbidden(who, verb, what string) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, rollout.StateConfigMapName(campaignRelease),
		fmt.Errorf("ValidatingAdmissionPolicy %s denied the %s by %s: it needs %s on %s.%s", controlpolicy.PolicyName, what, who, verb, controlpolicy.Resource, controlpolicy.Group))
}

func controlsOnConfigMap(cm *corev1.ConfigMap) map[string]string {
	out := map[string]string{}
	for key, value := range cm.Annotations {
		if len(key) > len(controls.Prefix) && key[:len(controls.Prefix)] == controls.Prefix {
			out[key] = value
		}
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for key, value := range a {
		if other, ok := b[key]; !ok || other != value {
			return false
		}
	}
	return true
}

// controlsAtRequest sets a random control at a random request of one command in three.
func (c *campaign) controlsAtRequest(f *processFaults, at string) {
	if c.converging() || keyedCoin(c.seed, "control command "+f.process) >= 1.0/3 {
		return
	}
	if _, due := c.fire(f.process, "control", at, 15); due {
		c.setControl(context.Background(), f.process+" at "+at)
	}
}

// controlsBetweenApplies sets a random control before one command in six.
func (c *campaign) controlsBetweenApplies(ctx context.Context, process string) {
	if keyedCoin(c.seed, "control before "+process) < 1.0/6 {
		c.setControl(ctx, "before "+process)
	}
}

// setControl sets one of the seven controls, by the operator or the intruder.
func (c *campaign) setControl(ctx context.Context, when string) {
	kind := allControls[int(keyedCoin(c.seed, "control kind "+when)*float64(len(allControls)))%len(allControls)]
	who := writerOperator
	if keyedCoin(c.seed, "control writer "+when) < 0.35 {
		who = writerIntruder
	}
	c.writeControl(ctx, kind, who, when)
	if kind == controlPause {
		// An operator resumes a pause after a while; the convergence resumes any that is left.
		delay := time.Duration(2+keyedCoin(c.seed, "resume after "+when)*25) * time.Second
		time.AfterFunc(delay, func() { c.writeControl(context.Background(), controlResume, writerOperator, "after "+when) })
	}
}

// writeControl writes one control as kubectl annotate does, and tells the judge what landed.
func (c *campaign) writeControl(ctx context.Context, kind, who, when string) {
	k := c.controls
	client := k.operator
	if who == writerIntruder {
		client = k.intruder
	}
	key, value := controlAnnotation(kind)
	cms := client.kube.CoreV1().ConfigMaps(campaignNamespace)
	cm, err := cms.Get(ctx, rollout.StateConfigMapName(campaignRelease), metav1.GetOptions{})
	if err == nil {
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		if value == "" {
			delete(cm.Annotations, key)
		} else {
			cm.Annotations[key] = value
		}
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-annotate"})
	}
	if err != nil {
		c.tracef("%s, %s: %s not set (%v)", who, when, kind, err)
		if apierrors.IsForbidden(err) {
			c.cover(fmt.Sprintf("control: %s by the %s, denied by the policy", kind, who))
		}
		return
	}
	c.cover(fmt.Sprintf("control: %s by the %s (policy installed: %v)", kind, who, k.policy))
	c.tracef("%s, %s: %s", who, when, kind)
	k.landed(kind)
}

// controlAnnotation is the annotation a control sets; "" as value removes it.
func controlAnnotation(kind string) (string, string) {
	switch kind {
	case controlPause:
		return controls.Pause, "true"
	case controlResume:
		return controls.Pause, ""
	case controlAbort:
		return controls.Abort, "true"
	case controlPromoteNow:
		return controls.PromoteNow, "true"
	case controlApproveStart:
		return controls.ApprovalKey(rollout.HookConfirmRollout), "approved"
	case controlApproveWeight:
		return controls.ApprovalKey(rollout.HookConfirmTrafficIncrease), "approved"
	}
	return controls.ApprovalKey(rollout.HookConfirmPromotion), "approved"
}

// landed notes a control that the API server took.
func (k *campaignControls) landed(kind string) {
	weight, _ := k.c.liveCanaryWeight()
	st, _ := k.c.recordedStatus()
	k.mu.Lock()
	defer k.mu.Unlock()
	switch kind {
	case controlPause:
		if k.pausedAt.IsZero() {
			k.pausedAt, k.pausedWeight = time.Now(), weight
		}
	case controlResume:
		k.pausedAt = time.Time{}
	case controlAbort:
		// An abort acts on a run that analyses its canary; a promotion under way goes on.
		if analysing(st.Phase) {
			k.abortedAt, k.abortedWeight = time.Now(), weight
		}
	case controlPromoteNow:
		k.c.mu.Lock()
		k.c.promoteNowAsked = true
		k.c.mu.Unlock()
	default:
		k.approved[kind] = true
	}
}

// approvalsDropped forgets the approvals a run's write of the state ConfigMap removed: an
// approval is one-shot, for the run it was set in, and a run's first record drops those set
// before it (rollout.oneShotControls). A later promotion through the gate needs another one.
func (k *campaignControls) approvalsDropped(ch apiChange) {
	before, _ := ch.before.(*corev1.ConfigMap)
	after, _ := ch.after.(*corev1.ConfigMap)
	if before == nil || after == nil || after.Name != rollout.StateConfigMapName(campaignRelease) {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, kind := range []string{controlApproveStart, controlApproveWeight, controlApprovePromo} {
		key, _ := controlAnnotation(kind)
		if before.Annotations[key] != "" && after.Annotations[key] == "" {
			k.approved[kind] = false
		}
	}
}

// gateAsked finds the built-in gate a record's message waits for.
var gateAsked = regexp.MustCompile(`canary-release\.dev/(confirm-[a-z-]+)=approved`)

// afterWrite judges a run's write by the controls, and has the operator answer the built-in
// gate the record says it waits for.
func (k *campaignControls) afterWrite(ch apiChange) {
	if ch.by == harnessWriter {
		return
	}
	// The write that drops an approval may be the one that acts on it (the promotion's record,
	// whose save drops the one-shot controls when the run's first record created the state
	// ConfigMap): it is judged with the approval, and the approval is forgotten after.
	defer k.approvalsDropped(ch)
	st, ok := k.c.recordedStatus()
	weight, readable := k.c.liveCanaryWeight()
	live := k.c.liveControls()
	k.mu.Lock()
	// A control removed (the run removes one-shot ones) or deleted with the ConfigMap no
	// longer holds anything.
	if live[controls.Pause] != "true" {
		k.pausedAt = time.Time{}
	}
	if live[controls.Abort] != "true" {
		k.abortedAt = time.Time{}
	}
	previous := k.lastPhase
	if ok {
		k.lastPhase = st.Phase
	}
	promoting := ok && st.Phase == rollout.PhasePromoting && previous != rollout.PhasePromoting && previous != ""
	var held []string
	now := time.Now()
	// Weights are held while a run analyses its canary; a promotion under way moves them.
	readable = readable && ok && analysing(st.Phase)
	// A disruption a moment ago (a node drain of a replica ratio's primary, an autoscaler's
	// scale-up of a StatefulSet) moves the live share without the run: the run gets the grace
	// to answer it before the weight is judged against the one the control found.
	settled := time.Since(k.c.lastDisruption()) > reactionGrace
	// A StatefulSet's share moves with its autoscaler, which the run cannot undo: its controls
	// are judged on the partition's writes instead (judgeControlsOnPartition).
	readable = readable && !k.c.shape.statefulSet
	if !k.pausedAt.IsZero() && readable {
		switch {
		case now.Sub(k.pausedAt) <= controlGrace:
			k.pausedWeight = weight
		case !settled:
		case weight > k.pausedWeight:
			held = append(held, fmt.Sprintf("the canary went from %d%% to %d%% %s after the operator's pause", k.pausedWeight, weight, now.Sub(k.pausedAt)))
		default:
			k.pausedWeight = weight
		}
		if promoting && now.Sub(k.pausedAt) > controlGrace {
			held = append(held, fmt.Sprintf("the promotion started %s after the operator's pause", now.Sub(k.pausedAt)))
		}
	}
	if !k.abortedAt.IsZero() && now.Sub(k.abortedAt) > controlGrace {
		if readable && settled && weight > k.abortedWeight {
			held = append(held, fmt.Sprintf("the canary went from %d%% to %d%% %s after the operator's abort", k.abortedWeight, weight, now.Sub(k.abortedAt)))
		}
		if promoting {
			held = append(held, fmt.Sprintf("the promotion started %s after the operator's abort", now.Sub(k.abortedAt)))
		}
	}
	if ok && !analysing(st.Phase) {
		k.abortedAt = time.Time{} // the run left its analysis: the abort acted, or came too late
	}
	gate := ""
	// Once per run, gate and step: a gate asked again at a later step is answered again.
	if m := gateAsked.FindStringSubmatch(st.Message); ok && m != nil && !k.answering[fmt.Sprintf("%s %s %d", ch.by, m[1], st.Step)] {
		gate = m[1]
		k.answering[fmt.Sprintf("%s %s %d", ch.by, m[1], st.Step)] = true
	}
	k.mu.Unlock()
	for _, text := range held {
		k.c.judge.fail("clause 4", classifyControlBreak(text), "%s: %s", ch.by, text)
	}
	if gate != "" {
		k.c.answerGate(ch.by, gate)
	}
	if promoting {
		k.checkPromotionGate(ch.by, st)
	}
}

// answerGate has the operator approve a built-in gate a while after a run asked, unless the
// operator is away in this command (then the gate times out); the convergence always answers.
func (c *campaign) answerGate(process, gate string) {
	if c.currentStep() != "converge" && keyedCoin(c.seed, "operator away "+process) < 0.25 {
		return
	}
	delay := time.Duration(500+keyedCoin(c.seed, "approval delay "+process+gate)*8000) * time.Millisecond
	who := writerOperator
	if c.currentStep() != "converge" && keyedCoin(c.seed, "approval by intruder "+process+gate) < 0.2 {
		who = writerIntruder
		if c.currentStep() == "converge" {
			// The intruder's approval may be refused (the policy): the operator answers after it.
			time.AfterFunc(delay+time.Second, func() {
				c.writeControl(context.Background(), "approve "+gate, writerOperator, "answering "+process)
			})
		}
	}
	time.AfterFunc(delay, func() { c.writeControl(context.Background(), "approve "+gate, who, "answering "+process) })
}

// checkPromotionGate: with a built-in confirm-promotion gate, a promotion needs an approval
// that landed. A promote-now skips the gates; so does a revert within rollback_window, which
// has no step for the gate to follow (the resource docs, Fast revert): st, the record that
// announces the promotion, names the revert, to a template the oracle let be the primary
// before (clause 2 judges the primary's write against the window again).
func (k *campaignControls) checkPromotionGate(by string, st rollout.Status) {
	if !k.c.shape.hasGate(rollout.HookConfirmPromotion) || k.c.shape.skipAnalysis || k.c.promoteNowAllows(k.c.running(campaignTarget)) {
		return
	}
	if k.c.revertStarting(st) && k.c.judge.isAllowed(k.c.running(campaignTarget)) {
		k.c.cover("promotion: a revert within rollback_window past a confirm-promotion gate")
		return
	}
	k.mu.Lock()
	approved := k.approved[controlApprovePromo]
	k.mu.Unlock()
	if !approved {
		k.c.judge.fail("clause 4", "", "%s started a promotion through the built-in %s gate, which no approval opened", by, rollout.HookConfirmPromotion)
	}
}

// healControls is the operator's part of the convergence: a pause is resumed.
func (c *campaign) healControls(ctx context.Context) {
	c.controls.mu.Lock()
	paused := !c.controls.pausedAt.IsZero()
	c.controls.mu.Unlock()
	if paused {
		c.writeControl(ctx, controlResume, writerOperator, "the convergence")
	}
}

// Built-in gates: webhooks without url, drawn for one schedule in six.
func drawBuiltInGates(seed int64) []string {
	if keyedCoin(seed, "built-in gates") >= 1.0/6 {
		return nil
	}
	all := []string{rollout.HookConfirmRollout, rollout.HookConfirmTrafficIncrease, rollout.HookConfirmPromotion}
	var gates []string
	for _, g := range all {
		if keyedCoin(seed, "built-in gate "+g) < 0.5 {
			gates = append(gates, g)
		}
	}
	if len(gates) == 0 {
		gates = append(gates, rollout.HookConfirmPromotion)
	}
	return gates
}

func (s releaseShape) hasGate(gate string) bool {
	for _, g := range s.gates {
		if g == gate {
			return true
		}
	}
	return false
}

// addBuiltInGates adds the shape's built-in gates to analysis, with a gate_timeout so that an
// operator who does not answer rolls the run back.
func (s releaseShape) addBuiltInGates(analysis map[string]any) {
	if len(s.gates) == 0 {
		return
	}
	hooks, _ := analysis["webhooks"].([]any)
	for _, g := range s.gates {
		hooks = append(hooks, map[string]any{"name": "operator-" + g, "type": g})
	}
	analysis["webhooks"] = hooks
	analysis["gate_timeout"] = "20s"
}

// analysing reports a phase in which a run analyses its canary: the controls hold its weight.
func analysing(phase rollout.Phase) bool {
	return phase == rollout.PhaseProgressing || phase == rollout.PhaseWaiting || phase == rollout.PhaseWaitingPromotion
}

// liveControls are the control annotations the state ConfigMap holds now; none without it.
func (c *campaign) liveControls() map[string]string {
	obj, err := c.server.get(configMapsResource, campaignNamespace, rollout.StateConfigMapName(campaignRelease))
	if err != nil {
		return nil
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil
	}
	return controlsOnConfigMap(cm)
}
