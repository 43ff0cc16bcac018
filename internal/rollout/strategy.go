package rollout

// Strategy decides the canary weight of each analysis step. The phase machine only walks the
// list, so A/B or blue/green can be added as other strategies without touching it.
type Strategy interface {
	// Steps returns the canary weight to hold during each analysis interval, in order.
	Steps() []int
}

// StrategyFor picks the strategy for an analysis. Only the weighted canary exists today.
func StrategyFor(a Analysis) Strategy { return canaryStrategy{a} }

type canaryStrategy struct{ a Analysis }

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
