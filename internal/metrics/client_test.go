package metrics

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// fakeProm answers /api/v1/query with body and records what it received.
type fakeProm struct {
	mu      sync.Mutex
	body    string
	status  int
	queries []string
	headers http.Header
	paths   []string
}

func (f *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, r.Form.Get("query"))
	f.headers = r.Header.Clone()
	f.paths = append(f.paths, r.URL.Path)
	w.Header().Set("Content-Type", "application/json")
	if f.status != 0 {
		w.WriteHeader(f.status)
	}
	_, _ = io.WriteString(w, f.body)
}

func vector(values ...string) string {
	var series []string
	for i, v := range values {
		series = append(series, fmt.Sprintf(`{"metric":{"pod":"p%d"},"value":[1700000000.123,%q]}`, i, v))
	}
	return `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(series, ",") + `]}}`
}

func newTestClient(t *testing.T, f *fakeProm, cfg Config) *Client {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cfg.Address = srv.URL
	c, err := NewClient(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestQueryValues(t *testing.T) {
	cases := []struct {
		name, body string
		want       float64
		noValues   bool
		notFinite  bool
		errText    string
	}{
		{name: "single", body: vector("99.5"), want: 99.5},
		{name: "several series are a query error", body: vector("1", "2", "3"), errText: "returned 3 series"},
		{name: "+Inf", body: vector("+Inf"), notFinite: true},
		{name: "-Inf", body: vector("-Inf"), notFinite: true},
		{name: "scalar", body: `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"42"]}}`, want: 42},
		{name: "empty", body: vector(), noValues: true},
		{name: "NaN", body: vector("NaN"), noValues: true},
		{name: "matrix", body: `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1700000000,"1"]]}]}}`, errText: "range vector"},
		{name: "string", body: `{"status":"success","data":{"resultType":"string","result":[1700000000,"x"]}}`, errText: "string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeProm{body: c.body}
			got, err := newTestClient(t, f, Config{}).Query(context.Background(), "up")
			switch {
			case c.noValues:
				if !errors.Is(err, ErrNoValues) {
					t.Fatalf("got %v, %v; want ErrNoValues", got, err)
				}
			case c.notFinite:
				if !errors.Is(err, ErrNotFinite) || errors.Is(err, ErrQuery) {
					t.Fatalf("got %v, %v; want ErrNotFinite, a failed check", got, err)
				}
			case c.errText != "":
				if err == nil || errors.Is(err, ErrNoValues) || !errors.Is(err, ErrQuery) || !strings.Contains(err.Error(), c.errText) {
					t.Fatalf("got %v; want a query error containing %q", err, c.errText)
				}
			default:
				if err != nil || got != c.want {
					t.Fatalf("got %v, %v; want %v", got, err, c.want)
				}
			}
			if len(f.queries) != 1 || f.queries[0] != "up" {
				t.Fatalf("server saw queries %q", f.queries)
			}
		})
	}
}

func TestQueryServerError(t *testing.T) {
	f := &fakeProm{status: http.StatusBadRequest, body: `{"status":"error","errorType":"bad_data","error":"1:1: parse error: unexpected end of input"}`}
	_, err := newTestClient(t, f, Config{}).Query(context.Background(), "sum(")
	if err == nil || errors.Is(err, ErrNoValues) || !strings.Contains(err.Error(), "parse error") {
		t.Fatalf("got %v", err)
	}
}

func TestQueryTimeout(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	c, err := NewClient(Config{Address: srv.URL, Timeout: 100 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Query(context.Background(), "up"); err == nil {
		t.Fatal("a hung Prometheus did not time out")
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("timeout not honoured")
	}
}

func TestAuthHeaders(t *testing.T) {
	f := &fakeProm{body: vector("1")}
	c := newTestClient(t, f, Config{BearerToken: "s3cret", Headers: map[string]string{"X-Scope-OrgID": "tenant-1"}})
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.headers.Get("Authorization"); got != "Bearer s3cret" {
		t.Errorf("Authorization %q", got)
	}
	if got := f.headers.Get("X-Scope-OrgID"); got != "tenant-1" {
		t.Errorf("X-Scope-OrgID %q", got)
	}
	if f.queries[0] != "vector(1)" {
		t.Errorf("ping ran %q", f.queries[0])
	}

	f = &fakeProm{body: vector("1")}
	c = newTestClient(t, f, Config{Username: "admin", Password: "pw"})
	if _, err := c.Query(context.Background(), "up"); err != nil {
		t.Fatal(err)
	}
	if got := f.headers.Get("Authorization"); got != "Basic YWRtaW46cHc=" {
		t.Errorf("basic auth %q", got)
	}
}

func TestNewClientValidation(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Address: "prometheus:9090"},
		{Address: "ftp://prometheus:9090"},
		{Address: "http://p:9090", BearerToken: "t", Username: "u"},
		{Address: "https://p:9090", CACertificate: "not pem"},
	} {
		if _, err := NewClient(cfg, nil); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestPingFails(t *testing.T) {
	f := &fakeProm{status: http.StatusServiceUnavailable, body: "down"}
	if err := newTestClient(t, f, Config{}).Ping(context.Background()); err == nil {
		t.Fatal("ping succeeded against a failing server")
	}
}

func TestTLS(t *testing.T) {
	f := &fakeProm{body: vector("7")}
	srv := httptest.NewTLSServer(f)
	defer srv.Close()
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))

	query := func(cfg Config) error {
		cfg.Address = srv.URL
		c, err := NewClient(cfg, nil)
		if err != nil {
			return err
		}
		_, err = c.Query(context.Background(), "up")
		return err
	}
	if err := query(Config{}); err == nil {
		t.Error("an unknown CA was trusted")
	}
	if err := query(Config{CACertificate: ca}); err != nil {
		t.Errorf("with the CA: %v", err)
	}
	if err := query(Config{InsecureSkipVerify: true}); err != nil {
		t.Errorf("insecure: %v", err)
	}
}

// A cluster-Service address goes through the API server's service proxy with kube credentials.
func TestServiceAddressThroughAPIServer(t *testing.T) {
	f := &fakeProm{body: vector("12")}
	apiServer := httptest.NewServer(f)
	defer apiServer.Close()
	c, err := NewClient(Config{Address: "http://prometheus.monitoring:9090", Headers: map[string]string{"X-Extra": "1"}},
		&rest.Config{Host: apiServer.URL, BearerToken: "kube-token"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Query(context.Background(), "up")
	if err != nil || v != 12 {
		t.Fatalf("got %v, %v", v, err)
	}
	if want := "/api/v1/namespaces/monitoring/services/prometheus:9090/proxy/api/v1/query"; f.paths[0] != want {
		t.Errorf("path %q, want %q", f.paths[0], want)
	}
	if got := f.headers.Get("Authorization"); got != "Bearer kube-token" {
		t.Errorf("Authorization %q", got)
	}
	if got := f.headers.Get("X-Extra"); got != "1" {
		t.Errorf("X-Extra %q", got)
	}
}

// The API server consumes the Authorization header, so credentials for a Prometheus reached
// through the service proxy would be dropped: that is an error, not a silent 401 per check.
func TestCredentialsThroughTheServiceProxyAreRefused(t *testing.T) {
	kubeCfg := &rest.Config{Host: "https://127.0.0.1:6443"}
	for _, cfg := range []Config{
		{Address: "http://prometheus.monitoring:9090", BearerToken: "s3cret"},
		{Address: "http://user:pw@prometheus.monitoring.svc:9090", Username: "user", Password: "pw"},
	} {
		_, err := NewClient(cfg, kubeCfg)
		if err == nil || !strings.Contains(err.Error(), "cannot reach Prometheus") {
			t.Errorf("%s: error %v, want a refusal that says why", cfg.Address, err)
		}
		if err != nil && (strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), ":pw@")) {
			t.Errorf("the error quotes a credential: %v", err)
		}
	}
	if _, err := NewClient(Config{Address: "http://prometheus.monitoring:9090"}, kubeCfg); err != nil {
		t.Errorf("a Prometheus without credentials behind the service proxy: %v", err)
	}
	if _, err := NewClient(Config{Address: "https://prometheus.example.com", BearerToken: "s3cret"}, kubeCfg); err != nil {
		t.Errorf("credentials for a Prometheus reached directly: %v", err)
	}
}

// Prometheus reached through the API server's service proxy without the permission: the
// query error carries the API server's message, which names it.
func TestQueryRefusedByTheServiceProxyNamesThePermission(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"services \"prometheus:9090\" is forbidden: User \"terraform\" cannot get resource \"services/proxy\" in API group \"\" in the namespace \"monitoring\"","reason":"Forbidden","code":403}`))
	}))
	defer srv.Close()
	c, err := NewClient(Config{Address: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Query(context.Background(), "vector(1)")
	if !errors.Is(err, ErrQuery) || !strings.Contains(err.Error(), `cannot get resource "services/proxy" in API group "" in the namespace "monitoring"`) {
		t.Fatalf("error = %v, want a query error naming the permission", err)
	}
}
