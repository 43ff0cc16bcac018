package meshsim

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// Datadog's metrics query API, after https://docs.datadoghq.com/api/latest/metrics/#query-timeseries-points:
//
//	GET /api/v1/query?query=Q&from=UNIX&to=UNIX  (DD-API-KEY and DD-APPLICATION-KEY headers)
//	  -> {"status":"ok","query":Q,"from_date":ms,"to_date":ms,"series":[{"metric":...,"scope":...,"pointlist":[[ms, value], ...]}]}
//	GET /api/v1/validate (DD-API-KEY) -> {"valid":true}
//
// The query subset is one metric with a space aggregator and the two tags that name a workload:
//
//	avg:canary.request.<measure>{namespace:NS,workload:W}
//
// (any of avg, sum, min, max; one series per workload, so they agree). The window is cut into
// ten buckets, and a bucket without answers has no point, as Datadog leaves out empty rollups.
var datadogQuery = regexp.MustCompile(`^\s*(avg|sum|min|max):canary\.request\.(\w+)\{([^}]*)\}\s*$`)

func (s *Simulator) datadogRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/validate", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("DD-API-KEY") == "" {
			writeJSONError(w, http.StatusForbidden, `{"errors":["Forbidden"]}`)
			return
		}
		writeJSONError(w, http.StatusOK, `{"valid":true}`)
	})
	mux.HandleFunc("GET /api/v1/query", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("DD-API-KEY") == "" || r.Header.Get("DD-APPLICATION-KEY") == "" {
			writeJSONError(w, http.StatusForbidden, `{"errors":["Forbidden"]}`)
			return
		}
		now := time.Now()
		from, ok1 := unixParam(r, "from", false, time.Time{})
		to, ok2 := unixParam(r, "to", false, now)
		q := r.URL.Query().Get("query")
		m := datadogQuery.FindStringSubmatch(q)
		if !ok1 || !ok2 || from.IsZero() || !to.After(from) || m == nil || !knownMeasure(m[2]) {
			writeJSONError(w, http.StatusBadRequest, `{"errors":["the simulator answers avg:canary.request.<success_rate|error_rate|duration|requests>{namespace:NS,workload:W} with from < to"]}`)
			return
		}
		tags := map[string]string{}
		for _, t := range strings.Split(m[3], ",") {
			if k, v, ok := strings.Cut(strings.TrimSpace(t), ":"); ok {
				tags[k] = v
			}
		}
		key := workloadKey{tags["namespace"], tags["workload"]}
		type series struct {
			Metric    string       `json:"metric"`
			Scope     string       `json:"scope"`
			Pointlist [][2]float64 `json:"pointlist"`
		}
		out := struct {
			Status   string   `json:"status"`
			Query    string   `json:"query"`
			FromDate int64    `json:"from_date"`
			ToDate   int64    `json:"to_date"`
			Series   []series `json:"series"`
		}{Status: "ok", Query: q, FromDate: from.UnixMilli(), ToDate: to.UnixMilli(), Series: []series{}}
		var pl [][2]float64
		for _, p := range s.vendors.points(key, from, to, to.Sub(from)/10, true) {
			if v, ok := p.counts.measure(m[2]); ok {
				pl = append(pl, [2]float64{float64(p.at.UnixMilli()), v})
			}
		}
		if len(pl) > 0 {
			out.Series = append(out.Series, series{Metric: "canary.request." + m[2], Scope: m[3], Pointlist: pl})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}
