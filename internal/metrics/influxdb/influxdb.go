// Package influxdb runs a Flux query against InfluxDB 2.x with influxdb-client-go, as
// Flagger's influxdb provider does: the value is the first record's _value; the time window
// is the query's own range().
package influxdb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	influxdb2 "github.com/influxdata/influxdb-client-go/v2"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// Config says how to reach InfluxDB.
type Config struct {
	Address string
	Token   string
	Org     string
	Timeout time.Duration
}

// Client runs Flux queries.
type Client struct {
	client  influxdb2.Client
	org     string
	address string
	timeout time.Duration
}

// New builds a client.
func New(cfg Config) (*Client, error) {
	if !metrics.IsBaseURL(cfg.Address) {
		return nil, errors.New("address must be an http or https URL without a query, and must not carry credentials (set token instead)")
	}
	if cfg.Org == "" {
		return nil, errors.New("org is empty")
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = metrics.DefaultTimeout
	}
	opts := influxdb2.DefaultOptions().SetHTTPRequestTimeout(uint(math.Ceil(timeout.Seconds())))
	return &Client{client: influxdb2.NewClientWithOptions(cfg.Address, cfg.Token, opts), org: cfg.Org, address: cfg.Address, timeout: timeout}, nil
}

// Query runs a Flux query and returns the first record's value. As in Flagger, a result
// without any record reads 0 (a Flux count() over no rows gives no table at all); a null
// value or NaN is metrics.ErrNoValues. Integers are read as numbers too (Flagger refuses them).
func (c *Client) Query(ctx context.Context, q string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	result, err := c.client.QueryAPI(c.org).Query(ctx, q)
	if err != nil {
		return 0, metrics.QueryErrorf("influxdb %s: %v", c.address, err)
	}
	defer func() { _ = result.Close() }()
	if !result.Next() {
		if err := result.Err(); err != nil {
			return 0, metrics.QueryErrorf("influxdb %s: %v", c.address, err)
		}
		return 0, nil
	}
	var v float64
	switch x := result.Record().Value().(type) {
	case nil:
		return 0, fmt.Errorf("%w: influxdb returned a null _value", metrics.ErrNoValues)
	case float64:
		v = x
	case int64:
		v = float64(x)
	case uint64:
		v = float64(x)
	default:
		return 0, metrics.QueryErrorf("influxdb returned a %T _value; a metric query must end in a number", x)
	}
	switch {
	case math.IsNaN(v):
		return 0, fmt.Errorf("%w: influxdb returned NaN", metrics.ErrNoValues)
	case math.IsInf(v, 0):
		return 0, fmt.Errorf("%w (%v)", metrics.ErrNotFinite, v)
	}
	return v, nil
}

// Ping checks that InfluxDB answers an authenticated query (the token and org are checked,
// unlike /ping).
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	result, err := c.client.QueryAPI(c.org).Query(ctx, "buckets() |> limit(n: 1)")
	if err != nil {
		return fmt.Errorf("influxdb health check (buckets() |> limit(n: 1)) failed: %w", err)
	}
	for result.Next() {
	}
	if err := result.Err(); err != nil {
		return fmt.Errorf("influxdb health check failed: %w", err)
	}
	return result.Close()
}
