// Package web reads one number from any HTTP endpoint that answers JSON, picked with a
// JSONPath expression: Argo Rollouts' web metric provider.
package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"k8s.io/client-go/util/jsonpath"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// Config says which endpoint to call and how to read its answer.
type Config struct {
	// URL is the endpoint. With GET, the rendered query is a path and query resolved against it
	// (e.g. `?service=x` or `/path?x=y`), never another scheme, host or port (CheckQuery); with
	// POST, it is the request's JSON body.
	URL     string
	Method  string
	Headers map[string]string
	// JSONPath picks the number in the answer, in kubectl's syntax, e.g. `{$.data.value}`.
	JSONPath string
	HTTP     metrics.HTTPConfig
}

// Client calls one endpoint.
type Client struct {
	cfg  Config
	base *url.URL
	path *jsonpath.JSONPath
	http *http.Client
}

// New checks cfg and builds a client.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if cfg.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, errors.New("web url must be an http or https URL without credentials")
	}
	switch cfg.Method {
	case "":
		cfg.Method = http.MethodGet
	case http.MethodGet, http.MethodPost:
	default:
		return nil, fmt.Errorf("web method must be GET or POST, got %q", cfg.Method)
	}
	jp := jsonpath.New("web").AllowMissingKeys(true)
	if err := jp.Parse(cfg.JSONPath); err != nil {
		return nil, fmt.Errorf("web json_path %q does not parse: %v", cfg.JSONPath, err)
	}
	hc, err := metrics.NewHTTPClient(cfg.HTTP)
	if err != nil {
		return nil, fmt.Errorf("web: %w", err)
	}
	return &Client{cfg: cfg, base: u, path: jp, http: hc}, nil
}

// secrets are the header values: any of them may be a credential.
func (c *Client) secrets() []string {
	s := make([]string, 0, len(c.cfg.Headers))
	for _, v := range c.cfg.Headers {
		s = append(s, v)
	}
	return s
}

// Query calls the endpoint with q and returns the number json_path picks. Nothing picked or
// null is ErrNoValues (as Argo's `len(result) == 0`); several values, or a value that is not
// a number, is a query error.
func (c *Client) Query(ctx context.Context, q string) (float64, error) {
	endpoint := c.base.String()
	var body *bytes.Reader
	if c.cfg.Method == http.MethodPost {
		body = bytes.NewReader([]byte(q))
	} else {
		// Checked here, after rendering and before any request: the headers go where it points.
		var err error
		if endpoint, err = target(c.base, q); err != nil {
			return 0, metrics.QueryErrorf("web: %s", metrics.Redact(err.Error(), c.secrets()...))
		}
	}
	var req *http.Request
	var err error
	if body != nil {
		req, err = http.NewRequestWithContext(ctx, c.cfg.Method, endpoint, body)
	} else {
		req, err = http.NewRequestWithContext(ctx, c.cfg.Method, endpoint, nil)
	}
	if err != nil {
		return 0, metrics.QueryError(err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.cfg.Headers {
		req.Header.Set(k, v)
	}
	answer, err := metrics.Do(c.http, req, "web", c.secrets()...)
	if err != nil {
		return 0, err
	}
	var doc any
	if err := json.Unmarshal(answer, &doc); err != nil {
		return 0, metrics.QueryErrorf("web: the answer is not JSON: %v", err)
	}
	results, err := c.path.FindResults(doc)
	if err != nil {
		return 0, metrics.QueryErrorf("web: json_path %s: %v", c.cfg.JSONPath, err)
	}
	var found []any
	for _, r := range results {
		for _, v := range r {
			if v.IsValid() && v.CanInterface() {
				found = append(found, v.Interface())
			}
		}
	}
	switch len(found) {
	case 0:
		return 0, fmt.Errorf("%w: json_path %s picked nothing", metrics.ErrNoValues, c.cfg.JSONPath)
	case 1:
	default:
		return 0, metrics.QueryErrorf("web: json_path %s picked %d values; it must pick one number", c.cfg.JSONPath, len(found))
	}
	switch v := found[0].(type) {
	case nil:
		return 0, fmt.Errorf("%w: json_path %s picked null", metrics.ErrNoValues, c.cfg.JSONPath)
	case float64:
		return metrics.Value("web", v)
	case string:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, metrics.QueryErrorf("web: json_path %s picked %q, not a number", c.cfg.JSONPath, v)
		}
		return metrics.Value("web", f)
	default:
		return 0, metrics.QueryErrorf("web: json_path %s picked a %T, not a number", c.cfg.JSONPath, v)
	}
}
