package meshsim

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// Dynatrace's Metrics API v2, after https://docs.dynatrace.com/docs/dynatrace-api/environment-api/metric-v2/get-data-points:
//
//	GET /api/v2/metrics/query?metricSelector=S&resolution=Inf&from=MS&to=MS  (Authorization: Api-Token …)
//	  -> {"totalCount":1,"nextPageKey":null,"resolution":"Inf","result":[{"metricId":S,"data":[{"dimensions":[],"dimensionMap":{},"timestamps":[ms],"values":[v]}]}]}
//	GET /api/v2/metrics?pageSize=1 -> {"totalCount":4,"nextPageKey":null,"metrics":[{"metricId":...}]}
//
// The selector subset is a measure filtered to one workload:
//
//	canary.request.<measure>:filter(and(eq(namespace,NS),eq(workload,W)))
//
// (the eq conditions may be quoted, chained as separate :filter(...) steps, and followed by a
// transformation such as :avg, which is ignored). With resolution=Inf there is one value for
// the whole window; a workload without answers in it has no data.
var (
	dynatraceMetric = regexp.MustCompile(`^\s*canary\.request\.(\w+)(:.*)?$`)
	dynatraceEq     = regexp.MustCompile(`eq\(\s*"?(\w+)"?\s*,\s*"?([^",)]+)"?\s*\)`)
)

func (s *Simulator) dynatraceRoutes(mux *http.ServeMux) {
	authorized := func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Api-Token ") {
			writeJSONError(w, http.StatusUnauthorized, `{"error":{"code":401,"message":"Missing authorization parameter."}}`)
			return false
		}
		return true
	}
	mux.HandleFunc("GET /api/v2/metrics", func(w http.ResponseWriter, r *http.Request) {
		if !authorized(w, r) {
			return
		}
		writeJSONError(w, http.StatusOK, `{"totalCount":4,"nextPageKey":null,"metrics":[{"metricId":"canary.request.success_rate"}]}`)
	})
	mux.HandleFunc("GET /api/v2/metrics/query", func(w http.ResponseWriter, r *http.Request) {
		if !authorized(w, r) {
			return
		}
		sel := r.URL.Query().Get("metricSelector")
		from, ok1 := unixParam(r, "from", true, time.Time{})
		to, ok2 := unixParam(r, "to", true, time.Now())
		m := dynatraceMetric.FindStringSubmatch(sel)
		if !ok1 || !ok2 || from.IsZero() || !to.After(from) || m == nil || !knownMeasure(m[1]) || r.URL.Query().Get("resolution") != "Inf" {
			writeJSONError(w, http.StatusBadRequest, `{"error":{"code":400,"message":"the simulator answers canary.request.<success_rate|error_rate|duration|requests>:filter(and(eq(namespace,NS),eq(workload,W))) with resolution=Inf and from < to"}}`)
			return
		}
		dims := map[string]string{}
		for _, eq := range dynatraceEq.FindAllStringSubmatch(m[2], -1) {
			dims[eq[1]] = eq[2]
		}
		type data struct {
			Dimensions   []string          `json:"dimensions"`
			DimensionMap map[string]string `json:"dimensionMap"`
			Timestamps   []int64           `json:"timestamps"`
			Values       []float64         `json:"values"`
		}
		type result struct {
			MetricID string `json:"metricId"`
			Data     []data `json:"data"`
		}
		res := result{MetricID: sel, Data: []data{}}
		if v, ok := s.vendors.window(workloadKey{dims["namespace"], dims["workload"]}, from, to).measure(m[1]); ok {
			res.Data = append(res.Data, data{Dimensions: []string{}, DimensionMap: map[string]string{}, Timestamps: []int64{to.UnixMilli()}, Values: []float64{v}})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"totalCount": 1, "nextPageKey": nil, "resolution": "Inf", "result": []result{res}})
	})
}
