package meshsim

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The vendor APIs (vendor_*.go) answer from the same simulated requests that feed the
// Prometheus metrics: every answer a pod gives is also counted here, per second, under its
// namespace and workload (the owning Deployment, else the Pod). Each vendor reads these
// per-workload measures, under names of its own:
//
//	success_rate  percentage of answers that are not 5xx   (no answers: no value)
//	error_rate    percentage of answers that are 5xx       (no answers: no value)
//	duration      mean duration of the answers, in ms      (no answers: no value)
//	requests      number of answers                         (no answers: 0)
//
// The vendors check that a credential is sent, but accept any value.

// vendorKeep is how long the per-second counts are kept.
const vendorKeep = 15 * time.Minute

type workloadKey struct{ namespace, workload string }

// vendorCounts are the answers of one workload in one second, or summed over a window.
type vendorCounts struct{ requests, errors, msSum float64 }

func (c *vendorCounts) add(o vendorCounts) {
	c.requests += o.requests
	c.errors += o.errors
	c.msSum += o.msSum
}

// measure is one of the measures above; ok is false when it has no value.
func (c vendorCounts) measure(name string) (v float64, ok bool) {
	if name == "requests" {
		return c.requests, true
	}
	if c.requests == 0 {
		return 0, false
	}
	switch name {
	case "success_rate":
		return 100 * (c.requests - c.errors) / c.requests, true
	case "error_rate":
		return 100 * c.errors / c.requests, true
	case "duration":
		return c.msSum / c.requests, true
	}
	return 0, false
}

// knownMeasure says whether name is one of the measures.
func knownMeasure(name string) bool {
	switch name {
	case "success_rate", "error_rate", "duration", "requests":
		return true
	}
	return false
}

// vendorSeries holds the per-second counts of every workload.
type vendorSeries struct {
	mu      sync.Mutex
	seconds map[workloadKey]map[int64]*vendorCounts
}

func newVendorSeries() *vendorSeries {
	return &vendorSeries{seconds: map[workloadKey]map[int64]*vendorCounts{}}
}

// answered counts one answer pod p gave at now.
func (v *vendorSeries) answered(now time.Time, p podInfo, code int, ms float64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := workloadKey{p.namespace, p.workload}
	secs := v.seconds[k]
	if secs == nil {
		secs = map[int64]*vendorCounts{}
		v.seconds[k] = secs
	}
	sec := now.Unix()
	c := secs[sec]
	if c == nil {
		c = &vendorCounts{}
		secs[sec] = c
		for s := range secs {
			if s < sec-int64(vendorKeep.Seconds()) {
				delete(secs, s)
			}
		}
	}
	c.requests++
	if code >= 500 {
		c.errors++
	}
	c.msSum += ms
}

// window sums the counts of k in [from, to).
func (v *vendorSeries) window(k workloadKey, from, to time.Time) vendorCounts {
	v.mu.Lock()
	defer v.mu.Unlock()
	var sum vendorCounts
	for s, c := range v.seconds[k] {
		if s >= from.Unix() && s < to.Unix() {
			sum.add(*c)
		}
	}
	return sum
}

// vendorPoint is a window's start and its counts.
type vendorPoint struct {
	at     time.Time
	counts vendorCounts
}

// points cuts [from, to) into buckets of step and sums each; buckets without answers are
// left out when skipEmpty.
func (v *vendorSeries) points(k workloadKey, from, to time.Time, step time.Duration, skipEmpty bool) []vendorPoint {
	if step < time.Second {
		step = time.Second
	}
	var out []vendorPoint
	for at := from; at.Before(to); at = at.Add(step) {
		end := at.Add(step)
		if end.After(to) {
			end = to
		}
		c := v.window(k, at, end)
		if skipEmpty && c.requests == 0 {
			continue
		}
		out = append(out, vendorPoint{at: at, counts: c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// unixParam reads a Unix time in seconds (or ms, when ms) from the request's query.
func unixParam(r *http.Request, name string, ms bool, def time.Time) (time.Time, bool) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	if ms {
		return time.UnixMilli(n), true
	}
	return time.Unix(n, 0), true
}

// relativeDuration reads Graphite's and the web API's windows: "10s", "-10s", "-5min", "1h".
func relativeDuration(s string) (time.Duration, bool) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "-")
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i <= 0 {
		return 0, false
	}
	n, err := strconv.Atoi(s[:i])
	if err != nil {
		return 0, false
	}
	unit := map[string]time.Duration{"s": time.Second, "sec": time.Second, "seconds": time.Second, "m": time.Minute,
		"min": time.Minute, "minutes": time.Minute, "h": time.Hour, "hours": time.Hour}[s[i:]]
	if unit == 0 {
		return 0, false
	}
	return time.Duration(n) * unit, true
}

// vendorRoutes serves every vendor API on mux.
func (s *Simulator) vendorRoutes(mux *http.ServeMux) {
	s.datadogRoutes(mux)
	s.dynatraceRoutes(mux)
	s.graphiteRoutes(mux)
	s.newRelicRoutes(mux)
	s.webRoutes(mux)
}

func writeJSONError(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}
