package meshsim

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/cloudwatch"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/influxdb"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/splunk"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/stackdriver"
)

// vendorFixture is a simulator whose store holds a minute of traffic of two workloads in
// namespace "shop": "good" (10 requests a second, no error, 50 ms) and "bad" (10 a second,
// half of them 500, 400 ms), served over HTTP.
func vendorFixture(t *testing.T) *httptest.Server {
	t.Helper()
	s := &Simulator{metrics: newExporter()}
	now := time.Now()
	for sec := 60; sec >= 0; sec-- {
		at := now.Add(-time.Duration(sec) * time.Second)
		for i := range 10 {
			s.samples.record(at, workloadKey{"shop", "good"}, 200, 50)
			code := 200
			if i%2 == 0 {
				code = 500
			}
			s.samples.record(at, workloadKey{"shop", "bad"}, code, 400)
		}
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestVendorCloudWatch(t *testing.T) {
	srv := vendorFixture(t)
	c, err := cloudwatch.New(t.Context(), cloudwatch.Config{Region: "eu-west-1", Endpoint: srv.URL, AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	c = c.ForInterval(3 * time.Second).(*cloudwatch.Client)
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	errorRate := func(w string) string {
		return `[{"Id":"e1","Expression":"100 * errors / requests"},
		 {"Id":"errors","MetricStat":{"Metric":{"Namespace":"MeshSim","MetricName":"Errors","Dimensions":[{"Name":"Namespace","Value":"shop"},{"Name":"Workload","Value":"` + w + `"}]},"Period":10,"Stat":"Sum"},"ReturnData":false},
		 {"Id":"requests","MetricStat":{"Metric":{"Namespace":"MeshSim","MetricName":"Requests","Dimensions":[{"Name":"Namespace","Value":"shop"},{"Name":"Workload","Value":"` + w + `"}]},"Period":10,"Stat":"Sum"},"ReturnData":false}]`
	}
	for w, want := range map[string]float64{"good": 0, "bad": 50} {
		got, err := c.Query(t.Context(), errorRate(w))
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		near(t, w+" error rate", got, want)
	}
	got, err := c.Query(t.Context(), `[{"Id":"p","MetricStat":{"Metric":{"Namespace":"MeshSim","MetricName":"Latency","Dimensions":[{"Name":"Workload","Value":"bad"}]},"Period":5,"Stat":"p99"}}]`)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "bad p99", got, 400)
	if _, err := c.Query(t.Context(), errorRate("idle")); !errors.Is(err, metrics.ErrNoValues) {
		t.Errorf("a workload without traffic: %v, want ErrNoValues", err)
	}
	if _, err := c.Query(t.Context(), `[{"Id":"x","MetricStat":{"Metric":{"Namespace":"AWS/EC2","MetricName":"CPU"},"Period":60,"Stat":"Sum"}}]`); !errors.Is(err, metrics.ErrQuery) {
		t.Errorf("an unknown namespace: %v, want ErrQuery", err)
	}
}

// testServiceAccountKey is a JSON key with a fresh RSA key whose token_uri is the simulator's.
func testServiceAccountKey(t *testing.T, base string) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	b, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "shop-project", "private_key_id": "k1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "canary@shop-project.iam.gserviceaccount.com", "token_uri": base + "/oauth2/token",
	})
	return string(b)
}

func TestVendorStackdriver(t *testing.T) {
	srv := vendorFixture(t)
	c, err := stackdriver.New(stackdriver.Config{Project: "shop-project", Endpoint: srv.URL, ServiceAccountKey: testServiceAccountKey(t, srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	ratio := func(w string) string {
		return `{ fetch k8s_container
  | metric 'istio.io/service/server/request_count'
  | filter metric.destination_workload_namespace == 'shop' && metric.destination_workload_name == '` + w + `' && metric.response_code >= 500
  | group_by [], [value: sum(value.request_count)]
; fetch k8s_container
  | metric 'istio.io/service/server/request_count'
  | filter metric.destination_workload_namespace == 'shop' && metric.destination_workload_name == '` + w + `'
  | group_by [], [value: sum(value.request_count)] }
| ratio
| within 30s`
	}
	for w, want := range map[string]float64{"good": 0, "bad": 0.5} {
		got, err := c.Query(t.Context(), ratio(w))
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		near(t, w+" error ratio", got, want)
	}
	got, err := c.Query(t.Context(), `fetch k8s_container | metric 'istio.io/service/server/response_latencies'
| filter metric.destination_workload_name == 'good' | within 1m | every 1m | group_by [], [p99: percentile(value.response_latencies, 99)]`)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "good p99", got, 50)
	if _, err := c.Query(t.Context(), ratio("idle")); !errors.Is(err, metrics.ErrNoValues) {
		t.Errorf("a workload without traffic: %v, want ErrNoValues", err)
	}
}

func TestVendorInfluxDB(t *testing.T) {
	srv := vendorFixture(t)
	c, err := influxdb.New(influxdb.Config{Address: srv.URL, Token: "t0ken", Org: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	errorsIn := func(w string) string {
		return `from(bucket: "meshsim")
  |> range(start: -30s)
  |> filter(fn: (r) => r._measurement == "requests" and r.namespace == "shop" and r.workload == "` + w + `" and r.code =~ /^5/)
  |> count()`
	}
	got, err := c.Query(t.Context(), errorsIn("bad"))
	if err != nil {
		t.Fatal(err)
	}
	if got < 140 || got > 160 {
		t.Errorf("bad errors in 30 s = %v, want about 150", got)
	}
	if got, err := c.Query(t.Context(), errorsIn("good")); err != nil || got != 0 {
		t.Errorf("good errors = %v, %v; want 0 (no table reads 0, as in Flagger)", got, err)
	}
	got, err = c.Query(t.Context(), `from(bucket: "meshsim") |> range(start: -1m) |> filter(fn: (r) => r.workload == "bad" and r._field == "duration_ms") |> quantile(q: 0.99)`)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "bad p99", got, 400)
	if _, err := c.Query(t.Context(), `from(bucket: "other") |> range(start: -1m) |> count()`); !errors.Is(err, metrics.ErrQuery) {
		t.Errorf("an unknown bucket: %v, want ErrQuery", err)
	}
}

func TestVendorSplunk(t *testing.T) {
	srv := vendorFixture(t)
	c, err := splunk.New(splunk.Config{Address: srv.URL, Token: "sf-t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	c = c.ForInterval(3 * time.Second).(*splunk.Client)
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	rate := func(w string) string {
		return `A = data('http.errors', filter=filter('namespace', 'shop') and filter('workload', '` + w + `')).sum(over='10s')
B = data('http.requests', filter=filter('namespace', 'shop') and filter('workload', '` + w + `')).sum(over='10s')
(A / B * 100).publish()`
	}
	for w, want := range map[string]float64{"good": 0, "bad": 50} {
		got, err := c.Query(t.Context(), rate(w))
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		near(t, w+" error rate", got, want)
	}
	if _, err := c.Query(t.Context(), rate("idle")); !errors.Is(err, metrics.ErrNoValues) {
		t.Errorf("a workload without traffic: %v, want ErrNoValues", err)
	}
	if _, err := c.Query(t.Context(), `data('http.requests', filter=filter('namespace', 'shop')).publish()`); !errors.Is(err, metrics.ErrQuery) {
		t.Errorf("two time series: %v, want ErrQuery", err)
	}
	got, err := c.Query(t.Context(), `data('http.latency.p99', filter=filter('workload', 'bad')).max(over='10s').publish()`)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "bad p99", got, 400)
}
