// Package cloudwatch runs a metric query against Amazon CloudWatch's GetMetricData, as
// Flagger's cloudwatch provider does: the query is a JSON array of MetricDataQuery, the window
// is ten metric intervals back from now, and the value is the newest datapoint of the first
// result.
package cloudwatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	cw "github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/smithy-go"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// WindowIntervals is how many metric intervals back the query reaches (Flagger's
// cloudWatchStartDeltaMultiplierOnMetricInterval).
const WindowIntervals = 10

// maxDatapoints is Flagger's MaxDatapoints.
const maxDatapoints = 20

// Config says how to reach CloudWatch. Without static keys the AWS default credential chain
// applies (environment, shared files, web identity, container and instance roles).
type Config struct {
	Region string
	// Endpoint overrides the regional endpoint (a VPC endpoint, or the simulator).
	Endpoint        string
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	Timeout         time.Duration
}

// Client runs GetMetricData queries for one metric interval.
type Client struct {
	api     *cw.Client
	window  time.Duration
	timeout time.Duration
	now     func() time.Time
}

// New builds a client; its window is WindowIntervals times the default interval until
// ForInterval says otherwise.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Region == "" {
		return nil, errors.New("region is empty")
	}
	if cfg.Endpoint != "" {
		if !metrics.IsBaseURL(cfg.Endpoint) {
			return nil, fmt.Errorf("endpoint %q must be an http or https URL without credentials or query", cfg.Endpoint)
		}
	}
	if (cfg.AccessKeyID == "") != (cfg.SecretAccessKey == "") {
		return nil, errors.New("set both access_key_id and secret_access_key, or neither (the AWS default credential chain)")
	}
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(cfg.Region), awsconfig.WithRetryMaxAttempts(3)}
	if cfg.AccessKeyID != "" {
		opts = append(opts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		// The chain's own messages name files and variables, never secret values.
		return nil, fmt.Errorf("AWS configuration: %w", err)
	}
	api := cw.NewFromConfig(awsCfg, func(o *cw.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = metrics.DefaultTimeout
	}
	return &Client{api: api, window: WindowIntervals * time.Minute, timeout: timeout, now: time.Now}, nil
}

// ForInterval is the client for a metric whose interval is d (metrics.IntervalQuerier): the
// window becomes WindowIntervals times it.
func (c *Client) ForInterval(d time.Duration) metrics.Querier {
	cp := *c
	cp.window = WindowIntervals * d
	return &cp
}

// Window is how far back a query reaches.
func (c *Client) Window() time.Duration { return c.window }

// ParseQuery decodes a rendered query: a JSON array of MetricDataQuery, with the SDK's field
// names (Id, Expression, MetricStat, Period, ReturnData, ...), as Flagger reads it.
func ParseQuery(q string) ([]types.MetricDataQuery, error) {
	var queries []types.MetricDataQuery
	if err := json.Unmarshal([]byte(q), &queries); err != nil {
		return nil, fmt.Errorf("the query must be a JSON array of CloudWatch MetricDataQuery objects: %v", err)
	}
	if len(queries) == 0 {
		return nil, errors.New("the query is an empty array; it needs at least one MetricDataQuery")
	}
	return queries, nil
}

// Query runs the query over the window ending now and returns the newest value of the first
// result. No result or no datapoint is metrics.ErrNoValues, as in Flagger.
func (c *Client) Query(ctx context.Context, q string) (float64, error) {
	queries, err := ParseQuery(q)
	if err != nil {
		return 0, metrics.QueryErrorf("cloudwatch: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	end := c.now()
	out, err := c.api.GetMetricData(ctx, &cw.GetMetricDataInput{
		StartTime:         aws.Time(end.Add(-c.window)),
		EndTime:           aws.Time(end),
		MaxDatapoints:     aws.Int32(maxDatapoints),
		MetricDataQueries: queries,
		ScanBy:            types.ScanByTimestampDescending,
	})
	if err != nil {
		return 0, metrics.QueryErrorf("cloudwatch GetMetricData: %v", describe(err))
	}
	if len(out.MetricDataResults) == 0 {
		return 0, fmt.Errorf("%w: cloudwatch returned no MetricDataResults", metrics.ErrNoValues)
	}
	first := out.MetricDataResults[0]
	if len(first.Values) == 0 {
		return 0, fmt.Errorf("%w: cloudwatch result %q has no datapoint in the last %s", metrics.ErrNoValues, aws.ToString(first.Id), c.window)
	}
	v := first.Values[0]
	switch {
	case math.IsNaN(v):
		return 0, fmt.Errorf("%w: cloudwatch returned NaN", metrics.ErrNoValues)
	case math.IsInf(v, 0):
		return 0, fmt.Errorf("%w (%v)", metrics.ErrNotFinite, v)
	}
	return v, nil
}

// Ping checks reachability and permission as Flagger does: an empty GetMetricData must be
// refused as invalid (400), not as unauthorised or unreachable.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	now := c.now()
	_, err := c.api.GetMetricData(ctx, &cw.GetMetricDataInput{
		StartTime: aws.Time(now.Add(-time.Minute)), EndTime: aws.Time(now),
		MetricDataQueries: []types.MetricDataQuery{},
	})
	if err == nil {
		return nil
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) && re.HTTPStatusCode() == 400 {
		var ae smithy.APIError
		if !errors.As(err, &ae) || (ae.ErrorCode() != "InvalidClientTokenId" && ae.ErrorCode() != "UnrecognizedClientException") {
			return nil
		}
	}
	return fmt.Errorf("cloudwatch health check (an empty GetMetricData) failed: %w", err)
}

// describe shortens an SDK error to its code and message when it is an API error.
func describe(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return fmt.Sprintf("%s: %s", ae.ErrorCode(), ae.ErrorMessage())
	}
	return err.Error()
}
