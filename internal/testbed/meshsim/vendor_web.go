package meshsim

import (
	"encoding/json"
	"net/http"
	"time"
)

// A generic JSON endpoint for the web backend (Argo Rollouts' web provider reads any such):
//
//	GET  /web/v1/summary?namespace=NS&workload=W&window=10s
//	POST /web/v1/summary {"namespace":NS,"workload":W,"window":"10s"}
//	  -> {"namespace":NS,"workload":W,"window":"10s","data":{"requests":n,"success_rate":x|null,"error_rate":x|null,"duration_ms":x|null}}
//
// over the window before now (default 1m). A measure without answers is null.
func (s *Simulator) webRoutes(mux *http.ServeMux) {
	type request struct {
		Namespace string `json:"namespace"`
		Workload  string `json:"workload"`
		Window    string `json:"window"`
	}
	answer := func(w http.ResponseWriter, req request) {
		window := time.Minute
		if req.Window != "" {
			d, ok := relativeDuration(req.Window)
			if !ok {
				writeJSONError(w, http.StatusBadRequest, `{"error":"window must be a duration such as 10s or 1m"}`)
				return
			}
			window = d
		}
		now := time.Now()
		c := s.vendors.window(workloadKey{req.Namespace, req.Workload}, now.Add(-window), now.Add(time.Second))
		value := func(measure string) any {
			if v, ok := c.measure(measure); ok {
				return v
			}
			return nil
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"namespace": req.Namespace, "workload": req.Workload, "window": window.String(),
			"data": map[string]any{"requests": c.requests, "success_rate": value("success_rate"), "error_rate": value("error_rate"), "duration_ms": value("duration")}})
	}
	mux.HandleFunc("GET /web/v1/summary", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		answer(w, request{Namespace: q.Get("namespace"), Workload: q.Get("workload"), Window: q.Get("window")})
	})
	mux.HandleFunc("POST /web/v1/summary", func(w http.ResponseWriter, r *http.Request) {
		var req request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeJSONError(w, http.StatusBadRequest, `{"error":"the body must be {\"namespace\":…,\"workload\":…,\"window\":…}"}`)
			return
		}
		answer(w, req)
	})
}
