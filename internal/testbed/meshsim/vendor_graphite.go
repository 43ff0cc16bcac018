package meshsim

import (
	"encoding/json"
	"net/http"
	"regexp"
	"time"
)

// Graphite's render API, after https://graphite.readthedocs.io/en/latest/render_api.html:
//
//	GET /render?target=T&from=-10s&format=json -> [{"target":T,"tags":{},"datapoints":[[value|null, unix], ...]}]
//
// The target subset is one measure of one workload, a plain metric path:
//
//	canary.<namespace>.<workload>.<measure>
//
// from is relative (-10s, -5min, -1h; default -1min, until now). Datapoints are one per
// second, null where the workload gave no answers. Any other target renders no series, as an
// unknown path does in Graphite.
var graphiteTarget = regexp.MustCompile(`^canary\.([\w-]+)\.([\w-]+)\.(\w+)$`)

func (s *Simulator) graphiteRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /render", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("format") != "json" {
			writeJSONError(w, http.StatusBadRequest, `{"error":"the simulator renders format=json only"}`)
			return
		}
		window := time.Minute
		if f := q.Get("from"); f != "" {
			d, ok := relativeDuration(f)
			if !ok {
				writeJSONError(w, http.StatusBadRequest, `{"error":"the simulator takes a relative from, such as -10s or -5min"}`)
				return
			}
			window = d
		}
		type series struct {
			Target     string            `json:"target"`
			Tags       map[string]string `json:"tags"`
			Datapoints [][2]any          `json:"datapoints"`
		}
		out := []series{}
		now := time.Now()
		for _, target := range q["target"] {
			m := graphiteTarget.FindStringSubmatch(target)
			if m == nil || !knownMeasure(m[3]) {
				continue
			}
			sr := series{Target: target, Tags: map[string]string{"name": target}, Datapoints: [][2]any{}}
			for _, p := range s.vendors.points(workloadKey{m[1], m[2]}, now.Add(-window).Truncate(time.Second), now, time.Second, false) {
				var v any
				if x, ok := p.counts.measure(m[3]); ok {
					v = x
				}
				sr.Datapoints = append(sr.Datapoints, [2]any{v, p.at.Unix()})
			}
			out = append(out, sr)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}
