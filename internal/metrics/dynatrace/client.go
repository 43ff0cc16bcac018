// Package dynatrace reads one number from Dynatrace's Metrics API v2
// (GET /api/v2/metrics/query), as Flagger's dynatrace provider does.
package dynatrace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// windowIntervals is how many metric intervals the query looks back: Flagger's
// dynatraceDeltaMultiplierOnMetricInterval.
const windowIntervals = 10

// Config says how to reach a Dynatrace environment.
type Config struct {
	// Address is the environment's URL, e.g. https://abc123.live.dynatrace.com.
	Address string
	Token   string
	HTTP    metrics.HTTPConfig
}

// Client queries one Dynatrace environment.
type Client struct {
	cfg    Config
	http   *http.Client
	window time.Duration
}

// New checks cfg and builds a client with a window of 10 minutes (a 1m metric interval).
func New(cfg Config) (*Client, error) {
	if !metrics.IsBaseURL(cfg.Address) {
		return nil, errors.New("dynatrace address must be the environment's http or https URL, such as https://abc123.live.dynatrace.com, without credentials or query")
	}
	if cfg.Token == "" {
		return nil, errors.New("dynatrace needs api_token")
	}
	hc, err := metrics.NewHTTPClient(cfg.HTTP)
	if err != nil {
		return nil, fmt.Errorf("dynatrace: %w", err)
	}
	return &Client{cfg: cfg, http: hc, window: windowIntervals * time.Minute}, nil
}

// ForInterval is the client with Flagger's window: 10 metric intervals back from now.
func (c *Client) ForInterval(interval time.Duration) metrics.Querier {
	cp := *c
	cp.window = windowIntervals * interval
	return &cp
}

type queryResponse struct {
	Result []struct {
		Data []struct {
			Values []*float64 `json:"values"`
		} `json:"data"`
	} `json:"result"`
}

// Query runs the metric selector q with resolution=Inf over the window (one value per
// series) and returns the first value of the last series, as Flagger does. No result, no
// series or no value is ErrNoValues; a null value is ErrNoValues too.
func (c *Client) Query(ctx context.Context, q string) (float64, error) {
	now := time.Now().UnixMilli()
	v := url.Values{}
	v.Set("metricSelector", q)
	v.Set("resolution", "Inf")
	v.Set("from", strconv.FormatInt(now-c.window.Milliseconds(), 10))
	v.Set("to", strconv.FormatInt(now, 10))
	body, err := c.get(ctx, "/api/v2/metrics/query?"+v.Encode())
	if err != nil {
		return 0, err
	}
	var r queryResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, metrics.QueryErrorf("dynatrace: the answer is not a metrics query response: %v", err)
	}
	if len(r.Result) == 0 || len(r.Result[0].Data) == 0 {
		return 0, fmt.Errorf("%w: dynatrace returned no series for the metric selector", metrics.ErrNoValues)
	}
	last := r.Result[0].Data[len(r.Result[0].Data)-1]
	if len(last.Values) == 0 || last.Values[0] == nil {
		return 0, fmt.Errorf("%w: dynatrace returned no value for the metric selector", metrics.ErrNoValues)
	}
	return metrics.Value("dynatrace", *last.Values[0])
}

// Ping lists one metric (GET /api/v2/metrics?pageSize=1), as Flagger's IsOnline.
func (c *Client) Ping(ctx context.Context) error {
	if _, err := c.get(ctx, "/api/v2/metrics?pageSize=1"); err != nil {
		return fmt.Errorf("dynatrace health check failed: %w", err)
	}
	return nil
}

func (c *Client) get(ctx context.Context, pathAndQuery string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.cfg.Address, "/")+pathAndQuery, nil)
	if err != nil {
		return nil, metrics.QueryError(err)
	}
	req.Header.Set("Authorization", "Api-Token "+c.cfg.Token)
	req.Header.Set("Accept", "application/json")
	return metrics.Do(c.http, req, "dynatrace", c.cfg.Token)
}
