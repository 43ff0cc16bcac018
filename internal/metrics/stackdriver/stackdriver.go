// Package stackdriver runs an MQL query against Google Cloud Monitoring. Flagger calls
// QueryTimeSeries over gRPC; this client calls the same method through its REST mapping,
// POST /v3/projects/<project>/timeSeries:query, which takes the same MQL and answers the
// same QueryTimeSeriesResponse as JSON. The value is the first point of the first time
// series, as in Flagger; the time window is the query's own `within`.
package stackdriver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/jwt"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// DefaultEndpoint is Cloud Monitoring's API.
const DefaultEndpoint = "https://monitoring.googleapis.com"

// scope is the read-only Monitoring scope, the least QueryTimeSeries needs.
const scope = "https://www.googleapis.com/auth/monitoring.read"

// Config says how to reach Cloud Monitoring.
type Config struct {
	Project string
	// ServiceAccountKey is a service account's JSON key (Flagger's serviceAccountKey). Its
	// token_uri is where access tokens come from.
	ServiceAccountKey string
	// Endpoint overrides DefaultEndpoint (a private endpoint, or the simulator).
	Endpoint string
	Timeout  time.Duration
}

// serviceAccountKey holds the fields of a JSON key the JWT flow needs.
type serviceAccountKey struct {
	Type         string `json:"type"`
	ClientEmail  string `json:"client_email"`
	PrivateKey   string `json:"private_key"`
	PrivateKeyID string `json:"private_key_id"`
	TokenURI     string `json:"token_uri"`
}

// Client runs MQL queries.
type Client struct {
	http     *http.Client
	queryURL string
	timeout  time.Duration
}

// New builds a client.
func New(cfg Config) (*Client, error) {
	if cfg.Project == "" {
		return nil, errors.New("project is empty")
	}
	if strings.ContainsAny(cfg.Project, "/?#") {
		return nil, fmt.Errorf("project %q must be a project ID or number, without projects/", cfg.Project)
	}
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	if !metrics.IsBaseURL(endpoint) {
		return nil, fmt.Errorf("endpoint %q must be an http or https URL without credentials or query", endpoint)
	}
	if cfg.ServiceAccountKey == "" {
		return nil, errors.New("service_account_key is empty")
	}
	var key serviceAccountKey
	if err := json.Unmarshal([]byte(cfg.ServiceAccountKey), &key); err != nil {
		// The decoder's message may quote the key's text: never pass it on.
		return nil, errors.New("service_account_key is not a JSON service account key")
	}
	if key.Type != "service_account" || key.ClientEmail == "" || key.PrivateKey == "" || key.TokenURI == "" {
		return nil, errors.New(`service_account_key must be a service account's JSON key, with "type": "service_account", client_email, private_key and token_uri`)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = metrics.DefaultTimeout
	}
	jc := &jwt.Config{
		Email: key.ClientEmail, PrivateKey: []byte(key.PrivateKey), PrivateKeyID: key.PrivateKeyID,
		TokenURL: key.TokenURI, Scopes: []string{scope},
	}
	base := &http.Client{Timeout: timeout}
	src := oauth2.ReuseTokenSource(nil, jc.TokenSource(context.WithValue(context.Background(), oauth2.HTTPClient, base)))
	return &Client{
		http:     &http.Client{Timeout: timeout, Transport: &oauth2.Transport{Source: src, Base: http.DefaultTransport}},
		queryURL: strings.TrimSuffix(endpoint, "/") + "/v3/projects/" + url.PathEscape(cfg.Project) + "/timeSeries:query",
		timeout:  timeout,
	}, nil
}

// queryResponse is the part of QueryTimeSeriesResponse the value comes from.
type queryResponse struct {
	TimeSeriesData []struct {
		PointData []struct {
			Values []typedValue `json:"values"`
		} `json:"pointData"`
	} `json:"timeSeriesData"`
}

// typedValue is a TypedValue: one of its fields is set. int64Value is a JSON string.
type typedValue struct {
	DoubleValue *float64 `json:"doubleValue"`
	Int64Value  *string  `json:"int64Value"`
	BoolValue   *bool    `json:"boolValue"`
}

// apiError is Google's JSON error body.
type apiError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
	} `json:"error"`
}

// post runs one timeSeries:query and returns the decoded answer, or the API's status.
func (c *Client) post(ctx context.Context, q string) (*queryResponse, int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	body, _ := json.Marshal(map[string]string{"query": q})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.queryURL, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, scrub(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		var ae apiError
		if json.Unmarshal(raw, &ae) == nil && ae.Error.Message != "" {
			return nil, resp.StatusCode, fmt.Errorf("%s (%d %s)", ae.Error.Message, resp.StatusCode, ae.Error.Status)
		}
		return nil, resp.StatusCode, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	var out queryResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, resp.StatusCode, fmt.Errorf("the answer is not a QueryTimeSeriesResponse: %v", err)
	}
	return &out, resp.StatusCode, nil
}

// Query runs an MQL query and returns the first value of the first point (the newest) of the
// first time series. No time series, point or value is metrics.ErrNoValues, as in Flagger.
// Unlike Flagger, which reads every value as a double (an int64 count reads 0 there), an
// int64 value is read as the number it is.
func (c *Client) Query(ctx context.Context, q string) (float64, error) {
	out, _, err := c.post(ctx, q)
	if err != nil {
		return 0, metrics.QueryErrorf("stackdriver timeSeries:query: %v", err)
	}
	if len(out.TimeSeriesData) == 0 {
		return 0, fmt.Errorf("%w: stackdriver returned no time series", metrics.ErrNoValues)
	}
	points := out.TimeSeriesData[0].PointData
	if len(points) == 0 || len(points[0].Values) == 0 {
		return 0, fmt.Errorf("%w: stackdriver returned a time series without points", metrics.ErrNoValues)
	}
	var v float64
	switch tv := points[0].Values[0]; {
	case tv.DoubleValue != nil:
		v = *tv.DoubleValue
	case tv.Int64Value != nil:
		n, err := strconv.ParseInt(*tv.Int64Value, 10, 64)
		if err != nil {
			return 0, metrics.QueryErrorf("stackdriver int64Value %q: %v", *tv.Int64Value, err)
		}
		v = float64(n)
	default:
		return 0, metrics.QueryErrorf("stackdriver's first value is neither a double nor an int64; a metric query must end in a number")
	}
	switch {
	case math.IsNaN(v):
		return 0, fmt.Errorf("%w: stackdriver returned NaN", metrics.ErrNoValues)
	case math.IsInf(v, 0):
		return 0, fmt.Errorf("%w (%v)", metrics.ErrNotFinite, v)
	}
	return v, nil
}

// Ping checks reachability and permission as Flagger does: an empty query must be refused
// as invalid (400 INVALID_ARGUMENT), not as unauthenticated or forbidden.
func (c *Client) Ping(ctx context.Context) error {
	_, status, err := c.post(ctx, "")
	if err == nil || status == http.StatusBadRequest {
		return nil
	}
	return fmt.Errorf("stackdriver health check (an empty timeSeries:query) failed: %w", err)
}

// scrub keeps a transport error's cause but drops the token endpoint's answer, which may
// echo the request.
func scrub(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		return fmt.Errorf("getting an access token from the key's token_uri failed: HTTP %d %s", re.Response.StatusCode, re.ErrorCode)
	}
	return err
}
