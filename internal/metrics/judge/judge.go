// Package judge compares a metric of the canary with the same metric of the primary: by the
// ratio of two values, or by a one-sided Mann-Whitney U test of two sets of samples gated by
// the ratio of their medians (significance alone flags harmless shifts at high traffic).
package judge

import (
	"fmt"
	"math"
	"slices"
)

// Methods and directions, as the release's judge attribute spells them.
const (
	MethodRatio       = "ratio"
	MethodMannWhitney = "mann-whitney"

	DirectionIncrease = "increase"
	DirectionDecrease = "decrease"
	DirectionEither   = "either"
)

// Methods and Directions list the allowed values, for validation and documentation.
var (
	Methods    = []string{MethodRatio, MethodMannWhitney}
	Directions = []string{DirectionIncrease, DirectionDecrease, DirectionEither}
)

// Defaults of the optional settings.
const (
	DefaultDirection  = DirectionIncrease
	DefaultMaxRatio   = 1.2
	DefaultConfidence = 0.95
)

// MinSamples is the fewest samples per side the Mann-Whitney test accepts: with fewer, the
// normal approximation of U is poor and the smallest reachable p-value is near the usual
// significance levels, so the comparison is inconclusive.
const MinSamples = 5

// Config is one metric's judge.
type Config struct {
	Method    string
	Direction string
	// MaxRatio bounds canary/primary in the harmful direction: above it for an increase,
	// below 1/MaxRatio for a decrease.
	MaxRatio float64
	// Confidence is the level of the one-sided test ("mann-whitney"); "either" runs a
	// two-sided test at the same level.
	Confidence float64
}

// WithDefaults fills the unset settings.
func (c Config) WithDefaults() Config {
	if c.Direction == "" {
		c.Direction = DefaultDirection
	}
	if c.MaxRatio == 0 {
		c.MaxRatio = DefaultMaxRatio
	}
	if c.Confidence == 0 {
		c.Confidence = DefaultConfidence
	}
	return c
}

// Outcome of one comparison.
type Outcome int

const (
	Pass Outcome = iota
	Fail
	// Inconclusive means too few samples: neither a pass nor a failed check.
	Inconclusive
)

// Verdict is a comparison's outcome with the figures that decided it.
type Verdict struct {
	Outcome Outcome
	// Ratio is canary/primary: of the two values (ratio) or of the two medians (mann-whitney).
	Ratio float64
	// P is the test's p-value (mann-whitney only; NaN otherwise).
	P float64
	// Canary and Primary are the two values or medians; CanaryN and PrimaryN the sample counts.
	Canary, Primary   float64
	CanaryN, PrimaryN int
	// Text says what was compared and what it found, for step lines and the apply's error.
	Text string
}

// Ratio judges two values: it fails when canary/primary goes past MaxRatio in the harmful
// direction.
func Ratio(c Config, canary, primary float64) Verdict {
	c = c.WithDefaults()
	r := ratio(canary, primary)
	v := Verdict{Ratio: r, P: math.NaN(), Canary: canary, Primary: primary, CanaryN: 1, PrimaryN: 1}
	if c.harmful(r) {
		v.Outcome = Fail
	}
	v.Text = fmt.Sprintf("judge ratio: canary %.4g / primary %.4g = %s, %s max_ratio %g (direction %s)",
		canary, primary, ratioText(r), verb(v.Outcome == Fail), c.MaxRatio, c.Direction)
	return v
}

// MannWhitney judges two sets of samples: it fails when the canary's samples are shifted in
// the harmful direction at the configured confidence and the ratio of the medians goes past
// MaxRatio in that direction. Fewer than MinSamples on a side is Inconclusive.
func MannWhitney(c Config, canary, primary []float64) Verdict {
	c = c.WithDefaults()
	v := Verdict{P: math.NaN(), Ratio: math.NaN(), Canary: math.NaN(), Primary: math.NaN(), CanaryN: len(canary), PrimaryN: len(primary)}
	if len(canary) < MinSamples || len(primary) < MinSamples {
		v.Outcome = Inconclusive
		v.Text = fmt.Sprintf("judge mann-whitney inconclusive: %d canary and %d primary samples, at least %d of each needed "+
			"(lengthen the metric's interval or shorten the analysis interval)", len(canary), len(primary), MinSamples)
		return v
	}
	v.Canary, v.Primary = median(canary), median(primary)
	v.Ratio = ratio(v.Canary, v.Primary)
	v.P = pValue(c.Direction, canary, primary)
	significant := v.P <= 1-c.Confidence
	if significant && c.harmful(v.Ratio) {
		v.Outcome = Fail
	}
	v.Text = fmt.Sprintf("judge mann-whitney: canary median %.4g / primary median %.4g = %s over %d+%d samples, p = %.3g (%s at confidence %g), "+
		"%s max_ratio %g (direction %s)", v.Canary, v.Primary, ratioText(v.Ratio), len(canary), len(primary), v.P,
		map[bool]string{true: "significant", false: "not significant"}[significant], c.Confidence,
		verb(c.harmful(v.Ratio)), c.MaxRatio, c.Direction)
	return v
}

// harmful says whether canary/primary goes past MaxRatio in the configured direction.
func (c Config) harmful(r float64) bool {
	if math.IsNaN(r) {
		return false
	}
	up, down := r > c.MaxRatio, r < 1/c.MaxRatio
	switch c.Direction {
	case DirectionDecrease:
		return down
	case DirectionEither:
		return up || down
	}
	return up
}

// ratio is canary/primary, with 0/0 = 1 (both sides idle alike).
func ratio(canary, primary float64) float64 {
	if canary == 0 && primary == 0 {
		return 1
	}
	return canary / primary
}

func ratioText(r float64) string {
	if math.IsInf(r, 0) {
		return "infinite (the primary reads 0)"
	}
	return fmt.Sprintf("%.3g", r)
}

func verb(past bool) string {
	if past {
		return "beyond"
	}
	return "within"
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// exactLimit is the largest total sample count whose p-value comes from U's exact
// distribution (when nothing ties); the normal approximation, too liberal at a few samples
// per side, serves above it.
const exactLimit = 60

// exactPValue is the p-value of U from its exact null distribution for sizes m and n.
func exactPValue(direction string, m, n int, u float64) float64 {
	counts := uCounts(m, n)
	var total, atLeast, atMost float64
	for k, c := range counts {
		total += c
		if float64(k) >= u {
			atLeast += c
		}
		if float64(k) <= u {
			atMost += c
		}
	}
	greater, less := atLeast/total, atMost/total
	switch direction {
	case DirectionDecrease:
		return less
	case DirectionEither:
		return math.Min(1, 2*math.Min(greater, less))
	}
	return greater
}

// uCounts[k] is the number of orderings of m and n samples giving U = k, by the recurrence
// f(m, n, k) = f(m-1, n, k-n) + f(m, n-1, k): the largest sample belongs to one group or the other.
func uCounts(m, n int) []float64 {
	// row[j] holds f(i, j, ·) for the current i.
	prev := make([][]float64, n+1)
	for j := range prev {
		prev[j] = []float64{1} // f(0, j, 0) = 1
	}
	for i := 1; i <= m; i++ {
		cur := make([][]float64, n+1)
		cur[0] = []float64{1} // f(i, 0, 0) = 1
		for j := 1; j <= n; j++ {
			c := make([]float64, i*j+1)
			for k, v := range prev[j] { // f(i-1, j, k) contributes to k+j
				c[k+j] += v
			}
			for k, v := range cur[j-1] {
				c[k] += v
			}
			cur[j] = c
		}
		prev = cur
	}
	return prev[n]
}

// pValue is the Mann-Whitney U test's p-value for "the canary's samples are larger"
// (increase), "smaller" (decrease) or either (two-sided): exact for small samples without
// ties, else by the normal approximation with the tie and continuity corrections. Samples
// all equal give 1: no evidence of a shift.
func pValue(direction string, canary, primary []float64) float64 {
	n1, n2 := float64(len(canary)), float64(len(primary))
	u, tieSum := uStatistic(canary, primary)
	if tieSum == 0 && len(canary)+len(primary) <= exactLimit {
		return exactPValue(direction, len(canary), len(primary), u)
	}
	n := n1 + n2
	variance := n1 * n2 / 12 * ((n + 1) - tieSum/(n*(n-1)))
	if variance <= 0 {
		return 1
	}
	sd := math.Sqrt(variance)
	mean := n1 * n2 / 2
	greater := normalSurvival((u - mean - 0.5) / sd)
	less := normalSurvival(-(u - mean + 0.5) / sd)
	switch direction {
	case DirectionDecrease:
		return less
	case DirectionEither:
		return math.Min(1, 2*math.Min(greater, less))
	}
	return greater
}

// normalSurvival is P(Z > z) for a standard normal Z: math.Erfc keeps the tail's precision
// where 1-CDF would round to 0.
func normalSurvival(z float64) float64 { return math.Erfc(z/math.Sqrt2) / 2 }

// uStatistic is the canary's U (the number of (canary, primary) pairs where the canary is
// larger, ties counting one half), from midranks, and the sum of t³-t over the tie groups.
func uStatistic(canary, primary []float64) (u, tieSum float64) {
	type obs struct {
		v      float64
		canary bool
	}
	all := make([]obs, 0, len(canary)+len(primary))
	for _, v := range canary {
		all = append(all, obs{v, true})
	}
	for _, v := range primary {
		all = append(all, obs{v, false})
	}
	slices.SortFunc(all, func(a, b obs) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	var rankSum float64
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		t := float64(j - i)
		midrank := float64(i+j+1) / 2 // ranks i+1..j
		for k := i; k < j; k++ {
			if all[k].canary {
				rankSum += midrank
			}
		}
		tieSum += t*t*t - t
		i = j
	}
	n1 := float64(len(canary))
	return rankSum - n1*(n1+1)/2, tieSum
}
