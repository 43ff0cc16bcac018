// Package newrelic reads one number from New Relic with an NRQL query, posted to NerdGraph
// (New Relic's GraphQL API) over plain HTTP, as the other backends read theirs. Flagger's
// newrelic provider used the Insights query API, which New Relic retired in favour of
// NerdGraph; the query and its window are Flagger's.
package newrelic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// Config says how to reach New Relic.
type Config struct {
	AccountID int
	APIKey    string // a user key, sent as API-Key
	// Region is US, EU, JP or GOV (New Relic's data centre); "" is US.
	Region string
	// Address replaces the region's NerdGraph URL (https://api.newrelic.com/graphql).
	Address string
	HTTP    metrics.HTTPConfig
}

// nerdGraphURLs are the regions' NerdGraph endpoints, by the names New Relic gives its data
// centres (FedRAMP is GOV's other name).
var nerdGraphURLs = map[string]string{
	"us":      "https://api.newrelic.com/graphql",
	"eu":      "https://api.eu.newrelic.com/graphql",
	"jp":      "https://api.jp.newrelic.com/graphql",
	"gov":     "https://gov-api.newrelic.com/graphql",
	"fedramp": "https://gov-api.newrelic.com/graphql",
}

// nrqlQuery asks NerdGraph for the rows of one NRQL query in one account.
const nrqlQuery = `query($accountId: Int!, $query: Nrql!) { actor { account(id: $accountId) { nrql(query: $query) { results } } } }`

// Client runs NRQL over one window.
type Client struct {
	cfg    Config
	url    string
	http   *http.Client
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
	url := nerdGraphURLs["us"]
	if cfg.Region != "" {
		var ok bool
		if url, ok = nerdGraphURLs[strings.ToLower(cfg.Region)]; !ok {
			return nil, fmt.Errorf("newrelic region %q is not one of US, EU, JP, GOV", cfg.Region)
		}
	}
	if cfg.Address != "" {
		if !metrics.IsBaseURL(cfg.Address) {
			return nil, errors.New("newrelic address must be a NerdGraph http or https URL without credentials or query, such as https://api.newrelic.com/graphql")
		}
		url = cfg.Address
	}
	hc, err := metrics.NewHTTPClient(cfg.HTTP)
	if err != nil {
		return nil, fmt.Errorf("newrelic: %w", err)
	}
	return &Client{cfg: cfg, url: url, http: hc, window: time.Minute}, nil
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
	rows, err := c.nrql(ctx, fmt.Sprintf("%s SINCE %d seconds ago", q, int64(c.window.Seconds())))
	if err != nil {
		return 0, err
	}
	if len(rows) != 1 {
		return 0, fmt.Errorf("%w: newrelic returned %d result rows, want one", metrics.ErrNoValues, len(rows))
	}
	row := rows[0]
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
	default:
		return 0, metrics.QueryErrorf("newrelic: the result is a %T, not a number", v)
	}
}

// Ping runs Flagger's check, SELECT * FROM Metric, and needs only an answer.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.nrql(ctx, "SELECT * FROM Metric SINCE 1 minute ago LIMIT 1"); err != nil {
		return fmt.Errorf("newrelic health check failed: %w", err)
	}
	return nil
}

// nrql posts one NRQL query to NerdGraph and returns its result rows. GraphQL reports a
// failed query as errors in a 200 answer, so those are read as well as the status.
func (c *Client) nrql(ctx context.Context, nrql string) ([]map[string]any, error) {
	body, err := json.Marshal(map[string]any{
		"query":     nrqlQuery,
		"variables": map[string]any{"accountId": c.cfg.AccountID, "query": nrql},
	})
	if err != nil {
		return nil, metrics.QueryErrorf("newrelic: %v", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, metrics.QueryErrorf("newrelic: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("API-Key", c.cfg.APIKey)
	answer, err := metrics.Do(c.http, req, "newrelic", c.cfg.APIKey)
	if err != nil {
		return nil, err
	}
	var res struct {
		Data struct {
			Actor struct {
				Account struct {
					NRQL *struct {
						Results []map[string]any `json:"results"`
					} `json:"nrql"`
				} `json:"account"`
			} `json:"actor"`
		} `json:"data"`
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(answer, &res); err != nil {
		return nil, metrics.QueryErrorf("newrelic: the answer is not NerdGraph's JSON: %v", err)
	}
	if len(res.Errors) > 0 {
		msgs := make([]string, len(res.Errors))
		for i, e := range res.Errors {
			msgs[i] = e.Message
		}
		return nil, metrics.QueryErrorf("newrelic: %s", metrics.Redact(strings.Join(msgs, "; "), c.cfg.APIKey))
	}
	if res.Data.Actor.Account.NRQL == nil {
		return nil, metrics.QueryErrorf("newrelic: NerdGraph answered without an nrql result")
	}
	return res.Data.Actor.Account.NRQL.Results, nil
}
