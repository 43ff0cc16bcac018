package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Where each release's time goes in a many-release apply (issue 35, "attribute every
// second"). Nothing is timed inside the engine: the moments come from what the apply shows
// anyway, namely
//   - Terraform's core log at INFO ("Starting apply for canary_release.podinfo[i]"),
//   - the provider's progress lines at INFO (phase, weight, check and verdict lines, with the
//     provider's own timestamps),
//   - the release's Lease (its acquireTime, written by the engine as it takes the lock),
//   - the Deployments and TrafficSplits as the bench's watches see them change,
// and the spans between consecutive moments are put in one category each. The categories
// add up to the apply's wall time for every release; what no moment explains is "other".

// waitCategory is one kind of wait in a release's apply.
type waitCategory string

// The categories, in the order they stack.
const (
	waitPlan       waitCategory = "plan"       // apply start -> Terraform's plan done (refresh, plan, provider starts)
	waitTerraform  waitCategory = "terraform"  // plan done -> Terraform starts this resource's apply (the graph walk, -parallelism)
	waitLock       waitCategory = "lock"       // -> the release's Lease acquired
	waitProvider   waitCategory = "provider"   // the engine's own steps: records, the canary's and the primary's writes
	waitNotice     waitCategory = "notice"     // a side Ready -> the engine acts on it (its watch, the metrics probe, gates)
	waitController waitCategory = "controller" // a Deployment written -> its controller observed the generation
	waitPods       waitCategory = "pods"       // observed -> Ready (ReplicaSet, scheduler, kwok, status)
	waitRouter     waitCategory = "router"     // router write seen -> weight line (read-back), and the per-step confirm read-back
	waitMetric     waitCategory = "metric"     // past the interval until the step's last check line (queries, waiting for data)
	waitDrain      waitCategory = "drain"      // weight 0 -> verdict (the drain, the canary's scale-down, the last record)
	waitAnalysis   waitCategory = "analysis"   // the analysis intervals themselves
	waitAfter      waitCategory = "after"      // verdict -> terraform exit (other releases, state)
	waitOther      waitCategory = "other"      // what no observed moment explains
)

var waitCategories = []waitCategory{waitPlan, waitTerraform, waitLock, waitProvider, waitController, waitPods, waitNotice, waitRouter, waitMetric, waitDrain, waitAnalysis, waitAfter, waitOther}

// waitNotes explain the categories in the report.
var waitNotes = map[waitCategory]string{
	waitPlan:       "apply start -> Terraform's plan done (\"apply calling Apply\": refresh, plan, provider starts)",
	waitTerraform:  "plan done -> Terraform starts the resource's apply (graph walk, -parallelism queue)",
	waitLock:       "-> the release's Lease acquireTime (request set-up, the Lease's API round trips)",
	waitProvider:   "the engine's own steps: Lease -> canary scaled, Promoting -> primary written",
	waitNotice:     "canary Ready -> first router write, primary Ready -> Finalising line (the engine's watch, the metrics probe, gates)",
	waitController: "a Deployment written -> status.observedGeneration caught up (kube-controller-manager)",
	waitPods:       "observed -> Deployment Ready (ReplicaSet, scheduler, kwok, status)",
	waitRouter:     "router write seen -> weight line; last check -> next weight line (confirm read-back, next write)",
	waitMetric:     "beyond the interval until the step's last check line (queries, waiting for data)",
	waitDrain:      "weight 0 line -> verdict line (drain, canary scale-down, last record)",
	waitAnalysis:   "weight line -> end of the step's interval (at most the interval; the interval starts before the router's write, so a slow write shows as router)",
	waitAfter:      "verdict -> terraform exit (waiting for the other releases, state)",
	waitOther:      "apply wall time not explained by an observed moment",
}

// releaseBreakdown is one release's apply, by category; the total is the apply's wall time.
type releaseBreakdown struct {
	namespace string
	total     time.Duration
	by        map[waitCategory]time.Duration
	missing   []string // moments not observed (their spans went to "other")
}

// moments are what the bench saw of one release during one apply. Zero means not seen.
type moments struct {
	// Terraform's core log: its plan done (one moment for every release), and the start of
	// this resource instance's apply.
	planDone   time.Time
	startApply time.Time
	lock       time.Time // the Lease's acquireTime
	// The provider's progress lines.
	progressing, promoting, finalising, verdict time.Time
	weights                                     []timedWeight // weight lines, in order
	checks                                      []time.Time   // check lines, in order
	// The watches.
	canary, primary deploymentMoments
	splits          []timedWeight // TrafficSplit canary weights as they changed
}

type timedWeight struct {
	at     time.Time
	weight int
}

// deploymentMoments: written (the new image with replicas, or the new image on the
// primary), observed by its controller, Ready.
type deploymentMoments struct{ written, observed, ready time.Time }

// breakdown attributes the span from start to end (the apply) of one release.
func (m moments) breakdown(ns string, start, end time.Time, interval time.Duration) releaseBreakdown {
	b := releaseBreakdown{namespace: ns, total: end.Sub(start), by: map[waitCategory]time.Duration{}}
	add := func(c waitCategory, from, to time.Time, what string) {
		if from.IsZero() || to.IsZero() {
			b.missing = append(b.missing, what)
			return
		}
		if d := to.Sub(from); d > 0 {
			b.by[c] += d
		}
	}
	add(waitPlan, start, m.planDone, "apply calling Apply")
	add(waitTerraform, m.planDone, m.startApply, "Starting apply")
	add(waitLock, m.startApply, m.lock, "Lease acquireTime")
	add(waitProvider, m.lock, m.canary.written, "canary scaled")
	add(waitController, m.canary.written, m.canary.observed, "canary observed")
	add(waitPods, m.canary.observed, m.canary.ready, "canary Ready")
	firstWrite := m.firstSplitAbove(0)
	add(waitNotice, m.canary.ready, firstWrite, "first router write")
	// Each step: its weight line, the interval, its last check, then the next write.
	for k, w := range m.weights {
		if w.weight == 0 {
			continue
		}
		if k == 0 {
			add(waitRouter, firstWrite, w.at, "first weight line")
		}
		stepEnd := m.promoting
		if k+1 < len(m.weights) && m.weights[k+1].weight > 0 {
			stepEnd = m.weights[k+1].at
		}
		last := m.lastCheckBefore(w.at, stepEnd)
		if last.IsZero() {
			b.missing = append(b.missing, fmt.Sprintf("checks at %d%%", w.weight))
			continue
		}
		span := last.Sub(w.at)
		b.by[waitAnalysis] += min(interval, span)
		b.by[waitMetric] += max(0, span-interval)
		add(waitRouter, last, stepEnd, fmt.Sprintf("end of the step at %d%%", w.weight))
	}
	add(waitProvider, m.promoting, m.primary.written, "primary written")
	add(waitController, m.primary.written, m.primary.observed, "primary observed")
	add(waitPods, m.primary.observed, m.primary.ready, "primary Ready")
	add(waitNotice, m.primary.ready, m.finalising, "Finalising line")
	zero := m.weightLine(0, m.finalising)
	add(waitRouter, m.finalising, zero, "weight 0 line")
	add(waitDrain, zero, m.verdict, "drain (weight 0 line and verdict)")
	add(waitAfter, m.verdict, end, "verdict line")
	var sum time.Duration
	for _, d := range b.by {
		sum += d
	}
	b.by[waitOther] = b.total - sum
	return b
}

// firstSplitAbove is when the watch first saw the canary weight above w.
func (m moments) firstSplitAbove(w int) time.Time {
	for _, s := range m.splits {
		if s.weight > w {
			return s.at
		}
	}
	return time.Time{}
}

// lastCheckBefore is the last check line in [from, to); with to zero, the last after from.
func (m moments) lastCheckBefore(from, to time.Time) time.Time {
	var last time.Time
	for _, c := range m.checks {
		if !c.Before(from) && (to.IsZero() || c.Before(to)) {
			last = c
		}
	}
	return last
}

// weightLine is the first weight line of w at or after since.
func (m moments) weightLine(w int, since time.Time) time.Time {
	if since.IsZero() {
		return time.Time{}
	}
	for _, l := range m.weights {
		if l.weight == w && !l.at.Before(since) {
			return l.at
		}
	}
	return time.Time{}
}

// tfLogLine matches a line of TF_LOG_PATH: its time, level and text.
var tfLogLine = regexp.MustCompile(`^(\d{4}-\d\d-\d\dT[\d:.]+Z) \[([A-Z]+)\]\s+(.*)$`)

// planDoneLine is Terraform core's line as the plan of `terraform apply` is done and its apply
// begins.
const planDoneLine = "backend/local: apply calling Apply"

// startingApply is Terraform core's line as it starts one resource instance's apply.
// A resource without count has no index: it is release 0.
var startingApply = regexp.MustCompile(`^Starting apply for canary_release\.[A-Za-z0-9_-]+(?:\[(\d+)\])?`)

// logField reads key=value from a provider log line (values with spaces are quoted).
func logField(text, key string) string {
	i := strings.Index(text, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := text[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		if s, err := strconv.QuotedPrefix(v); err == nil {
			u, _ := strconv.Unquote(s)
			return u
		}
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}

// parseApplyLog reads the moments Terraform's core log and the provider's progress lines tell
// of each release, keyed by namespace; namespaceOf maps a resource index to its namespace.
// Every release's planDone is the one moment the plan ended.
func parseApplyLog(path string, namespaceOf func(int) string, into map[string]*moments) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var planEnd time.Time
	defer func() {
		for _, m := range into {
			m.planDone = planEnd
		}
	}()
	get := func(ns string) *moments {
		m := into[ns]
		if m == nil {
			m = &moments{}
			into[ns] = m
		}
		return m
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		g := tfLogLine.FindStringSubmatch(sc.Text())
		if g == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, g[1])
		if err != nil {
			continue
		}
		text := g[3]
		if strings.HasPrefix(text, planDoneLine) && planEnd.IsZero() {
			planEnd = at
			continue
		}
		if s := startingApply.FindStringSubmatch(text); s != nil {
			i, _ := strconv.Atoi(s[1])
			if m := get(namespaceOf(i)); m.startApply.IsZero() {
				m.startApply = at
			}
			continue
		}
		if !strings.Contains(text, "@module=canary.rollout") {
			continue
		}
		ns := logField(text, "namespace")
		if ns == "" {
			continue
		}
		// The provider's own time of the line, when it gives one (Terraform's is when it
		// received the line).
		if ts, err := time.Parse(time.RFC3339Nano, logField(text, "timestamp")); err == nil {
			at = ts
		}
		m := get(ns)
		phase := logField(text, "phase")
		switch logField(text, "kind") {
		case "phase":
			switch {
			case phase == "Progressing" && m.progressing.IsZero():
				m.progressing = at
			case phase == "Promoting" && m.promoting.IsZero():
				m.promoting = at
			case phase == "Finalising" && m.finalising.IsZero():
				m.finalising = at
			}
		case "verdict":
			if m.verdict.IsZero() {
				m.verdict = at
			}
		case "weight":
			w, err := strconv.Atoi(logField(text, "weight"))
			if err == nil {
				m.weights = append(m.weights, timedWeight{at: at, weight: w})
			}
		case "check":
			m.checks = append(m.checks, at)
		}
	}
	return sc.Err()
}

// applyWatch sees the Deployments, TrafficSplits and Leases of the releases' namespaces
// change, through one cluster-wide informer each (hundreds of namespaces), from the moment it
// starts. It knows the target's name and the new image it waits for.
type applyWatch struct {
	mu      sync.Mutex
	watched map[string]bool // the releases' namespaces
	target  string
	image   string
	byNS    map[string]*moments
	stop    context.CancelFunc
	// start is when the watch began: a Lease acquired before it belongs to an earlier apply.
	start time.Time
}

func watchApply(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, namespaces []string, target, image string) (*applyWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	watched := map[string]bool{}
	for _, ns := range namespaces {
		watched[ns] = true
	}
	w := &applyWatch{watched: watched, target: target, image: image, byNS: map[string]*moments{}, stop: cancel, start: time.Now()}
	typed := informers.NewSharedInformerFactory(kube, 0)
	deps := typed.Apps().V1().Deployments().Informer()
	leases := typed.Coordination().V1().Leases().Informer()
	splits := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	splitInf := splits.ForResource(router.TrafficSplitResource).Informer()
	handlers := []struct {
		inf cache.SharedIndexInformer
		on  func(any)
	}{
		{deps, func(obj any) {
			if d, ok := obj.(*appsv1.Deployment); ok {
				w.deployment(time.Now(), d)
			}
		}},
		{leases, func(obj any) {
			if l, ok := obj.(*coordinationv1.Lease); ok {
				w.lease(l)
			}
		}},
		{splitInf, func(obj any) {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				w.split(time.Now(), u)
			}
		}},
	}
	for _, h := range handlers {
		on := h.on
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, obj any) { on(obj) }}); err != nil {
			cancel()
			return nil, err
		}
	}
	typed.Start(ctx.Done())
	splits.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), deps.HasSynced, leases.HasSynced, splitInf.HasSynced) {
		cancel()
		return nil, fmt.Errorf("watching the apply: informers did not sync")
	}
	return w, nil
}

func (w *applyWatch) get(ns string) *moments {
	m := w.byNS[ns]
	if m == nil {
		m = &moments{}
		w.byNS[ns] = m
	}
	return m
}

func (w *applyWatch) deployment(at time.Time, d *appsv1.Deployment) {
	if !w.watched[d.Namespace] {
		return
	}
	o := observeDeployment(at, d)
	observed := d.Status.ObservedGeneration >= d.Generation
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.get(d.Namespace)
	var dm *deploymentMoments
	switch d.Name {
	case w.target:
		dm = &m.canary
		if o.image != w.image || o.replicas == 0 {
			return
		}
	case w.target + "-primary":
		dm = &m.primary
		if o.image != w.image {
			return
		}
	default:
		return
	}
	if dm.written.IsZero() {
		dm.written = at
	}
	if dm.observed.IsZero() && observed {
		dm.observed = at
	}
	if dm.ready.IsZero() && o.ready {
		dm.ready = at
	}
}

func (w *applyWatch) lease(l *coordinationv1.Lease) {
	if !w.watched[l.Namespace] || l.Spec.AcquireTime == nil || l.Spec.AcquireTime.Time.Before(w.start) ||
		l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := w.get(l.Namespace); m.lock.IsZero() || l.Spec.AcquireTime.Time.Before(m.lock) {
		m.lock = l.Spec.AcquireTime.Time
	}
}

func (w *applyWatch) split(at time.Time, u *unstructured.Unstructured) {
	if !w.watched[u.GetNamespace()] || u.GetName() != w.target {
		return
	}
	o := observeSplit(at, u, w.target+"-canary")
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.get(u.GetNamespace())
	if n := len(m.splits); n > 0 && m.splits[n-1].weight == o.canaryWeight {
		return
	}
	m.splits = append(m.splits, timedWeight{at: at, weight: o.canaryWeight})
}

// done stops the watches and returns what they saw, by namespace.
func (w *applyWatch) done() map[string]*moments {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]*moments{}
	for ns, m := range w.byNS {
		c := *m
		c.splits = slices.Clone(m.splits)
		out[ns] = &c
	}
	return out
}

// breakdownOf merges the watches' moments with the log's and attributes each release's apply.
func breakdownOf(watched, logged map[string]*moments, namespaces []string, start, end time.Time, interval time.Duration) []releaseBreakdown {
	out := make([]releaseBreakdown, 0, len(namespaces))
	for _, ns := range namespaces {
		var m moments
		if w := watched[ns]; w != nil {
			m.lock, m.canary, m.primary, m.splits = w.lock, w.canary, w.primary, w.splits
		}
		if l := logged[ns]; l != nil {
			m.planDone, m.startApply, m.progressing, m.promoting, m.finalising, m.verdict = l.planDone, l.startApply, l.progressing, l.promoting, l.finalising, l.verdict
			m.weights, m.checks = l.weights, l.checks
		}
		out = append(out, m.breakdown(ns, start, end, interval))
	}
	return out
}

// breakdownSummary is a category's seconds over the releases of one or more applies.
type breakdownSummary struct {
	category           waitCategory
	median, mean, high float64
	share              float64 // of the mean total, percent
}

func summarise(bs []releaseBreakdown) []breakdownSummary {
	var totals []float64
	for _, b := range bs {
		totals = append(totals, b.total.Seconds())
	}
	meanTotal := mean(totals)
	var out []breakdownSummary
	for _, c := range waitCategories {
		var xs []float64
		for _, b := range bs {
			xs = append(xs, b.by[c].Seconds())
		}
		_, hi := spread(xs)
		out = append(out, breakdownSummary{category: c, median: median(xs), mean: mean(xs), high: hi, share: 100 * mean(xs) / meanTotal})
	}
	return out
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// breakdownTable renders the summary: a row per category, then the total.
func breakdownTable(bs []releaseBreakdown) string {
	lines := [][]string{{"wait", "median_s", "mean_s", "max_s", "of mean total", "what"}}
	for _, s := range summarise(bs) {
		lines = append(lines, []string{string(s.category), formatNumber(s.median), formatNumber(s.mean), formatNumber(s.high),
			formatNumber(s.share) + "%", waitNotes[s.category]})
	}
	var totals []float64
	missing := 0
	for _, b := range bs {
		totals = append(totals, b.total.Seconds())
		if len(b.missing) > 0 {
			missing++
		}
	}
	_, hi := spread(totals)
	lines = append(lines, []string{"total", formatNumber(median(totals)), formatNumber(mean(totals)), formatNumber(hi), "100%", "apply start -> terraform exit"})
	out := alignColumns(lines)
	if missing > 0 {
		out += fmt.Sprintf("%d of %d releases had moments not observed (their spans are in \"other\"); first: %s: %s\n",
			missing, len(bs), firstMissing(bs).namespace, strings.Join(firstMissing(bs).missing, ", "))
	}
	return out
}

func firstMissing(bs []releaseBreakdown) releaseBreakdown {
	for _, b := range bs {
		if len(b.missing) > 0 {
			return b
		}
	}
	return releaseBreakdown{}
}
