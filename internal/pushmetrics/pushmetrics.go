// Package pushmetrics pushes a release's progress to a Prometheus Pushgateway as
// Flagger's series, so that dashboards and alerts written for Flagger read a release too.
//
// A release has no process that lives between applies for Prometheus to scrape, so each run
// pushes its series instead, under the grouping key {job, namespace, name}; the last run's
// values stay in the Pushgateway until the next. Pushing is best effort: it never blocks the
// run (a goroutine pushes the latest values) and never fails it.
//
// The series (labels besides the grouping key's):
//
//	flagger_canary_status{name, namespace}              0 running, 1 succeeded or initialised, 2 failed
//	flagger_canary_weight{workload, namespace}          the canary's (target) and the primary's (target-primary) weight
//	flagger_canary_metric_analysis{name, namespace, metric}  the last value of each analysis metric
//	flagger_canary_duration_seconds{name, namespace}    histogram: the seconds from a run's start to its verdict
//	canary_release_phase{name, namespace, phase}        1 for the current phase (this provider's own, finer than status)
//
// Only these values leave the provider: no setting, header or credential is a label. Destroy
// deletes the group (Delete).
package pushmetrics

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// DefaultJob is the job label of the grouping key when the configuration names none.
const DefaultJob = "canary_release"

// pushTimeout bounds one push, so that a Pushgateway that does not answer costs a run nothing
// but a stale dashboard.
const pushTimeout = 5 * time.Second

// Config is where and how to push.
type Config struct {
	// URL is the Pushgateway's base URL (http://host:9091).
	URL string
	// Job is the job label of the grouping key; empty means DefaultJob.
	Job string
	// Username and Password are sent as basic authentication when Username is set.
	Username, Password string
	// Headers are added to each push (a bearer token, a tenant).
	Headers map[string]string
	// Client sends the pushes; nil means http.DefaultClient.
	Client *http.Client
}

// Statuses of flagger_canary_status, as Flagger sets them.
const (
	StatusRunning   = 0
	StatusSucceeded = 1
	StatusFailed    = 2
)

// Status is flagger_canary_status for a phase: Failed and the rollback leading to it are 2,
// the phases of a run still under way are 0, and the resting phases (Initialized, Succeeded)
// are 1.
func Status(phase rollout.Phase) float64 {
	switch phase {
	case rollout.PhaseFailed, rollout.PhaseRollingBack:
		return StatusFailed
	case rollout.PhaseInitialized, rollout.PhaseSucceeded:
		return StatusSucceeded
	default:
		return StatusRunning
	}
}

// Release collects one run's series and pushes them.
type Release struct {
	cfg                       Config
	namespace, name, workload string
	start                     time.Time

	registry *prometheus.Registry
	status   prometheus.Gauge
	weight   *prometheus.GaugeVec
	metric   *prometheus.GaugeVec
	phase    *prometheus.GaugeVec
	duration prometheus.Histogram

	mu        sync.Mutex
	lastPhase rollout.Phase
	// pending is signalled when values changed since the last push.
	pending chan struct{}
	// pushed is closed and replaced after each push attempt, for Flush.
	pushed  chan struct{}
	dirty   bool
	started bool
	// lastErr is the last push's error, reported once per change of error.
	lastErr string
	// OnError, when set, is told of a failed push (once until a push succeeds again).
	OnError func(error)
}

// NewRelease prepares the series of the release namespace/name whose target (Flagger's
// workload) is target.
func NewRelease(cfg Config, namespace, name, target string, now time.Time) *Release {
	if cfg.Job == "" {
		cfg.Job = DefaultJob
	}
	r := &Release{cfg: cfg, namespace: namespace, name: name, workload: target, start: now,
		registry: prometheus.NewRegistry(), pending: make(chan struct{}, 1), pushed: make(chan struct{})}
	r.status = prometheus.NewGauge(prometheus.GaugeOpts{Name: "flagger_canary_status",
		Help: "Last known status of the release: 0 running, 1 succeeded, 2 failed."})
	r.weight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flagger_canary_weight",
		Help: "Traffic weight of the canary (workload=target) and the primary (workload=target-primary)."}, []string{"workload"})
	r.metric = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flagger_canary_metric_analysis",
		Help: "Last value of each analysis metric."}, []string{"metric"})
	r.phase = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "canary_release_phase",
		Help: "1 for the release's current phase."}, []string{"phase"})
	r.duration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flagger_canary_duration_seconds",
		Help:    "Seconds from a run's start to its verdict.",
		Buckets: []float64{5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200}})
	r.registry.MustRegister(r.status, r.weight, r.metric, r.phase, r.duration)
	return r
}

// Observe records what a progress line tells and schedules a push; the verdict also records
// the run's duration. It returns at once.
func (r *Release) Observe(ctx context.Context, p rollout.Progress, now time.Time) {
	changed := false
	r.mu.Lock()
	if p.Phase != "" {
		if p.Phase != r.lastPhase {
			r.phase.Reset()
			r.lastPhase = p.Phase
		}
		r.phase.WithLabelValues(string(p.Phase)).Set(1)
		r.status.Set(Status(p.Phase))
		r.weight.WithLabelValues(r.workload).Set(float64(p.Weight))
		r.weight.WithLabelValues(r.workload + "-primary").Set(float64(100 - p.Weight))
		changed = true
	}
	if p.Kind == rollout.ProgressCheck && p.Metric != "" && p.Value != nil {
		r.metric.WithLabelValues(p.Metric).Set(*p.Value)
		changed = true
	}
	if p.Kind == rollout.ProgressVerdict {
		r.duration.Observe(now.Sub(r.start).Seconds())
		changed = true
	}
	if changed {
		r.dirty = true
		if !r.started {
			r.started = true
			go r.loop(ctx)
		}
	}
	r.mu.Unlock()
	if changed {
		select {
		case r.pending <- struct{}{}:
		default:
		}
	}
}

// Flush waits until the values observed so far were pushed (or failed to be), or ctx ends.
func (r *Release) Flush(ctx context.Context) {
	for {
		r.mu.Lock()
		if !r.dirty || !r.started {
			r.mu.Unlock()
			return
		}
		pushed := r.pushed
		r.mu.Unlock()
		select {
		case <-pushed:
		case <-ctx.Done():
			return
		}
	}
}

// loop pushes the latest values each time they change, until ctx ends (the apply's call
// returned).
func (r *Release) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			// The call that ran the release returned: the values it left unpushed (its
			// verdict, mostly) go in one last push while the provider process lives.
			r.mu.Lock()
			dirty := r.dirty
			r.mu.Unlock()
			if dirty {
				_ = r.push(context.WithoutCancel(ctx))
			}
			return
		case <-r.pending:
		}
		r.mu.Lock()
		r.dirty = false
		r.mu.Unlock()
		err := r.push(ctx)
		r.mu.Lock()
		close(r.pushed)
		r.pushed = make(chan struct{})
		report := r.OnError
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		repeat := msg == r.lastErr
		r.lastErr = msg
		r.mu.Unlock()
		if err != nil && !repeat && report != nil {
			report(err)
		}
	}
}

// push replaces the release's group in the Pushgateway with the current values (PUT), so a
// metric the configuration no longer has leaves with the next run.
func (r *Release) push(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	client := r.cfg.Client
	if client == nil {
		client = http.DefaultClient
	}
	pusher := push.New(r.cfg.URL, r.cfg.Job).Gatherer(r.registry).
		Grouping("namespace", r.namespace).Grouping("name", r.name).
		Client(headerClient{client: client, headers: r.cfg.Headers})
	if r.cfg.Username != "" {
		pusher = pusher.BasicAuth(r.cfg.Username, r.cfg.Password)
	}
	if err := pusher.PushContext(ctx); err != nil {
		return &PushError{URL: r.cfg.URL, Err: err}
	}
	return nil
}

// PushError is a failed push; its text names the Pushgateway, not the credentials.
type PushError struct {
	URL string
	Err error
}

func (e *PushError) Error() string {
	return "pushing the release's series to the Pushgateway at " + redacted(e.URL) + ": " + e.Err.Error()
}

func (e *PushError) Unwrap() error { return e.Err }

// redacted is a URL without the password it may carry.
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}

// Delete removes the release's group from the Pushgateway, when the release is destroyed,
// so that dashboards stop showing it. Bounded like a push.
func Delete(ctx context.Context, cfg Config, namespace, name string) error {
	if cfg.Job == "" {
		cfg.Job = DefaultJob
	}
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	client := cfg.Client
	if client == nil {
		client = http.DefaultClient
	}
	pusher := push.New(cfg.URL, cfg.Job).Grouping("namespace", namespace).Grouping("name", name).
		Client(headerClient{client: client, headers: cfg.Headers, ctx: ctx})
	if cfg.Username != "" {
		pusher = pusher.BasicAuth(cfg.Username, cfg.Password)
	}
	if err := pusher.Delete(); err != nil {
		return &PushError{URL: cfg.URL, Err: err}
	}
	return nil
}

// headerClient adds the configured headers to each push, and ctx, when set, to a request
// made without one (push's Delete).
type headerClient struct {
	client  *http.Client
	headers map[string]string
	ctx     context.Context
}

func (c headerClient) Do(req *http.Request) (*http.Response, error) {
	if c.ctx != nil {
		req = req.WithContext(c.ctx)
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	return c.client.Do(req)
}
