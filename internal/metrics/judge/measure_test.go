package judge

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
)

// The judge is measured on series built the way it reads them: one sample per step, each the
// step's rate(sum)/rate(count) of simulated requests (a mean latency) or its success rate.
// Requests per step are Poisson, latencies lognormal (a median of 100 ms with the long right
// tail of real latency), errors Poisson, and a load factor shared by both sides moves the
// baseline from step to step, as peak hours do. The canary gets 10 % of 50 req/s, the primary
// the rest, over 10 s steps.
type traffic struct {
	rng        *rand.Rand
	canaryRPS  float64
	primaryRPS float64
	step       float64 // seconds
	median     float64 // ms
	sigma      float64 // of log latency
	drift      float64 // sigma of the shared per-step load factor (log)
	errorRate  float64
}

func newTraffic(seed uint64) traffic {
	return traffic{rng: rand.New(rand.NewPCG(seed, 0x6a756467)), canaryRPS: 5, primaryRPS: 45, step: 10,
		median: 100, sigma: 0.6, drift: 0.1, errorRate: 0.01}
}

// latencySeries returns n per-step mean latencies of each side, the canary's scaled by slowdown.
func (tr traffic) latencySeries(n int, slowdown float64) (canary, primary []float64) {
	src := tr.rng
	for range n {
		load := math.Exp(distuv.Normal{Mu: 0, Sigma: tr.drift, Src: src}.Rand())
		canary = append(canary, tr.stepMean(tr.canaryRPS, load*slowdown))
		primary = append(primary, tr.stepMean(tr.primaryRPS, load))
	}
	return canary, primary
}

func (tr traffic) stepMean(rps, factor float64) float64 {
	count := distuv.Poisson{Lambda: rps * tr.step, Src: tr.rng}.Rand()
	if count == 0 {
		return math.NaN() // no traffic: the query's NaN, left out by QueryRange
	}
	latency := distuv.LogNormal{Mu: math.Log(tr.median * factor), Sigma: tr.sigma, Src: tr.rng}
	var sum float64
	for range int(count) {
		sum += latency.Rand()
	}
	return sum / count
}

// successSeries returns n per-step success rates (percent) of each side.
func (tr traffic) successSeries(n int) (canary, primary []float64) {
	rate := func(rps float64) float64 {
		count := distuv.Poisson{Lambda: rps * tr.step, Src: tr.rng}.Rand()
		if count == 0 {
			return math.NaN()
		}
		errs := math.Min(count, distuv.Poisson{Lambda: count * tr.errorRate, Src: tr.rng}.Rand())
		return 100 * (count - errs) / count
	}
	for range n {
		canary = append(canary, rate(tr.canaryRPS))
		primary = append(primary, rate(tr.primaryRPS))
	}
	return canary, primary
}

func finite(x []float64) []float64 {
	var out []float64
	for _, v := range x {
		if !math.IsNaN(v) {
			out = append(out, v)
		}
	}
	return out
}

// failRate runs analyses analyses and returns the share that failed.
func failRate(analyses int, run func(i int) Verdict) float64 {
	failed := 0
	for i := range analyses {
		if run(i).Outcome == Fail {
			failed++
		}
	}
	return float64(failed) / float64(analyses)
}

// TestMeasureMannWhitney measures the false-positive rate on identical distributions and the
// power on a 30 % latency regression at confidence 0.95. The figures are quoted in the docs
// (templates/resources/release.md.tmpl, docs/guides/migrating-from-flagger.md): keep them in
// step when this changes.
func TestMeasureMannWhitney(t *testing.T) {
	const analyses = 1000
	latency := Config{Method: MethodMannWhitney, Direction: DirectionIncrease, MaxRatio: 1.1, Confidence: 0.95}
	success := Config{Method: MethodMannWhitney, Direction: DirectionDecrease, MaxRatio: 1.001, Confidence: 0.95}
	// No max_ratio gate: the test's own false-positive rate, which the gate can only lower.
	ungated := Config{Method: MethodMannWhitney, Direction: DirectionIncrease, MaxRatio: 1, Confidence: 0.95}
	for _, n := range []int{5, 10, 15} {
		seed := uint64(1000 * n)
		fpLatency := failRate(analyses, func(i int) Verdict {
			c, p := newTraffic(seed+uint64(i)).latencySeries(n, 1)
			return MannWhitney(ungated, finite(c), finite(p))
		})
		fpSteady := failRate(analyses, func(i int) Verdict {
			tr := newTraffic(seed + uint64(i))
			tr.drift = 0 // a baseline that does not move: the test's nominal level
			c, p := tr.latencySeries(n, 1)
			return MannWhitney(ungated, finite(c), finite(p))
		})
		fpJudge := failRate(analyses, func(i int) Verdict {
			tr := newTraffic(seed + uint64(i))
			tr.drift = 0
			c, p := tr.latencySeries(n, 1)
			return MannWhitney(latency, finite(c), finite(p))
		})
		fpSuccess := failRate(analyses, func(i int) Verdict {
			c, p := newTraffic(seed + uint64(i)).successSeries(n)
			return MannWhitney(success, finite(c), finite(p))
		})
		power := failRate(analyses, func(i int) Verdict {
			c, p := newTraffic(seed+uint64(i)).latencySeries(n, 1.3)
			return MannWhitney(latency, finite(c), finite(p))
		})
		powerDefault := failRate(analyses, func(i int) Verdict {
			c, p := newTraffic(seed+uint64(i)).latencySeries(n, 1.3)
			return MannWhitney(Config{Method: MethodMannWhitney}, finite(c), finite(p))
		})
		t.Logf("%2d samples per side, %d analyses: false positives %.2f %% (latency, max_ratio 1.1, steady baseline), %.2f %% (success rate); "+
			"the bare U test (no max_ratio gate) %.2f %% with a moving baseline, %.2f %% with a steady one; "+
			"power on +30 %% latency %.2f %% (max_ratio 1.1), %.2f %% (max_ratio 1.2)",
			n, analyses, 100*fpJudge, 100*fpSuccess, 100*fpLatency, 100*fpSteady, 100*power, 100*powerDefault)
		if fpJudge > 0.05 || fpSuccess > 0.05 {
			t.Errorf("%d samples: the judge's false-positive rate %.3f (latency), %.3f (success rate), above 5 %%", n, fpJudge, fpSuccess)
		}
		// The bare test's level is at most 5 % by construction (exact below exactLimit); its
		// measure carries the binomial noise of the analyses count.
		if noise := 3 * math.Sqrt(0.05*0.95/analyses); fpLatency > 0.05+noise || fpSteady > 0.05+noise {
			t.Errorf("%d samples: the bare test's false-positive rate %.3f, %.3f, above 5 %% beyond noise", n, fpLatency, fpSteady)
		}
		if (n >= 10 && power < 0.95) || (n >= 15 && powerDefault < 0.95) {
			t.Errorf("%d samples: power %.3f (max_ratio 1.1), %.3f (max_ratio 1.2) on a 30 %% regression, below 95 %%", n, power, powerDefault)
		}
	}
}

// The ratio judge on the same traffic: one value per side over the whole window.
func TestMeasureRatio(t *testing.T) {
	const analyses = 1000
	c := Config{Method: MethodRatio, Direction: DirectionIncrease, MaxRatio: 1.2}
	window := func(slowdown float64) func(i int) Verdict {
		return func(i int) Verdict {
			tr := newTraffic(uint64(7_000_000 + i))
			tr.step *= 6 // one 60 s window
			cs, ps := tr.latencySeries(1, slowdown)
			return Ratio(c, cs[0], ps[0])
		}
	}
	fp, power := failRate(analyses, window(1)), failRate(analyses, window(1.3))
	t.Logf("ratio, max_ratio 1.2, one 60 s window: false positives %.2f %%, power on +30 %% latency %.2f %%", 100*fp, 100*power)
	if fp > 0.05 || power < 0.95 {
		t.Errorf("ratio judge: false positives %.3f, power %.3f", fp, power)
	}
}

func Example() {
	v := MannWhitney(Config{Method: MethodMannWhitney}, []float64{240, 236, 251, 244, 239}, []float64{121, 118, 125, 119, 122})
	fmt.Println(v.Text)
	// Output: judge mann-whitney: canary median 240 / primary median 121 = 1.98 over 5+5 samples, p = 0.00397 (significant at confidence 0.95), beyond max_ratio 1.2 (direction increase)
}
