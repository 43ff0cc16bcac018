package rollout

import (
	"fmt"
	"strings"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
	"github.com/canary-release/terraform-provider-canary/internal/webhook"
)

// Preview is what a rollout of a release will do, worked out from its configuration alone, so
// that a plan can show it before anything runs. It follows the phases' own timing: one
// analysis interval per step, extra intervals for failed checks below the threshold, and one
// interval between two promotion steps.
type Preview struct {
	// Kind is the strategy: "canary", "A/B testing" or "blue/green".
	Kind string
	// Mirror says the strategy mirrors requests to the canary: a first step at weight 0
	// (canary), or every iteration (blue/green).
	Mirror bool
	// Steps are the canary weights, each held for at least one analysis interval.
	Steps []int
	// PromotionSteps are the canary weights while traffic returns to the promoted primary.
	PromotionSteps []int
	// Intervals is the number of analysis intervals of a run that passes every check.
	Intervals int
	// Checks are the names of what each interval judges: metrics, then rollout webhooks.
	Checks []string
	// Gates are what may hold the run before the first shift.
	Gates []string
	// Shortest is a run where every check passes and every pod is Ready at once.
	Shortest time.Duration
	// Worst is a run that still promotes: threshold−1 checks fail, every readiness wait takes
	// the whole progress deadline, every webhook its whole timeout and every gate its whole
	// gate_timeout. Query errors, which hold a step without counting, add an interval each.
	Worst time.Duration
	// Unbounded names a gate that no gate_timeout bounds: only the apply's timeout does.
	Unbounded string
	// Scaling says how the autoscaler_ref scales both sides, and how the primary is held at
	// its pre-rollout replicas before traffic returns to it; empty without an autoscaler.
	Scaling string
}

// PreviewOf works out the rollout of rel.
func PreviewOf(rel Release) Preview {
	a := rel.Analysis
	p := Preview{}
	readiness := rel.ProgressDeadline
	if rel.SkipAnalysis {
		p.Shortest, p.Worst = 0, 2*readiness
		return p
	}
	strategy := StrategyFor(a)
	splits := strategy.Splits()
	p.Kind, p.Mirror = strategy.Kind(), a.Mirror
	for _, s := range splits {
		p.Steps = append(p.Steps, s.Canary)
	}
	if len(p.Steps) > 0 {
		p.PromotionSteps = promotionSteps(p.Steps[len(p.Steps)-1], a.StepWeightPromotion)
	}
	p.Intervals = len(splits)
	var perCheck, gates, after time.Duration
	for _, m := range a.Metrics {
		p.Checks = append(p.Checks, "metric "+m.Name)
	}
	gateWaits := 0
	for _, h := range a.Webhooks {
		switch h.Type {
		case HookConfirmRollout, HookConfirmPromotion:
			p.Gates = append(p.Gates, h.Type+" webhook "+h.Name)
			gateWaits++
		case HookConfirmTrafficIncrease:
			p.Gates = append(p.Gates, h.Type+" webhook "+h.Name+" (before every step)")
			gateWaits += len(p.Steps)
		case HookPreRollout:
			p.Gates = append(p.Gates, "pre-rollout webhook "+h.Name)
			gates += webhook.Timeout(h.Timeout)
		case HookPostRollout:
			after += webhook.Timeout(h.Timeout)
		case HookRollout:
			p.Checks = append(p.Checks, "webhook "+h.Name)
			perCheck += webhook.Timeout(h.Timeout)
		case HookRollback:
			p.Checks = append(p.Checks, "rollback webhook "+h.Name)
			perCheck += webhook.Timeout(h.Timeout)
		}
		if gateWaits > 0 && a.GateTimeout == 0 && p.Unbounded == "" {
			p.Unbounded = h.Name
		}
	}
	// Finalising waits one interval between two non-zero promotion weights.
	promotionWaits := max(len(p.PromotionSteps)-2, 0)
	p.Shortest = time.Duration(p.Intervals+promotionWaits) * a.Interval
	failures := max(a.Threshold, 1) - 1
	interval := max(a.Interval, perCheck)
	if s := rel.Autoscaler; s != nil {
		kind, minimum := "HorizontalPodAutoscaler", "minReplicas"
		if s.Kind == autoscaler.KindScaledObject {
			kind, minimum = "ScaledObject", "minReplicaCount"
		}
		p.Scaling = fmt.Sprintf("the canary at %s %s's %s; before traffic returns to the primary, %s holds the primary's pre-rollout replicas as its minimum until they are Ready",
			kind, s.Name, minimum, s.PrimaryName())
		if s.Kind == autoscaler.KindScaledObject {
			p.Scaling += fmt.Sprintf("; %s is paused (autoscaling.keda.sh/paused-replicas) at the replicas the release gives %s", s.Name, rel.Target)
		}
		// The hold waits for the primary's replicas once, at promotion or at rollback.
		p.Worst += readiness
	}
	p.Worst += 2*readiness + time.Duration(failures+1)*gates + time.Duration(p.Intervals+failures)*interval +
		time.Duration(promotionWaits)*a.Interval + after + time.Duration(gateWaits)*a.GateTimeout
	return p
}

// Schedule is the weight schedule as the plan shows it: "10 → 20 → 30 → promote".
func (p Preview) Schedule() string {
	switch p.Kind {
	case "A/B testing":
		return fmt.Sprintf("A/B testing: %d iterations with the requests matching analysis.match on the canary → promote", p.Intervals)
	case "blue/green":
		traffic := "test traffic alone"
		if p.Mirror {
			traffic = "test traffic and mirrored requests"
		}
		return fmt.Sprintf("blue/green: %d iterations on %s → all traffic to the canary for one interval → promote", p.Intervals-1, traffic)
	}
	parts := make([]string, 0, len(p.Steps)+1)
	for i, w := range p.Steps {
		if i == 0 && p.Mirror {
			parts = append(parts, "mirror")
			continue
		}
		parts = append(parts, fmt.Sprint(w))
	}
	return strings.Join(append(parts, "promote"), " → ")
}
