package meshsim

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/datadog"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/dynatrace"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/graphite"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/newrelic"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/web"
)

// TestVendorAPIs reads the same simulated answers through each backend's real client: a
// workload that failed 1 answer in 4 measures a success rate of 75 in every vendor, and a
// workload without answers has no values.
func TestVendorAPIs(t *testing.T) {
	s := &Simulator{vendors: newVendorSeries()}
	now := time.Now()
	pod := podInfo{namespace: "ns", workload: "podinfo"}
	for sec := 1; sec <= 2; sec++ {
		for i := range 20 {
			code := 200
			if i%4 == 0 {
				code = 500
			}
			s.vendors.answered(now.Add(-time.Duration(sec)*time.Second), pod, code, 20)
		}
	}
	mux := http.NewServeMux()
	s.vendorRoutes(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	dd, err := datadog.New(datadog.Config{Address: srv.URL, APIKey: "k", ApplicationKey: "a"})
	if err != nil {
		t.Fatal(err)
	}
	dt, err := dynatrace.New(dynatrace.Config{Address: srv.URL, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	gr, err := graphite.New(graphite.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	nr, err := newrelic.New(newrelic.Config{Address: srv.URL + "/graphql", AccountID: 1, APIKey: "NRAK-x"})
	if err != nil {
		t.Fatal(err)
	}
	wg, err := web.New(web.Config{URL: srv.URL + "/web/v1/summary", JSONPath: "{$.data.success_rate}"})
	if err != nil {
		t.Fatal(err)
	}
	wp, err := web.New(web.Config{URL: srv.URL + "/web/v1/summary", Method: "POST", JSONPath: "{.data.duration_ms}"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		q      metrics.Querier
		query  string
		want   float64
		noData string
	}{
		{"datadog", dd.ForInterval(time.Second), "avg:canary.request.success_rate{namespace:ns,workload:podinfo}", 75,
			"avg:canary.request.success_rate{namespace:ns,workload:other}"},
		{"dynatrace", dt.ForInterval(time.Second), `canary.request.success_rate:filter(and(eq(namespace,ns),eq("workload","podinfo"))):avg`, 75,
			"canary.request.success_rate:filter(and(eq(namespace,ns),eq(workload,other)))"},
		{"graphite", gr, "target=canary.ns.podinfo.duration&from=-10s", 20, "target=canary.ns.other.duration&from=-10s"},
		{"newrelic", nr.ForInterval(10 * time.Second), "SELECT percentage(count(*), WHERE error IS false) FROM CanaryRequest WHERE namespace = 'ns' AND workload = 'podinfo'", 75,
			"SELECT percentage(count(*), WHERE error IS false) FROM CanaryRequest WHERE namespace = 'ns' AND workload = 'other'"},
		{"web GET", wg, "?namespace=ns&workload=podinfo&window=10s", 75, "?namespace=ns&workload=other&window=10s"},
		{"web POST", wp, `{"namespace":"ns","workload":"podinfo","window":"10s"}`, 20, `{"namespace":"ns","workload":"other"}`},
	} {
		if p, ok := tc.q.(metrics.Pinger); ok {
			if err := p.Ping(ctx); err != nil {
				t.Errorf("%s: ping: %v", tc.name, err)
			}
		}
		v, err := tc.q.Query(ctx, tc.query)
		if err != nil || v != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.name, v, err, tc.want)
		}
		if _, err := tc.q.Query(ctx, tc.noData); !errors.Is(err, metrics.ErrNoValues) {
			t.Errorf("%s without answers: %v, want no values", tc.name, err)
		}
	}
}
