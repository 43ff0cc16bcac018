package rollout

import (
	"fmt"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Strategy decides the traffic split of each analysis interval. The phase machine only walks
// the splits, so the strategies differ in nothing else.
type Strategy interface {
	// Splits returns the split to hold during each analysis interval, in order.
	Splits() []router.Weights
	// Kind names the strategy for messages: "canary", "A/B testing" or "blue/green".
	Kind() string
	// Weighted reports a strategy that raises the canary's weight step by step: only its
	// increases pass the confirm-traffic-increase gate, as in Flagger.
	Weighted() bool
}

// StrategyFor picks the strategy as Flagger does: iterations with match conditions are A/B
// testing, iterations alone blue/green, and step weights a weighted canary.
func StrategyFor(a Analysis) Strategy {
	switch {
	case a.Iterations > 0 && len(a.Match) > 0:
		return abStrategy{a}
	case a.Iterations > 0:
		return blueGreenStrategy{a}
	}
	return canaryStrategy{a}
}

// abStrategy sends the requests that match analysis.match to the canary for every iteration,
// and nothing else.
type abStrategy struct{ a Analysis }

func (s abStrategy) Kind() string { return "A/B testing" }

func (s abStrategy) Weighted() bool { return false }

func (s abStrategy) Splits() []router.Weights {
	splits := make([]router.Weights, s.a.Iterations)
	for i := range splits {
		splits[i] = router.Weights{Primary: 100, Matched: true}
	}
	return splits
}

// blueGreenStrategy analyses the canary on test traffic alone (a load-tester webhook sends it
// straight to the canary Service) for every iteration, then switches all traffic to it for one
// more interval before the promotion.
type blueGreenStrategy struct{ a Analysis }

func (s blueGreenStrategy) Kind() string { return "blue/green" }

func (s blueGreenStrategy) Weighted() bool { return false }

func (s blueGreenStrategy) Splits() []router.Weights {
	splits := make([]router.Weights, s.a.Iterations, s.a.Iterations+1)
	for i := range splits {
		// With mirror, user requests are copied to the canary on top of the test traffic.
		splits[i] = router.Weights{Primary: 100, Mirrored: s.a.Mirror}
	}
	return append(splits, router.Weights{Canary: 100})
}

type canaryStrategy struct{ a Analysis }

func (s canaryStrategy) Kind() string { return "canary" }

func (s canaryStrategy) Weighted() bool { return true }

// Splits are the steps; with mirror, as in Flagger, one interval of mirroring at weight 0
// comes first, so the canary answers copies of real requests before it answers any user.
func (s canaryStrategy) Splits() []router.Weights {
	steps := s.Steps()
	var splits []router.Weights
	if s.a.Mirror {
		splits = append(splits, router.Weights{Primary: 100, Mirrored: true})
	}
	for _, w := range steps {
		splits = append(splits, router.Weights{Primary: 100 - w, Canary: w})
	}
	return splits
}

// StepWeights are the canary weights of a's steps (Steps).
func StepWeights(a Analysis) []int { return canaryStrategy{a}.Steps() }

// Steps follows Flagger: step_weights as given (capped at 100), or step_weight, 2×step_weight,
// … until max_weight is reached (the last step may overshoot max_weight, as in Flagger).
func (s canaryStrategy) Steps() []int {
	if len(s.a.StepWeights) > 0 {
		steps := make([]int, 0, len(s.a.StepWeights))
		for _, w := range s.a.StepWeights {
			steps = append(steps, min(w, 100))
		}
		return steps
	}
	if s.a.StepWeight <= 0 {
		return nil
	}
	maxWeight := s.a.MaxWeight
	if maxWeight <= 0 {
		maxWeight = 100
	}
	var steps []int
	for w := s.a.StepWeight; ; w += s.a.StepWeight {
		steps = append(steps, min(w, 100))
		if w >= maxWeight || w >= 100 {
			return steps
		}
	}
}

// promotionSteps are the canary weights while traffic returns to the primary after
// promotion: one jump to 0, or step_weight_promotion at a time.
func promotionSteps(from, stepPromotion int) []int {
	if stepPromotion <= 0 {
		return []int{0}
	}
	var steps []int
	for w := from - stepPromotion; w > 0; w -= stepPromotion {
		steps = append(steps, w)
	}
	return append(steps, 0)
}

// splitText words a split for messages and Events.
func splitText(w router.Weights) string {
	switch {
	case w.Matched:
		return "requests matching analysis.match on the canary"
	case w.Mirrored:
		return fmt.Sprintf("canary weight %d%%, requests mirrored to the canary", w.Canary)
	}
	return fmt.Sprintf("canary weight %d%%", w.Canary)
}
