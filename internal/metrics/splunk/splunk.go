// Package splunk runs a SignalFlow program against Splunk Observability Cloud (SignalFx).
// Flagger runs it over SignalFlow's WebSocket API; this client uses SignalFlow's HTTP API,
// POST /v2/signalflow/execute, which runs the same program over the same window and streams
// the same data messages as Server-Sent Events. As in Flagger, the window is ten metric
// intervals back from now, the computation is immediate, and the value is the last non-null
// datapoint; datapoints from more than one time series are an error.
package splunk

import (
	"bufio"
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

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// WindowIntervals is how many metric intervals back the program starts (Flagger's
// signalFxFromDeltaMultiplierOnMetricInterval).
const WindowIntervals = 10

// tokenHeader carries the access token.
const tokenHeader = "X-SF-Token"

// Config says how to reach Splunk Observability.
type Config struct {
	// Address is the REST API's, https://api.<realm>.signalfx.com, as in Flagger. SignalFlow
	// runs on the stream host, the same address with "api." replaced by "stream."; an address
	// whose host does not start with "api." (a proxy, the simulator) serves both.
	Address string
	Token   string
	Timeout time.Duration
}

// Client runs SignalFlow programs for one metric interval.
type Client struct {
	http        *http.Client
	stream, api string
	token       string
	window      time.Duration
	timeout     time.Duration
	now         func() time.Time
}

// New builds a client; its window is WindowIntervals times one minute until ForInterval
// says otherwise.
func New(cfg Config) (*Client, error) {
	if cfg.Token == "" {
		return nil, errors.New("token is empty")
	}
	if !metrics.IsBaseURL(cfg.Address) {
		return nil, fmt.Errorf("address %q must be an http or https URL without credentials or query, such as https://api.us1.signalfx.com", cfg.Address)
	}
	u, _ := url.Parse(cfg.Address) // checked by IsBaseURL
	api := strings.TrimSuffix(cfg.Address, "/")
	stream := api
	if strings.HasPrefix(u.Host, "api.") {
		su := *u
		su.Host = "stream." + strings.TrimPrefix(u.Host, "api.")
		stream = strings.TrimSuffix(su.String(), "/")
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = metrics.DefaultTimeout
	}
	return &Client{
		http:   &http.Client{Timeout: timeout},
		stream: stream, api: api,
		token: cfg.Token, window: WindowIntervals * time.Minute, timeout: timeout, now: time.Now,
	}, nil
}

// ForInterval is the client for a metric whose interval is d (metrics.IntervalQuerier): the
// window becomes WindowIntervals times it.
func (c *Client) ForInterval(d time.Duration) metrics.Querier {
	cp := *c
	cp.window = WindowIntervals * d
	return &cp
}

// Window is how far back a program starts.
func (c *Client) Window() time.Duration { return c.window }

// message is one SignalFlow stream message, as the SSE data of an event.
type message struct {
	Type  string `json:"type"`
	Event string `json:"event"`
	Data  []struct {
		TSID  string   `json:"tsId"`
		Value *float64 `json:"value"`
	} `json:"data"`
	Message string `json:"message"`
	Error   *int   `json:"error"`
}

// Query executes the program from WindowIntervals metric intervals ago to now and returns
// its last non-null value. No value is metrics.ErrNoValues; values of several time series
// are an error (the program must publish one stream), as in Flagger.
func (c *Client) Query(ctx context.Context, program string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	stop := c.now()
	q := url.Values{}
	q.Set("start", strconv.FormatInt(stop.Add(-c.window).UnixMilli(), 10))
	q.Set("stop", strconv.FormatInt(stop.UnixMilli(), 10))
	q.Set("immediate", "true")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.stream+"/v2/signalflow/execute?"+q.Encode(), strings.NewReader(program))
	if err != nil {
		return 0, metrics.QueryErrorf("splunk: %v", err)
	}
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(tokenHeader, c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, metrics.QueryErrorf("splunk SignalFlow %s: %v", c.stream, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, metrics.QueryErrorf("splunk SignalFlow %s: %s", c.stream, statusText(resp))
	}
	var last *float64
	series := map[string]bool{}
	err = readEvents(resp.Body, func(event, data string) error {
		var m message
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			return fmt.Errorf("a %s event is not a SignalFlow message: %v", event, err)
		}
		switch {
		case event == "error" || m.Type == "error":
			return fmt.Errorf("the computation failed: %s", m.Message)
		case event == "data" || m.Type == "data":
			for _, d := range m.Data {
				if d.Value == nil {
					continue
				}
				series[d.TSID] = true
				v := *d.Value
				last = &v
			}
		}
		return nil
	})
	if err != nil {
		return 0, metrics.QueryErrorf("splunk SignalFlow: %v", err)
	}
	switch {
	case last == nil:
		return 0, fmt.Errorf("%w: splunk SignalFlow published no value in the last %s", metrics.ErrNoValues, c.window)
	case len(series) > 1:
		return 0, metrics.QueryErrorf("splunk SignalFlow published %d time series; a metric program must publish one (aggregate it, for example with sum())", len(series))
	case math.IsNaN(*last):
		return 0, fmt.Errorf("%w: splunk SignalFlow returned NaN", metrics.ErrNoValues)
	case math.IsInf(*last, 0):
		return 0, fmt.Errorf("%w (%v)", metrics.ErrNotFinite, *last)
	}
	return *last, nil
}

// readEvents calls fn with each Server-Sent Event's name and data (its data lines joined).
func readEvents(r io.Reader, fn func(event, data string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	event, data := "", []string{}
	flush := func() error {
		defer func() { event, data = "", data[:0] }()
		if len(data) == 0 {
			return nil
		}
		return fn(event, strings.Join(data, "\n"))
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if err := flush(); err != nil {
				return err
			}
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return flush()
}

// Ping checks the endpoint and token as Flagger does: GET /v2/metric?limit=1 must answer 200.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.api+"/v2/metric?limit=1", nil)
	if err != nil {
		return err
	}
	req.Header.Set(tokenHeader, c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("splunk health check (GET /v2/metric?limit=1) failed: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("splunk health check (GET /v2/metric?limit=1) failed: %s", statusText(resp))
	}
	return nil
}

// statusText is a refused request's status and the start of its body, which names the cause.
func statusText(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if s := strings.TrimSpace(string(b)); s != "" {
		return fmt.Sprintf("HTTP %d: %s", resp.StatusCode, s)
	}
	return fmt.Sprintf("HTTP %d", resp.StatusCode)
}
