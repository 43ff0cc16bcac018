// Package newrelic reads one number from New Relic with an NRQL query through NerdGraph, with
// New Relic's Go client (newrelic-client-go). Flagger's newrelic provider used the Insights
// query API, which New Relic retired in favour of NerdGraph; the query and its window are
// Flagger's.
package newrelic

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/newrelic/newrelic-client-go/v2/pkg/config"
	"github.com/newrelic/newrelic-client-go/v2/pkg/nrdb"
	"github.com/newrelic/newrelic-client-go/v2/pkg/region"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// Config says how to reach New Relic.
type Config struct {
	AccountID int
	APIKey    string // a user key, sent as API-Key
	// Region is US, EU, ... (New Relic's data centre); "" is US.
	Region string
	// Address replaces the region's NerdGraph URL (https://api.newrelic.com/graphql).
	Address string
	HTTP    metrics.HTTPConfig
}

// Client runs NRQL over one window.
type Client struct {
	cfg    Config
	nrdb   nrdb.Nrdb
	window time.Duration
}

// New checks cfg and builds a client whose window is 60 seconds (a 1m metric interval).
func New(cfg Config) (*Client, error) {
	if cfg.AccountID <= 0 {
		return nil, errors.New("newrelic account_id must be a positive account number")
	}
	if cfg.APIKey == "" {
		return nil, errors.New("newrelic needs api_key")
	}
	c := config.New()
	c.LogLevel = "error" // the client logs requests at debug; keys never reach our logs
	c.PersonalAPIKey = cfg.APIKey
	if cfg.Region != "" {
		name, err := region.Parse(cfg.Region)
		if err != nil {
			return nil, fmt.Errorf("newrelic region %q is not one of US, EU, JP, GOV", cfg.Region)
		}
		reg, err := region.Get(name)
		if err != nil {
			return nil, fmt.Errorf("newrelic region %q: %v", cfg.Region, err)
		}
		if err := c.SetRegion(reg); err != nil {
			return nil, fmt.Errorf("newrelic region %q: %v", cfg.Region, err)
		}
	}
	if cfg.Address != "" {
		if !metrics.IsBaseURL(cfg.Address) {
			return nil, errors.New("newrelic address must be a NerdGraph http or https URL without credentials or query, such as https://api.newrelic.com/graphql")
		}
		c.Region().SetNerdGraphBaseURL(cfg.Address)
	}
	hc, err := metrics.NewHTTPClient(cfg.HTTP)
	if err != nil {
		return nil, fmt.Errorf("newrelic: %w", err)
	}
	c.HTTPTransport = hc.Transport
	c.Timeout = &hc.Timeout
	c.Logger = c.GetLogger()
	return &Client{cfg: cfg, nrdb: nrdb.New(c), window: time.Minute}, nil
}

// ForInterval is the client with Flagger's window: SINCE one metric interval ago.
func (c *Client) ForInterval(interval time.Duration) metrics.Querier {
	cp := *c
	cp.window = interval
	return &cp
}

// Query runs q with Flagger's ` SINCE <interval> seconds ago` appended. It must give one
// result row with one number (a row with several columns is read by its `result` column,
// as Flagger's): no row or null is ErrNoValues.
func (c *Client) Query(ctx context.Context, q string) (float64, error) {
	nrql := fmt.Sprintf("%s SINCE %d seconds ago", q, int64(c.window.Seconds()))
	res, err := c.nrdb.QueryWithContext(ctx, c.cfg.AccountID, nrdb.NRQL(nrql))
	if err != nil {
		return 0, metrics.QueryErrorf("newrelic: %s", metrics.Redact(err.Error(), c.cfg.APIKey))
	}
	if len(res.Results) != 1 {
		return 0, fmt.Errorf("%w: newrelic returned %d result rows, want one", metrics.ErrNoValues, len(res.Results))
	}
	row := res.Results[0]
	raw, ok := row["result"]
	if !ok && len(row) == 1 {
		for _, v := range row {
			raw = v
		}
	} else if !ok {
		return 0, metrics.QueryErrorf("newrelic: the result row has the columns %v; return one number, or name it with AS result", slices.Sorted(maps.Keys(row)))
	}
	switch v := raw.(type) {
	case nil:
		return 0, fmt.Errorf("%w: newrelic returned null", metrics.ErrNoValues)
	case float64:
		return metrics.Value("newrelic", v)
	case int:
		return float64(v), nil
	default:
		return 0, metrics.QueryErrorf("newrelic: the result is a %T, not a number", v)
	}
}

// Ping runs Flagger's check, SELECT * FROM Metric, and needs only an answer.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.nrdb.QueryWithContext(ctx, c.cfg.AccountID, "SELECT * FROM Metric SINCE 1 minute ago LIMIT 1"); err != nil {
		return fmt.Errorf("newrelic health check failed: %w", metrics.QueryErrorf("%s", metrics.Redact(err.Error(), c.cfg.APIKey)))
	}
	return nil
}
