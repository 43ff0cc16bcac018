package meshsim

import "net/http"

// cloudVendorRoutes serves the query APIs of the metric vendors the provider's metric templates
// can read, each answering from the simulated traffic (vendor_store.go):
//   - CloudWatch GetMetricData (vendor_cloudwatch.go);
//   - Google Cloud Monitoring timeSeries:query and its token endpoint (vendor_stackdriver.go);
//   - InfluxDB 2.x /api/v2/query (vendor_influxdb.go);
//   - Splunk Observability SignalFlow execute and /v2/metric (vendor_splunk.go).
func (s *Simulator) cloudVendorRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+cloudWatchPath, s.serveCloudWatch)
	mux.HandleFunc("POST "+stackdriverTokenPath, serveStackdriverToken)
	mux.HandleFunc("POST /v3/projects/{project}/timeSeries:query", s.serveStackdriver)
	mux.HandleFunc("POST /api/v2/query", s.serveInfluxQuery)
	mux.HandleFunc("POST /v2/signalflow/execute", s.serveSignalFlow)
	mux.HandleFunc("GET /v2/metric", serveSignalFxMetric)
}
