package meshsim

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves:
//   - GET /metrics: the mesh metrics for Prometheus;
//   - GET /invariants?namespace=NS: the invariant entries as a JSON array (all namespaces without NS);
//   - GET /cookies?namespace=NS: the Set-Cookie headers answers carried, per flow (cookies.go);
//   - GET /client?namespace=NS: what the real requests through the proxy saw, per host (client.go);
//   - GET /healthz: 200 once the informer caches are synced, 503 before;
//   - POST /loadtest: Flagger's load tester (loadtest.go), 202 with the test it started or
//     found running; GET /loadtest: the running load tests as a JSON array;
//   - the metric vendors' query APIs (Datadog, Dynatrace, Graphite, New Relic, a web JSON
//     endpoint, CloudWatch, Cloud Monitoring, InfluxDB, SignalFlow), from the same simulated
//     answers: vendor_*.go.
//
// The pods' own answers to the real proxy come through ServeSOCKS, on a listener of their own.
func (s *Simulator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /invariants", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Invariants(r.URL.Query().Get("namespace")))
	})
	mux.HandleFunc("GET /cookies", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Cookies(r.URL.Query().Get("namespace")))
	})
	mux.HandleFunc("GET /client", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.ClientRoutes(r.URL.Query().Get("namespace")))
	})
	mux.HandleFunc("POST /loadtest", s.serveLoadTest)
	mux.HandleFunc("GET /loadtest", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.LoadTests())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "informer caches not synced yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	s.vendorRoutes(mux)      // the vendor query APIs: vendor_*.go
	s.cloudVendorRoutes(mux) // CloudWatch, Cloud Monitoring, InfluxDB, SignalFlow: vendor_cloud_routes.go
	return mux
}
