package rollout

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
	"strings"
	"time"
	"unicode"

	"github.com/canary-release/terraform-provider-canary/internal/kube"
	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// MetricQuerier runs one PromQL query that must return a single number.
type MetricQuerier interface {
	Query(ctx context.Context, query string) (float64, error)
}

// CheckFailure is one failed analysis check, worded for the apply's error.
type CheckFailure struct {
	Check   string
	Value   float64
	Range   string
	Message string
}

func (f *CheckFailure) Error() string { return f.Message }

// analyzer runs the webhooks and metrics of one analysis interval.
type analyzer struct {
	rel     Release
	querier MetricQuerier
	http    *http.Client
}

// webhookPayload is Flagger's webhook body.
type webhookPayload struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Phase     Phase             `json:"phase"`
	Checksum  string            `json:"checksum"`
	Metadata  map[string]string `json:"metadata,omitempty"`
}

// runHooks calls every webhook of one type, stopping at the first failure.
func (a analyzer) runHooks(ctx context.Context, hookType string, phase Phase, checksum string) *CheckFailure {
	for _, h := range a.rel.Analysis.Webhooks {
		if hookType != h.Type {
			continue
		}
		if err := a.callHook(ctx, h, phase, checksum); err != nil {
			return &CheckFailure{Check: h.Name, Message: fmt.Sprintf("%s webhook %s failed: %v", h.Type, h.Name, err)}
		}
	}
	return nil
}

// defaultHookTimeout is a webhook's timeout when none is set, as in Flagger.
const defaultHookTimeout = 10 * time.Second

// callHook posts Flagger's payload; like Flagger, any status above 202 is a failure.
func (a analyzer) callHook(ctx context.Context, h Webhook, phase Phase, checksum string) error {
	body, err := json.Marshal(webhookPayload{Name: a.rel.Name, Namespace: a.rel.Namespace, Phase: phase, Checksum: checksum, Metadata: h.Metadata})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, hookTimeout(h))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		// net/http's errors quote the whole URL, and incoming-webhook URLs carry their token
		// in the path or the query: name only the endpoint.
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			return fmt.Errorf("%s %s: %w", urlErr.Op, endpoint(h.URL), urlErr.Err)
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode > http.StatusAccepted {
		text, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("status %d%s", resp.StatusCode, bodyExcerpt(text, h.URL))
	}
	return nil
}

// endpoint is a URL without what may be secret: user information, path and query.
func endpoint(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "the webhook URL"
	}
	return u.Scheme + "://" + u.Host
}

// maxBodyExcerpt bounds what of a webhook's answer reaches a message, the status and the
// Terraform state.
const maxBodyExcerpt = 240

// bodyExcerpt is a short, single-line excerpt of a failed webhook's answer, for the message
// that explains the failure. Control characters go, and so does the webhook's own URL, which
// some services echo back.
func bodyExcerpt(body []byte, hookURL string) string {
	text := string(body)
	if message := kube.StatusMessage(body); message != "" {
		// The API server's service proxy refused the call (RBAC, no endpoints): its own
		// message names the missing permission, and is worth more than the JSON around it.
		text = "the API server answered: " + message
	}
	if u, err := url.Parse(hookURL); err == nil && len(u.Path) > 1 {
		text = strings.ReplaceAll(text, u.Path, "/…")
		if u.RawQuery != "" {
			text = strings.ReplaceAll(text, u.RawQuery, "…")
		}
	}
	text = strings.Join(strings.FieldsFunc(text, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	if text == "" {
		return ""
	}
	if runes := []rune(text); len(runes) > maxBodyExcerpt {
		text = string(runes[:maxBodyExcerpt]) + "…"
	}
	return ": " + text
}

// defaultMaxQueryErrors is analysis.max_query_errors when unset.
const defaultMaxQueryErrors = 3

// verdict is one analysis interval's outcome: passed (all zero), a failed check, an
// inconclusive interval (a query error), or metrics that stayed unavailable too long.
type verdict struct {
	failure     *CheckFailure
	halted      string
	unavailable error
}

// interval runs the rollout webhooks and then the metrics of one analysis interval.
// queryErrors counts each metric's consecutive query errors across intervals.
func (a analyzer) interval(ctx context.Context, checksum string, queryErrors map[string]int) verdict {
	if f := a.runHooks(ctx, HookRollout, PhaseProgressing, checksum); f != nil {
		return verdict{failure: f}
	}
	limit := a.rel.Analysis.MaxQueryErrors
	if limit <= 0 {
		limit = defaultMaxQueryErrors
	}
	// Like Flagger, the first failing metric decides the interval.
	for _, m := range a.rel.Analysis.Metrics {
		f, qerr := a.runMetric(ctx, m)
		if qerr != nil {
			if ctx.Err() != nil {
				return verdict{halted: qerr.Error()}
			}
			queryErrors[m.Name]++
			n := queryErrors[m.Name]
			if n >= limit {
				return verdict{unavailable: fmt.Errorf("metrics unavailable: metric %s had %d consecutive query errors (analysis.max_query_errors = %d), last: %v", m.Name, n, limit, qerr)}
			}
			return verdict{halted: fmt.Sprintf("metric %s: query error %d of %d allowed in a row, the step is held: %v", m.Name, n, limit, qerr)}
		}
		queryErrors[m.Name] = 0
		if f != nil {
			return verdict{failure: f}
		}
	}
	return verdict{}
}

// probe checks, before the first shift, that Prometheus answers, so an unreachable one fails
// the run before any traffic moves.
func (a analyzer) probe(ctx context.Context) error {
	if len(a.rel.Analysis.Metrics) == 0 {
		return nil
	}
	if a.querier == nil {
		return fmt.Errorf("metrics unavailable: no Prometheus address is configured (set prometheus.address in the provider or CANARY_PROMETHEUS_ADDRESS)")
	}
	p, ok := a.querier.(interface{ Ping(context.Context) error })
	if !ok {
		return nil
	}
	if err := p.Ping(ctx); err != nil {
		return fmt.Errorf("metrics unavailable before the first traffic shift: %w", err)
	}
	return nil
}

// runMetric evaluates one metric: a failed check, a query error (which says nothing about
// the canary), or neither.
func (a analyzer) runMetric(ctx context.Context, m Metric) (*CheckFailure, error) {
	fail := func(format string, args ...any) *CheckFailure {
		return &CheckFailure{Check: m.Name, Range: rangeText(m), Message: fmt.Sprintf(format, args...)}
	}
	query := m.Query
	if query == "" {
		builtin, ok := metrics.Builtin(a.rel.Provider, m.Name)
		if !ok {
			return fail("metric %s has no query and is not a built-in %s metric", m.Name, a.rel.Provider), nil
		}
		query = builtin
	}
	interval := m.Interval
	if interval == "" {
		interval = "1m"
	}
	rendered, err := metrics.Render(query, metrics.Vars{
		Name: a.rel.Name, Namespace: a.rel.Namespace, Target: a.rel.Target, Service: a.rel.Apex(),
		Ingress: a.rel.Target, Route: a.routeName(), Interval: interval,
	})
	if err != nil {
		return nil, fmt.Errorf("rendering its query: %w", err)
	}
	if a.querier == nil {
		return nil, errors.New("no Prometheus address is configured (set prometheus.address in the provider or CANARY_PROMETHEUS_ADDRESS)")
	}
	value, err := a.querier.Query(ctx, rendered)
	switch {
	case errors.Is(err, metrics.ErrNoValues), err == nil && math.IsNaN(value):
		return fail("no values found for %s metric %s: is the canary receiving traffic?", a.rel.Provider, m.Name), nil
	case errors.Is(err, metrics.ErrNotFinite), err == nil && math.IsInf(value, 0):
		return fail("metric %s returned an infinite value, outside threshold_range %s", m.Name, rangeText(m)), nil
	case err != nil:
		return nil, err
	}
	if (m.Min != nil && value < *m.Min) || (m.Max != nil && value > *m.Max) {
		f := fail("metric %s returned %.2f, outside threshold_range %s", m.Name, value, rangeText(m))
		f.Value = value
		return f, nil
	}
	return nil, nil
}

func (a analyzer) routeName() string {
	if a.rel.RouteName != "" {
		return a.rel.RouteName
	}
	return a.rel.Target
}

func rangeText(m Metric) string {
	var parts []string
	if m.Min != nil {
		parts = append(parts, fmt.Sprintf("min %g", *m.Min))
	}
	if m.Max != nil {
		parts = append(parts, fmt.Sprintf("max %g", *m.Max))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
