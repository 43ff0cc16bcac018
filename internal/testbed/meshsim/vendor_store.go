package meshsim

import (
	"math"
	"slices"
	"sync"
	"time"
)

// The cloud vendors' APIs (CloudWatch, Cloud Monitoring, InfluxDB, SignalFlow) answer from
// the same requests that feed Prometheus: every answer a pod gives (and every 503 blamed on a
// pod that was not Ready) is also kept here, per workload and per second, with each request's
// latency, so that their query languages can compute percentiles (vendor_series.go keeps
// sums only).

// vendorRetention is how long the per-second records are kept: more than any window the
// clients ask for (ten intervals of a minute).
const vendorRetention = 15 * time.Minute

// secondRecord is what one workload answered within one second.
type secondRecord struct {
	sec       int64 // Unix seconds
	requests  int
	errors    int       // 5xx answers
	latencies []float64 // ms, one per answered request
}

// vendorSamples holds the records; its zero value is ready to use.
type vendorSamples struct {
	mu      sync.Mutex
	records map[workloadKey][]*secondRecord // oldest first
}

// record counts one answer of workload w at now; ms < 0 means no latency (a 503 of the mesh).
func (v *vendorSamples) record(now time.Time, w workloadKey, code int, ms float64) {
	if w.workload == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.records == nil {
		v.records = map[workloadKey][]*secondRecord{}
	}
	sec := now.Unix()
	recs := v.records[w]
	if n := len(recs); n == 0 || recs[n-1].sec < sec {
		cut := 0
		for cut < len(recs) && recs[cut].sec < sec-int64(vendorRetention/time.Second) {
			cut++
		}
		recs = append(recs[cut:], &secondRecord{sec: sec})
	}
	r := recs[len(recs)-1]
	r.requests++
	if code >= 500 {
		r.errors++
	}
	if ms >= 0 {
		r.latencies = append(r.latencies, ms)
	}
	v.records[w] = recs
}

// span is what a workload answered over the seconds [from, to).
type span struct {
	requests, errors int
	latencies        []float64
}

// matchWorkloads are the workloads the predicate keeps.
func (v *vendorSamples) matchWorkloads(keep func(workloadKey) bool) []workloadKey {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []workloadKey
	for w := range v.records {
		if keep(w) {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b workloadKey) int {
		if a.namespace != b.namespace {
			return compareStrings(a.namespace, b.namespace)
		}
		return compareStrings(a.workload, b.workload)
	})
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// between sums the records of the workloads over [from, to).
func (v *vendorSamples) between(ws []workloadKey, from, to time.Time) span {
	v.mu.Lock()
	defer v.mu.Unlock()
	var s span
	lo, hi := from.Unix(), to.Unix()
	if to.After(time.Unix(hi, 0)) {
		hi++ // a partial last second counts
	}
	for _, w := range ws {
		for _, r := range v.records[w] {
			if r.sec >= lo && r.sec < hi {
				s.requests += r.requests
				s.errors += r.errors
				s.latencies = append(s.latencies, r.latencies...)
			}
		}
	}
	return s
}

// statistic names what a vendor query reads from a span.
type statistic string

const (
	statRequests statistic = "requests"
	statErrors   statistic = "errors"
	statMean     statistic = "mean"
	statMax      statistic = "max"
	statMin      statistic = "min"
	statP        statistic = "p" // with a percentile
)

// value is the statistic of a span; ok is false when it has no value (no requests, or no
// latencies for a latency statistic), as a vendor would leave the datapoint out.
func (s span) value(stat statistic, percentile float64) (float64, bool) {
	switch stat {
	case statRequests:
		return float64(s.requests), true
	case statErrors:
		return float64(s.errors), true
	}
	if len(s.latencies) == 0 {
		return 0, false
	}
	switch stat {
	case statMean:
		sum := 0.0
		for _, l := range s.latencies {
			sum += l
		}
		return sum / float64(len(s.latencies)), true
	case statMax:
		return slices.Max(s.latencies), true
	case statMin:
		return slices.Min(s.latencies), true
	case statP:
		return nearestRank(s.latencies, percentile), true
	}
	return 0, false
}

// nearestRank is the p-th percentile (0 < p <= 100) by the nearest-rank method.
func nearestRank(values []float64, p float64) float64 {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}
