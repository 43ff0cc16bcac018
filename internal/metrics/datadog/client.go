// Package datadog reads one number from Datadog's metrics query API (GET /api/v1/query),
// as Flagger's datadog provider does.
package datadog

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

// DefaultAddress is Datadog's US1 API.
const DefaultAddress = "https://api.datadoghq.com"

// windowIntervals is how many metric intervals the query looks back: Flagger's
// datadogFromDeltaMultiplierOnMetricInterval.
const windowIntervals = 10

// Config says how to reach Datadog.
type Config struct {
	Address        string
	APIKey         string
	ApplicationKey string
	HTTP           metrics.HTTPConfig
}

// Client queries Datadog over one window.
type Client struct {
	cfg    Config
	http   *http.Client
	window time.Duration
}

// New checks cfg and builds a client with a window of 10 minutes (a 1m metric interval).
func New(cfg Config) (*Client, error) {
	if cfg.Address == "" {
		cfg.Address = DefaultAddress
	}
	if err := checkAddress(cfg.Address); err != nil {
		return nil, err
	}
	if cfg.APIKey == "" || cfg.ApplicationKey == "" {
		return nil, errors.New("datadog needs both api_key and application_key")
	}
	hc, err := metrics.NewHTTPClient(cfg.HTTP)
	if err != nil {
		return nil, fmt.Errorf("datadog: %w", err)
	}
	return &Client{cfg: cfg, http: hc, window: windowIntervals * time.Minute}, nil
}

func checkAddress(address string) error {
	if !metrics.IsBaseURL(address) {
		return fmt.Errorf("datadog address must be an http or https URL without credentials or query, such as %s", DefaultAddress)
	}
	return nil
}

// ForInterval is the client with Flagger's window: 10 metric intervals back from now.
func (c *Client) ForInterval(interval time.Duration) metrics.Querier {
	cp := *c
	cp.window = windowIntervals * interval
	return &cp
}

type queryResponse struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Series []struct {
		Pointlist [][]*float64 `json:"pointlist"`
	} `json:"series"`
}

// Query runs q from now-window to now and returns the value of the first series' oldest
// point, as Flagger does (the newest bucket is usually incomplete). No series or no point is
// ErrNoValues; a null point is ErrNoValues too.
func (c *Client) Query(ctx context.Context, q string) (float64, error) {
	now := time.Now().Unix()
	v := url.Values{}
	v.Set("query", q)
	v.Set("from", strconv.FormatInt(now-int64(c.window.Seconds()), 10))
	v.Set("to", strconv.FormatInt(now, 10))
	body, err := c.get(ctx, "/api/v1/query?"+v.Encode())
	if err != nil {
		return 0, err
	}
	var r queryResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, metrics.QueryErrorf("datadog: the answer is not a query response: %v", err)
	}
	if r.Status == "error" || r.Error != "" {
		return 0, metrics.QueryErrorf("datadog refused the query: %s", r.Error)
	}
	if len(r.Series) == 0 || len(r.Series[0].Pointlist) == 0 {
		return 0, fmt.Errorf("%w: datadog returned no points for the query", metrics.ErrNoValues)
	}
	point := r.Series[0].Pointlist[0]
	if len(point) < 2 || point[1] == nil {
		return 0, fmt.Errorf("%w: datadog's first point has no value", metrics.ErrNoValues)
	}
	return metrics.Value("datadog", *point[1])
}

// Ping validates the API key (GET /api/v1/validate), as Flagger's IsOnline.
func (c *Client) Ping(ctx context.Context) error {
	if _, err := c.get(ctx, "/api/v1/validate"); err != nil {
		return fmt.Errorf("datadog key validation failed: %w", err)
	}
	return nil
}

func (c *Client) get(ctx context.Context, pathAndQuery string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.cfg.Address, "/")+pathAndQuery, nil)
	if err != nil {
		return nil, metrics.QueryError(err)
	}
	req.Header.Set("DD-API-KEY", c.cfg.APIKey)
	req.Header.Set("DD-APPLICATION-KEY", c.cfg.ApplicationKey)
	req.Header.Set("Accept", "application/json")
	return metrics.Do(c.http, req, "datadog", c.cfg.APIKey, c.cfg.ApplicationKey)
}
