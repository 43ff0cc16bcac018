package judge

import (
	"math"
	"strings"
	"testing"
)

func TestRatioFailsOnlyPastMaxRatioInTheHarmfulDirection(t *testing.T) {
	for _, tc := range []struct {
		direction       string
		canary, primary float64
		want            Outcome
	}{
		{DirectionIncrease, 240, 120, Fail},
		{DirectionIncrease, 130, 120, Pass},
		{DirectionIncrease, 60, 120, Pass},
		{DirectionDecrease, 60, 120, Fail},
		{DirectionDecrease, 240, 120, Pass},
		{DirectionEither, 60, 120, Fail},
		{DirectionEither, 240, 120, Fail},
		{DirectionIncrease, 0, 0, Pass},
		{DirectionIncrease, 1, 0, Fail},
	} {
		v := Ratio(Config{Method: MethodRatio, Direction: tc.direction, MaxRatio: 1.2}, tc.canary, tc.primary)
		if v.Outcome != tc.want {
			t.Errorf("%s %g vs %g: outcome %d, want %d (%s)", tc.direction, tc.canary, tc.primary, v.Outcome, tc.want, v.Text)
		}
	}
}

func TestMannWhitneyOnTheSimulatorsSteadySeries(t *testing.T) {
	flat := func(v float64, n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	c := Config{Method: MethodMannWhitney, MaxRatio: 1.2, Confidence: 0.95}
	// Every sample tied: no evidence of a shift, whatever the sample count.
	if v := MannWhitney(c, flat(20, 8), flat(20, 8)); v.Outcome != Pass || v.P != 1 {
		t.Errorf("equal series: %+v", v)
	}
	// Twice the primary's latency, every sample.
	v := MannWhitney(c, flat(40, 8), flat(20, 8))
	if v.Outcome != Fail || !strings.Contains(v.Text, "= 2 over 8+8 samples") || !strings.Contains(v.Text, "beyond max_ratio 1.2") {
		t.Errorf("slow canary: %+v", v)
	}
	// Significant but small: not a failure.
	if v := MannWhitney(c, flat(21, 8), flat(20, 8)); v.Outcome != Pass || v.P > 0.05 {
		t.Errorf("a 5%% shift: %+v", v)
	}
	if v := MannWhitney(c, flat(40, MinSamples-1), flat(20, 8)); v.Outcome != Inconclusive || !strings.Contains(v.Text, "inconclusive") {
		t.Errorf("too few samples: %+v", v)
	}
}

// The U statistic and its p-value match a textbook example (two groups of 5 without ties:
// U = 23 of 25, exact one-sided p = 4/252 = 0.0159, normal approximation with continuity 0.0184).
func TestUStatisticAndPValue(t *testing.T) {
	canary := []float64{7, 8, 9, 10, 4}
	primary := []float64{1, 2, 3, 5, 6}
	u, ties := uStatistic(canary, primary)
	if u != 23 || ties != 0 {
		t.Fatalf("U = %g, ties %g; want 23, 0", u, ties)
	}
	if p := pValue(DirectionIncrease, canary, primary); math.Abs(p-4.0/252) > 1e-12 {
		t.Errorf("exact p = %g, want 4/252", p)
	}
	if p := pValue(DirectionIncrease, append(canary, 4), primary); p < 0.01 || p > 0.03 {
		t.Errorf("p with a tie (normal approximation) = %g, want about 0.02", p)
	}
	if p := pValue(DirectionDecrease, canary, primary); p < 0.95 {
		t.Errorf("decrease p = %g, want near 1", p)
	}
}
