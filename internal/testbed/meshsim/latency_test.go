package meshsim

import (
	"fmt"
	"math"
	"testing"
)

// quantileOf observes the requests skip+1 .. skip+n of a pod with p99 latency l (a rate window
// that starts anywhere) and returns what histogram_quantile(0.99, ...) computes over the buckets.
func quantileOf(l float64, buckets []float64, skip, n int) float64 {
	plan := planLatency(l, buckets)
	load := &podLoad{}
	for range skip {
		load.latency(plan)
	}
	upper := append(append([]float64{}, buckets...), math.Inf(1))
	cumulative := make([]float64, len(upper))
	for range n {
		v := load.latency(plan)
		for i, b := range upper {
			if v <= b {
				cumulative[i]++
			}
		}
	}
	return histogramQuantile(0.99, upper, cumulative)
}

func TestLatencyP99ReadsBackWithin20Percent(t *testing.T) {
	for _, mesh := range []struct {
		name    string
		buckets []float64
	}{{"envoy", EnvoyBuckets}, {"apisix", APISIXBuckets}} {
		for _, l := range []float64{5, 20, 300, 500, 1200} {
			// 600 requests is 20 rps over a 30s rate window. Fewer cannot work for every l: the
			// 99th percentile is made of the top 1% of requests, which must be a few at least.
			for _, n := range []int{600, 10000} {
				t.Run(fmt.Sprintf("%s/%gms/%d", mesh.name, l, n), func(t *testing.T) {
					for skip := range 200 {
						got := quantileOf(l, mesh.buckets, skip, n)
						if math.Abs(got-l) > 0.2*l {
							t.Fatalf("window starting after %d requests: p99 = %.2f ms, want %g ms within 20%%", skip, got, l)
						}
					}
				})
			}
		}
	}
}

func TestLatencyPlanKeepsObservationsNearTheWantedValue(t *testing.T) {
	// 300 ms lies in Envoy's (250,500] bucket: most observations sit at 250 so that the 99th
	// percentile lands a fifth of the way into the bucket.
	p := planLatency(300, EnvoyBuckets)
	if p.low != 250 || p.high != 300 || math.Abs(p.lowShare-0.9875) > 1e-9 {
		t.Fatalf("plan = %+v, want low 250, high 300, lowShare 0.9875", p)
	}
	// Beyond the last bucket nothing can be interpolated; every observation is the value itself.
	if p := planLatency(5e6, EnvoyBuckets); p.lowShare != 0 || p.high != 5e6 {
		t.Fatalf("plan beyond last bucket = %+v", p)
	}
}
