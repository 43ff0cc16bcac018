package pushmetrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// gateway records the pushes it receives, as the Pushgateway's API takes them.
type gateway struct {
	mu     sync.Mutex
	pushes []received
}

type received struct {
	method, path, auth, header string
	body                       string
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	g.pushes = append(g.pushes, received{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization"),
		header: r.Header.Get("X-Scope-OrgID"), body: string(b)})
	g.mu.Unlock()
	if r.Method == http.MethodDelete {
		w.WriteHeader(http.StatusAccepted) // as the Pushgateway answers a deletion
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (g *gateway) last(t *testing.T) received {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pushes) == 0 {
		t.Fatal("nothing was pushed")
	}
	return g.pushes[len(g.pushes)-1]
}

// values decodes a push's protobuf body into "name{labels} value" lines.
func values(t *testing.T, body string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	dec := expfmt.NewDecoder(strings.NewReader(body), expfmt.NewFormat(expfmt.TypeProtoDelim))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decoding the push: %v", err)
		}
		for _, m := range mf.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.Histogram.GetSampleCount())
				out[key+"_sum"] = m.Histogram.GetSampleSum()
			}
		}
	}
}

func TestRelease_pushesFlaggerSeries(t *testing.T) {
	g := &gateway{}
	srv := httptest.NewServer(g)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := NewRelease(Config{URL: srv.URL, Username: "ops", Password: "s3cret", Headers: map[string]string{"X-Scope-OrgID": "team-a"}},
		"shop", "checkout", "checkout", start)

	v := 99.5
	r.Observe(ctx, rollout.Progress{Kind: rollout.ProgressWeight, Namespace: "shop", Name: "checkout", Phase: rollout.PhaseProgressing, Weight: 20}, start)
	r.Observe(ctx, rollout.Progress{Kind: rollout.ProgressCheck, Namespace: "shop", Name: "checkout", Phase: rollout.PhaseProgressing, Weight: 20,
		Metric: "request-success-rate", Value: &v}, start)
	r.Flush(ctx)
	got := g.last(t)
	if got.method != http.MethodPut || !groupPath(got.path) {
		t.Fatalf("push went to %s %s, want PUT to the release's group", got.method, got.path)
	}
	if !strings.HasPrefix(got.auth, "Basic ") || got.header != "team-a" {
		t.Fatalf("push carried Authorization %q and X-Scope-OrgID %q, want basic auth and the configured header", got.auth, got.header)
	}
	vals := values(t, got.body)
	for key, want := range map[string]float64{
		"flagger_canary_status{}":                                     StatusRunning,
		"flagger_canary_weight{workload=checkout}":                    20,
		"flagger_canary_weight{workload=checkout-primary}":            80,
		"flagger_canary_metric_analysis{metric=request-success-rate}": 99.5,
		"canary_release_phase{phase=Progressing}":                     1,
	} {
		if vals[key] != want {
			t.Errorf("%s = %v, want %v (pushed: %v)", key, vals[key], want, vals)
		}
	}
	for _, secret := range []string{"s3cret", "team-a", "ops"} {
		if strings.Contains(got.body, secret) {
			t.Errorf("the pushed series contain the credential %q", secret)
		}
	}

	r.Observe(ctx, rollout.Progress{Kind: rollout.ProgressVerdict, Namespace: "shop", Name: "checkout", Phase: rollout.PhaseFailed}, start.Add(90*time.Second))
	r.Flush(ctx)
	vals = values(t, g.last(t).body)
	for key, want := range map[string]float64{
		"flagger_canary_status{}":                          StatusFailed,
		"flagger_canary_weight{workload=checkout}":         0,
		"flagger_canary_weight{workload=checkout-primary}": 100,
		"canary_release_phase{phase=Failed}":               1,
		"flagger_canary_duration_seconds{}_count":          1,
		"flagger_canary_duration_seconds{}_sum":            90,
	} {
		if vals[key] != want {
			t.Errorf("after the verdict %s = %v, want %v (pushed: %v)", key, vals[key], want, vals)
		}
	}
	if _, ok := vals["canary_release_phase{phase=Progressing}"]; ok {
		t.Errorf("the phase left is still pushed: %v", vals)
	}
}

// A Pushgateway that never answers costs the run nothing: Observe returns at once.
func TestRelease_observeNeverWaits(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	defer srv.Close()
	defer close(block)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewRelease(Config{URL: srv.URL}, "ns", "app", "app", time.Now())
	begin := time.Now()
	for w := 0; w <= 100; w += 10 {
		r.Observe(ctx, rollout.Progress{Kind: rollout.ProgressWeight, Phase: rollout.PhaseProgressing, Weight: w}, time.Now())
	}
	if took := time.Since(begin); took > time.Second {
		t.Fatalf("11 progress lines took %v with a Pushgateway that does not answer", took)
	}
}

func TestStatus(t *testing.T) {
	for phase, want := range map[rollout.Phase]float64{
		rollout.PhaseInitializing: StatusRunning, rollout.PhaseInitialized: StatusSucceeded, rollout.PhaseProgressing: StatusRunning,
		rollout.PhaseWaiting: StatusRunning, rollout.PhaseWaitingPromotion: StatusRunning, rollout.PhasePromoting: StatusRunning,
		rollout.PhaseFinalising: StatusRunning, rollout.PhaseSucceeded: StatusSucceeded, rollout.PhaseRollingBack: StatusFailed,
		rollout.PhaseFailed: StatusFailed,
	} {
		if got := Status(phase); got != want {
			t.Errorf("Status(%s) = %v, want %v", phase, got, want)
		}
	}
}

func TestPushError_hidesThePassword(t *testing.T) {
	err := &PushError{URL: "https://ops:s3cret@push.example:9091", Err: errors.New("refused")}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("the error shows the URL's password: %v", err)
	}
}

// Destroy deletes the release's group, with the configured credentials.
func TestDelete(t *testing.T) {
	g := &gateway{}
	srv := httptest.NewServer(g)
	defer srv.Close()
	if err := Delete(context.Background(), Config{URL: srv.URL, Username: "ops", Password: "s3cret"}, "shop", "checkout"); err != nil {
		t.Fatal(err)
	}
	got := g.last(t)
	if got.method != http.MethodDelete || !groupPath(got.path) || !strings.HasPrefix(got.auth, "Basic ") {
		t.Fatalf("Delete sent %s %s (Authorization %q), want DELETE of the release's group with basic auth", got.method, got.path, got.auth)
	}
}

// groupPath is the release's group in either order of its labels: the push library orders a
// grouping key's labels as it iterates them.
func groupPath(path string) bool {
	return path == "/metrics/job/canary_release/namespace/shop/name/checkout" ||
		path == "/metrics/job/canary_release/name/checkout/namespace/shop"
}
