package metrics

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Querier is a metric backend: it runs one rendered query and returns one number. An empty
// result or NaN is ErrNoValues and ±Inf is ErrNotFinite (failed checks, as in Flagger);
// anything that says nothing about the canary (unreachable, refused, not one number) is an
// ErrQuery. Each backend lives in a package of its own, internal/metrics/<vendor>.
type Querier interface {
	Query(ctx context.Context, query string) (float64, error)
}

// Pinger is implemented by a backend that can check it is reachable: the first interval
// calls it before any traffic moves.
type Pinger interface {
	Ping(ctx context.Context) error
}

// QueryError marks err as an ErrQuery: it says nothing about the canary.
func QueryError(err error) error {
	if err == nil {
		return nil
	}
	return &queryError{err: err}
}

// QueryErrorf is QueryError of a formatted error.
func QueryErrorf(format string, args ...any) error { return queryErrorf(format, args...) }

// Value checks one number a backend read, as Flagger does: NaN is ErrNoValues (0/0, no
// traffic) and ±Inf is ErrNotFinite. what names the backend for the message.
func Value(what string, v float64) (float64, error) {
	switch {
	case math.IsNaN(v):
		return 0, fmt.Errorf("%w: %s returned NaN", ErrNoValues, what)
	case math.IsInf(v, 0):
		return 0, fmt.Errorf("%w (%s returned %v)", ErrNotFinite, what, v)
	}
	return v, nil
}

// HTTPConfig is how an HTTP backend is reached: its TLS settings and the timeout of one
// query.
type HTTPConfig struct {
	// CACertificate is PEM; it is added to the system roots.
	CACertificate      string
	InsecureSkipVerify bool
	Timeout            time.Duration
}

// NewHTTPClient builds the HTTP client of a backend. Its errors never carry the request's
// URL query (where some APIs take keys): see Do.
func NewHTTPClient(cfg HTTPConfig) (*http.Client, error) {
	t, err := tlsTransport(cfg.CACertificate, cfg.InsecureSkipVerify)
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &http.Client{Transport: t, Timeout: timeout, CheckRedirect: sameHostRedirects}, nil
}

// sameHostRedirects follows a backend's redirects on its own scheme, host and port only: Go
// keeps custom headers such as an API key on a redirect to another host, so a backend that
// redirects (or was made to) could hand its credential to that host.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	first := via[0].URL
	if req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
		return fmt.Errorf("the backend %s://%s redirected to %s://%s, another host: not followed, so its credentials stay with it",
			first.Scheme, first.Host, req.URL.Scheme, req.URL.Host)
	}
	return nil
}

// tlsTransport is a clone of the default transport that trusts caPEM besides the system roots
// (or skips verification, when the user asked for it). Prometheus and every HTTP backend use it.
func tlsTransport(caPEM string, insecureSkipVerify bool) (*http.Transport, error) {
	tlsCfg := &tls.Config{InsecureSkipVerify: insecureSkipVerify} //nolint:gosec // the user asked for it
	if caPEM != "" {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM([]byte(caPEM)) {
			return nil, errors.New("CA certificate: no PEM certificate found")
		}
		tlsCfg.RootCAs = pool
	}
	base, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, errors.New("http.DefaultTransport was replaced by a non-*http.Transport")
	}
	t := base.Clone()
	t.TLSClientConfig = tlsCfg
	return t, nil
}

// IsBaseURL reports whether raw is an http or https URL with a host and neither credentials nor
// a query: what a backend's address must be (its credentials have their own sensitive
// attributes, and paths and queries are the client's to add).
func IsBaseURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil && u.RawQuery == ""
}

// maxBody bounds what a backend's answer may hold: one number never needs more.
const maxBody = 4 << 20

// Do sends req and returns the answer's body when its status is 2xx. Every error is an
// ErrQuery that names what (the backend) and the URL without its user info and query, and
// has each of secrets replaced by "***": an error must never carry a credential.
func Do(client *http.Client, req *http.Request, what string, secrets ...string) ([]byte, error) {
	where := what + " " + redactURL(req.URL.Scheme+"://"+req.URL.Host+req.URL.Path)
	resp, err := client.Do(req)
	if err != nil {
		cause := err
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) && ue.Unwrap() != nil {
			cause = ue.Unwrap() // *url.Error repeats the full URL; keep only its cause
		}
		return nil, QueryErrorf("%s: %s", where, Redact(cause.Error(), secrets...))
	}
	defer resp.Body.Close() //nolint:errcheck // read-only body
	body, err := readAll(resp, maxBody)
	if err != nil {
		return nil, QueryErrorf("%s: reading the answer: %s", where, Redact(err.Error(), secrets...))
	}
	if resp.StatusCode/100 != 2 {
		return nil, QueryErrorf("%s answered %s: %s", where, resp.Status, Redact(snippet(body), secrets...))
	}
	return body, nil
}

// Redact replaces each non-empty secret in s by "***".
func Redact(s string, secrets ...string) string {
	for _, secret := range secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "***")
		}
	}
	return s
}

func readAll(resp *http.Response, limit int64) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("the answer is larger than %d bytes", limit)
	}
	return body, nil
}

// snippet is the start of an error answer, enough to say what went wrong.
func snippet(body []byte) string {
	s := strings.TrimSpace(string(body))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// IntervalQuerier is a backend whose time window follows the metric's interval, as Flagger's
// datadog, newrelic and dynatrace providers do. The provider binds each metric's interval
// (default 1m) with ForInterval and gives the analysis the Querier it returns.
type IntervalQuerier interface {
	Querier
	ForInterval(interval time.Duration) Querier
}
