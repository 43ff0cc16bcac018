// Package graphite reads one number from Graphite's render API (GET /render?format=json), as
// Flagger's graphite provider does.
package graphite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// Config says how to reach Graphite.
type Config struct {
	Address            string
	Username, Password string
	HTTP               metrics.HTTPConfig
}

// Client queries one Graphite.
type Client struct {
	cfg  Config
	base *url.URL
	http *http.Client
}

// New checks cfg and builds a client.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.Address)
	if err != nil || !metrics.IsBaseURL(cfg.Address) {
		return nil, errors.New("graphite address must be an http or https URL without credentials or query, such as http://graphite:8080")
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, errors.New("graphite: set both username and password, or neither")
	}
	hc, err := metrics.NewHTTPClient(cfg.HTTP)
	if err != nil {
		return nil, fmt.Errorf("graphite: %w", err)
	}
	return &Client{cfg: cfg, base: u, http: hc}, nil
}

var spaces = regexp.MustCompile(`\s+`)

// datapoint is Graphite's [value, timestamp]; the value is null where no data was written.
type datapoint struct{ value *float64 }

func (d *datapoint) UnmarshalJSON(b []byte) error {
	var pair []json.RawMessage
	if err := json.Unmarshal(b, &pair); err != nil || len(pair) != 2 {
		return fmt.Errorf("a datapoint must be [value, timestamp], got %s", b)
	}
	raw := strings.Trim(string(pair[0]), `"`)
	if raw == "null" {
		return nil
	}
	v, err := strconv.ParseFloat(raw, 64)
	if err != nil {
		return fmt.Errorf("datapoint value %s is not a number", pair[0])
	}
	d.value = &v
	return nil
}

// Query sends q, the render API's parameters (e.g. `target=...&from=-1min`), with
// format=json, and returns the last non-null datapoint of the answer, as Flagger does. No
// series or only nulls is ErrNoValues. Whitespace in q is collapsed, so a template may span
// lines.
func (c *Client) Query(ctx context.Context, q string) (float64, error) {
	params, err := url.ParseQuery(strings.TrimSpace(spaces.ReplaceAllString(q, " ")))
	if err != nil {
		return 0, metrics.QueryErrorf("graphite: the query must be render API parameters such as target=...&from=-1min: %v", err)
	}
	params.Set("format", "json")
	u := *c.base
	u.Path = path.Join(c.base.Path, "render")
	u.RawQuery = params.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, metrics.QueryError(err)
	}
	if c.cfg.Username != "" {
		req.SetBasicAuth(c.cfg.Username, c.cfg.Password)
	}
	body, err := metrics.Do(c.http, req, "graphite", c.cfg.Password)
	if err != nil {
		return 0, err
	}
	var series []struct {
		Target     string      `json:"target"`
		Datapoints []datapoint `json:"datapoints"`
	}
	if err := json.Unmarshal(body, &series); err != nil {
		return 0, metrics.QueryErrorf("graphite: the answer is not a render response: %v", err)
	}
	var value *float64
	for _, s := range series {
		for _, d := range s.Datapoints {
			if d.value != nil {
				value = d.value
			}
		}
	}
	if value == nil {
		return 0, fmt.Errorf("%w: graphite returned no datapoint with a value", metrics.ErrNoValues)
	}
	return metrics.Value("graphite", *value)
}

// Ping renders a target that need not exist (target=test), as Flagger's IsOnline: only an
// unreachable or refusing Graphite fails it.
func (c *Client) Ping(ctx context.Context) error {
	if _, err := c.Query(ctx, "target=test&from=-1min"); err != nil && !errors.Is(err, metrics.ErrNoValues) {
		return fmt.Errorf("graphite health check failed: %w", err)
	}
	return nil
}
