package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
)

func TestPreviewFollowsThePhasesTiming(t *testing.T) {
	rel := Release{ProgressDeadline: 60 * time.Second, Analysis: Analysis{
		Interval: 10 * time.Second, Threshold: 3, StepWeights: []int{5, 10, 25, 50}, StepWeightPromotion: 25,
		Metrics: []Metric{{Name: "request-success-rate"}},
		Webhooks: []Webhook{
			{Name: "gate", Type: HookPreRollout, Timeout: 5 * time.Second},
			{Name: "load-test", Type: HookRollout, Timeout: 15 * time.Second},
			{Name: "notify", Type: HookPostRollout},
		},
	}}
	p := PreviewOf(rel)
	if got := p.Schedule(); got != "5 → 10 → 25 → 50 → promote" {
		t.Errorf("schedule = %q", got)
	}
	// Promotion from 50 by 25 is 25, then 0: one non-zero weight, so no wait between two.
	if p.Intervals != 4 || p.Shortest != 40*time.Second {
		t.Errorf("intervals = %d, shortest = %s, want 4 and 40s", p.Intervals, p.Shortest)
	}
	// 2 readiness waits (120s) + 3 gate attempts (15s) + 6 intervals of the slow webhook
	// (15s each, 90s) + the post-rollout webhook's default timeout (10s).
	if want := 235 * time.Second; p.Worst != want {
		t.Errorf("worst = %s, want %s", p.Worst, want)
	}
	if len(p.Checks) != 2 || len(p.Gates) != 1 {
		t.Errorf("checks = %v, gates = %v", p.Checks, p.Gates)
	}

	rel.Analysis = Analysis{Interval: time.Minute, Threshold: 1, StepWeight: 10, MaxWeight: 50, StepWeightPromotion: 10}
	p = PreviewOf(rel)
	// 5 steps, then 40 → 30 → 20 → 10 → 0: three waits between the four non-zero weights.
	if p.Schedule() != "10 → 20 → 30 → 40 → 50 → promote" || p.Shortest != 8*time.Minute || p.Worst != 10*time.Minute {
		t.Errorf("preview = %q, shortest %s, worst %s", p.Schedule(), p.Shortest, p.Worst)
	}

	rel.SkipAnalysis = true
	if p := PreviewOf(rel); p.Intervals != 0 || p.Shortest != 0 || p.Worst != 2*time.Minute {
		t.Errorf("skip_analysis preview = %+v", p)
	}
}

func TestPreviewCountsGates(t *testing.T) {
	rel := Release{ProgressDeadline: time.Minute, Analysis: Analysis{
		Interval: 10 * time.Second, Threshold: 1, StepWeights: []int{10, 50},
		Webhooks: []Webhook{
			{Name: "approve", Type: HookConfirmPromotion},
			{Name: "more", Type: HookConfirmTrafficIncrease},
			{Name: "abort", Type: HookRollback, Timeout: time.Second},
		},
	}}
	p := PreviewOf(rel)
	if p.Unbounded != "approve" || len(p.Gates) != 2 || len(p.Checks) != 1 {
		t.Errorf("preview = %+v, want two gates, unbounded without gate_timeout, and the rollback webhook among the checks", p)
	}
	rel.Analysis.GateTimeout = 5 * time.Minute
	p = PreviewOf(rel)
	// 2 readiness waits + 2 intervals + promotion gate once + traffic-increase gate per step.
	if want := 2*time.Minute + 20*time.Second + 3*5*time.Minute; p.Unbounded != "" || p.Worst != want {
		t.Errorf("worst = %s (unbounded %q), want %s", p.Worst, p.Unbounded, want)
	}
}

func TestPreviewShowsTheMirrorStep(t *testing.T) {
	rel := testRelease(Analysis{Interval: time.Minute, StepWeights: []int{10, 50}, Mirror: true})
	p := PreviewOf(rel)
	if got := p.Schedule(); got != "mirror → 10 → 50 → promote" {
		t.Errorf("schedule %q", got)
	}
	if p.Shortest != 3*time.Minute {
		t.Errorf("shortest %s, want 3m: the mirror step is an interval too", p.Shortest)
	}
	rel.Analysis = Analysis{Interval: time.Minute, Iterations: 2, Mirror: true}
	if got := PreviewOf(rel).Schedule(); got != "blue/green: 2 iterations on test traffic and mirrored requests → all traffic to the canary for one interval → promote" {
		t.Errorf("blue/green schedule %q", got)
	}
}

// Issue 24: with an autoscaler, the plan says how both sides are scaled and that the primary
// is held at its pre-rollout replicas before traffic returns, whose wait the worst case counts.
func TestPreviewShowsTheAutoscalerHold(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Interval: time.Second})
	without := PreviewOf(rel)
	rel.Autoscaler = &autoscaler.Ref{Name: "podinfo", Kind: autoscaler.KindScaledObject}
	p := PreviewOf(rel)
	for _, want := range []string{"ScaledObject podinfo's minReplicaCount", "podinfo-primary holds the primary's pre-rollout replicas", "autoscaling.keda.sh/paused-replicas"} {
		if !strings.Contains(p.Scaling, want) {
			t.Errorf("Scaling = %q, want it to say %q", p.Scaling, want)
		}
	}
	if p.Worst != without.Worst+rel.ProgressDeadline {
		t.Errorf("Worst = %s, want %s plus one readiness wait", p.Worst, without.Worst)
	}
	rel.Autoscaler.Kind = ""
	if p := PreviewOf(rel); !strings.Contains(p.Scaling, "HorizontalPodAutoscaler podinfo's minReplicas") {
		t.Errorf("Scaling = %q, want the HPA's minReplicas", p.Scaling)
	}
}
