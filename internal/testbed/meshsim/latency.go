package meshsim

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
)

// The latency model. Each request's duration is drawn on its own from a lognormal around the
// pod's latency-ms annotation and observed as drawn: no mesh's buckets are consulted, so a
// histogram_quantile reads what a real proxy's histogram would read for such a pod, bucket
// interpolation and small-window noise included.
//
// The annotation keeps its meaning: the pod's p99 in ms. The lognormal's median is then
// latency-ms / exp(z99·σ), a tenth of it with the σ below.

// z99 is the standard normal distribution's 0.99 quantile.
const z99 = 2.3263478740408408

// latencySigma is the spread (σ of log latency) of one pod's request durations. It comes from a
// published measurement, not from the tests: Dean and Barroso, "The Tail at Scale",
// Communications of the ACM 56(2), February 2013, Table 1, the request latency of one leaf
// server of a large service: 50th percentile 1 ms, 95th 5 ms, 99th 10 ms. A p99 ten times the
// median gives σ = ln(10)/z99 ≈ 0.99; the p95 (five times the median) gives ln(5)/1.645 ≈ 0.98,
// so a lognormal fits the three figures.
var latencySigma = math.Ln10 / z99

// latencyMedian is the median duration of a pod whose p99 is p99 ms.
func latencyMedian(p99 float64) float64 { return p99 / math.Exp(z99*latencySigma) }

// drawLatency draws one request's duration, in ms, for a pod whose p99 is p99 ms.
func drawLatency(rng *rand.Rand, p99 float64) float64 {
	return latencyMedian(p99) * math.Exp(latencySigma*rng.NormFloat64())
}

// podRand is the random source of one pod in one mesh: seeded by the simulator's seed and the
// pod's key alone, so that a run is the same for a seed whatever other pods come and go.
func podRand(seed uint64, key string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(key))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}
