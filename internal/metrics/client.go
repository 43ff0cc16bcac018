package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"

	"github.com/canary-release/terraform-provider-canary/internal/kube"
)

// ErrNoValues means the query matched no series or gave NaN (0/0: no traffic). Flagger
// counts this as a failed check.
var ErrNoValues = errors.New("no values found")

// ErrNotFinite means the query returned +Inf or -Inf (a division by zero): a failed check, as
// no threshold can judge it.
var ErrNotFinite = errors.New("the query returned an infinite value")

// ErrQuery marks an error that says nothing about the canary: Prometheus could not be reached
// or refused the query, or the result was not one number. The analysis holds its step instead
// of counting a failed check.
var ErrQuery = errors.New("query error")

// queryError wraps the cause of a query error so that errors.Is finds ErrQuery.
type queryError struct{ err error }

func (e *queryError) Error() string   { return e.err.Error() }
func (e *queryError) Unwrap() []error { return []error{ErrQuery, e.err} }
func queryErrorf(format string, args ...any) error {
	return &queryError{err: fmt.Errorf(format, args...)}
}

// DefaultTimeout bounds one query when Config.Timeout is zero (Flagger's Prometheus timeout).
const DefaultTimeout = 5 * time.Second

// Config says how to reach Prometheus.
type Config struct {
	Address string
	// BearerToken, or Username and Password, are sent with every request. They cannot be used
	// when Address is a cluster Service reached through the API server: the API server
	// authenticates with, and consumes, the Authorization header.
	BearerToken string
	Username    string
	Password    string
	Headers     map[string]string
	// CACertificate is PEM; it is added to the system roots.
	CACertificate      string
	InsecureSkipVerify bool
	Timeout            time.Duration
}

// Client runs instant queries.
type Client struct {
	address string
	timeout time.Duration
	api     promv1.API
}

// NewClient builds a client. When the address names a cluster Service (see
// kube.ServiceProxyURL) and kubeCfg is not nil, requests go through the API server's
// service proxy, so Prometheus need not be reachable from where Terraform runs.
func NewClient(cfg Config, kubeCfg *rest.Config) (*Client, error) {
	if cfg.Address == "" {
		return nil, errors.New("prometheus address is empty")
	}
	u, err := url.Parse(cfg.Address)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("prometheus address %q must be an http or https URL", cfg.Address)
	}
	if cfg.BearerToken != "" && (cfg.Username != "" || cfg.Password != "") {
		return nil, errors.New("prometheus: set either a bearer token or a username and password, not both")
	}
	direct, err := tlsTransport(cfg.CACertificate, cfg.InsecureSkipVerify)
	if err != nil {
		return nil, fmt.Errorf("prometheus %w", err)
	}

	var rt http.RoundTripper = direct
	if kubeCfg != nil && kube.IsServiceURL(cfg.Address) {
		if cfg.BearerToken != "" || cfg.Username != "" || cfg.Password != "" {
			// Dropping them silently would turn every check into a 401.
			return nil, fmt.Errorf("prometheus address %s names a cluster Service, reached through the API server's service proxy, "+
				"which authenticates with the Authorization header and consumes it, so a bearer token or basic auth cannot reach Prometheus. "+
				"Use an address Terraform reaches directly (an Ingress or a port-forward), or a Prometheus without auth inside the cluster", redactURL(cfg.Address))
		}
		if rt, err = kube.NewServiceProxyTransport(kubeCfg, direct); err != nil {
			return nil, fmt.Errorf("prometheus through the API server: %w", err)
		}
	}
	rt = &authTransport{cfg: cfg, next: rt}

	c, err := api.NewClient(api.Config{Address: cfg.Address, RoundTripper: rt})
	if err != nil {
		return nil, fmt.Errorf("prometheus client: %w", err)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{address: cfg.Address, timeout: timeout, api: promv1.NewAPI(c)}, nil
}

// Query runs an instant query and returns its single value. An empty result or NaN is
// ErrNoValues and ±Inf is ErrNotFinite (failed checks, as in Flagger); everything else that
// goes wrong, several series included, is an ErrQuery.
func (c *Client) Query(ctx context.Context, q string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	result, _, _, err := c.api.Query(ctx, q, time.Now())
	if err != nil {
		var apiErr *promv1.Error
		if errors.As(err, &apiErr) {
			if message := kube.StatusMessage([]byte(apiErr.Detail)); message != "" {
				// Refused by the API server's service proxy: its message names the permission.
				return 0, queryErrorf("prometheus %s: %w (the API server answered: %s)", redactURL(c.address), err, message)
			}
		}
		return 0, queryErrorf("prometheus %s: %w", redactURL(c.address), err)
	}
	var value model.SampleValue
	switch r := result.(type) {
	case model.Vector:
		switch len(r) {
		case 0:
			return 0, fmt.Errorf("%w: the query returned an empty vector", ErrNoValues)
		case 1:
			value = r[0].Value
		default:
			return 0, queryErrorf("the query returned %d series; a metric query must aggregate them into one (for example with sum)", len(r))
		}
	case *model.Scalar:
		value = r.Value
	case model.Matrix:
		return 0, queryErrorf("the query returned a range vector; a metric query must return a single instant value")
	default:
		return 0, queryErrorf("the query returned a %s; a metric query must return a single number", result.Type())
	}
	switch v := float64(value); {
	case math.IsNaN(v):
		return 0, fmt.Errorf("%w: the query returned NaN", ErrNoValues)
	case math.IsInf(v, 0):
		return 0, fmt.Errorf("%w (%v)", ErrNotFinite, v)
	}
	return float64(value), nil
}

// redactURL drops the user information of an address, so credentials never reach a message.
func redactURL(address string) string {
	u, err := url.Parse(address)
	if err != nil {
		return "(unparseable address)"
	}
	return u.Redacted()
}

// Ping checks that Prometheus answers a trivial query.
func (c *Client) Ping(ctx context.Context) error {
	if _, err := c.Query(ctx, "vector(1)"); err != nil {
		return fmt.Errorf("prometheus health check vector(1) failed: %w", err)
	}
	return nil
}

// authTransport adds the configured credentials and headers to every request.
type authTransport struct {
	cfg  Config
	next http.RoundTripper
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.cfg.Headers {
		req.Header.Set(k, v)
	}
	switch {
	case t.cfg.BearerToken != "":
		req.Header.Set("Authorization", "Bearer "+t.cfg.BearerToken)
	case t.cfg.Username != "" || t.cfg.Password != "":
		req.SetBasicAuth(t.cfg.Username, t.cfg.Password)
	}
	return t.next.RoundTrip(req)
}
