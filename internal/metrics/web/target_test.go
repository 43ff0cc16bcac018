package web

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// recorder is an HTTP server that keeps every request it gets: the request URI, the
// credential header and the body.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	hits []string
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.hits = append(r.hits, req.Method+" "+req.RequestURI+" "+req.Header.Get("Authorization")+" "+string(body))
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"data":{"value":42}}`)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.hits...)
}

const token = "Bearer s3cr3t-t0ken"

// TestQueryStaysOnTheConfiguredURL: a GET query, as written or once rendered, that names
// another scheme, host or port (outright, scheme-relative, or through backslashes and
// percent-encoding, which some servers and proxies read as another host) is refused before
// any request: neither the other server nor the configured one sees a request, and the
// error says what a query may be, without the token.
func TestQueryStaysOnTheConfiguredURL(t *testing.T) {
	configured, other := newRecorder(t), newRecorder(t)
	otherHost := strings.TrimPrefix(other.URL, "http://") // 127.0.0.1:<port>: only the port differs
	client, err := New(Config{URL: configured.URL + "/api/summary", Headers: map[string]string{"Authorization": token}, JSONPath: "{$.data.value}"})
	if err != nil {
		t.Fatal(err)
	}
	vars := metrics.Vars{Namespace: "shop", Target: "podinfo", Interval: "1m"}
	render := func(query string, variables map[string]string) string {
		t.Helper()
		v := vars
		v.Variables = variables
		rendered, err := metrics.Render(query, v)
		if err != nil {
			t.Fatal(err)
		}
		return rendered
	}

	// What a query may be: it reaches the configured server, with the token.
	for query, want := range map[string]string{
		render("?service={{ target }}&window={{ interval }}", nil): "GET /api/summary?service=podinfo&window=1m " + token + " ",
		render("/api/v1/{{ namespace }}?y=z", nil):                 "GET /api/v1/shop?y=z " + token + " ",
		render("x/{{ target }}", nil):                              "GET /api/x/podinfo " + token + " ",
		"?next=http://" + otherHost + "/x":                         "GET /api/summary?next=http://" + otherHost + "/x " + token + " ",
		`?status=5\d\d`:                                            "GET /api/summary?status=5\\d\\d " + token + " ",
	} {
		before := len(configured.got())
		if v, err := client.Query(context.Background(), query); err != nil || v != 42 {
			t.Fatalf("query %q: %v, %v; want 42 from the configured server", query, v, err)
		}
		if hits := configured.got()[before:]; len(hits) != 1 || hits[0] != want {
			t.Errorf("query %q: the configured server got %q, want [%q]", query, hits, want)
		}
	}

	for _, tc := range []struct{ name, query string }{
		{"absolute URL", other.URL + "/steal"},
		{"absolute URL in upper case", "HTTP://" + otherHost + "/steal"},
		{"absolute URL of the configured host", configured.URL + "/api/summary"},
		{"scheme-relative", "//" + otherHost + "/steal"},
		{"scheme-relative after spaces", "  //" + otherHost + "/steal"},
		{"scheme-relative with user info", "//user:pw@" + otherHost + "/steal"},
		{"empty authority", "///" + otherHost + "/steal"},
		{"scheme and path", "http:/" + otherHost + "/steal"},
		{"opaque", "https:" + otherHost},
		{"backslashes", `\\other.example\steal`},
		{"slash and backslash", `/\` + otherHost + `/steal`},
		{"backslash and slash", `\/` + otherHost + `/steal`},
		{"encoded backslashes", "%5C%5Cother.example/steal"},
		{"encoded slashes", "%2F%2Fother.example/steal"},
		{"slash and encoded slash", "/%2F" + otherHost + "/steal"},
		{"rendered scheme-relative", render("//{{ variables.host }}/steal?ns={{ namespace }}", map[string]string{"host": otherHost})},
		{"rendered absolute URL", render("{{ variables.base }}/steal/{{ target }}", map[string]string{"base": other.URL})},
		{"rendered from a path variable", render("/{{ variables.path }}", map[string]string{"path": "/" + otherHost + "/steal"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			query := tc.query
			before, otherBefore := len(configured.got()), len(other.got())
			_, err := client.Query(context.Background(), query)
			if err == nil || !errors.Is(err, metrics.ErrQuery) ||
				!strings.Contains(err.Error(), "must be a path and query on the backend's url, such as /api/v1/x?y=z") {
				t.Errorf("query %q: error %v, want a query error saying it must be a path and query on the backend's url", query, err)
			}
			if err != nil && strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the error carries the token: %v", err)
			}
			if hits := other.got()[otherBefore:]; len(hits) != 0 {
				t.Errorf("query %q: the other server got %q", query, hits)
			}
			if hits := configured.got()[before:]; len(hits) != 0 {
				t.Errorf("query %q: the configured server got %q; the query must be refused before any request", query, hits)
			}
		})
	}
}

// TestPostBodyIsNotAURL: with POST the query is the JSON body, so a URL in it is data.
func TestPostBodyIsNotAURL(t *testing.T) {
	configured := newRecorder(t)
	client, err := New(Config{URL: configured.URL + "/api/summary", Method: http.MethodPost, Headers: map[string]string{"Authorization": token}, JSONPath: "{$.data.value}"})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"from":"//other.example/x"}`
	if v, err := client.Query(context.Background(), body); err != nil || v != 42 {
		t.Fatalf("POST: %v, %v; want 42", v, err)
	}
	if hits := configured.got(); len(hits) != 1 || hits[0] != "POST /api/summary "+token+" "+body {
		t.Errorf("the configured server got %q", hits)
	}
}
