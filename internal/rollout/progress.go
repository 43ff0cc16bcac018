package rollout

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ProgressKind says what a progress line tells, so a log can filter on it.
type ProgressKind string

// The kinds of progress lines.
const (
	// ProgressPhase: a phase was recorded. Succeeded and Failed are the verdict.
	ProgressPhase ProgressKind = "phase"
	// ProgressVerdict: the run ended (the phase Succeeded or Failed).
	ProgressVerdict ProgressKind = "verdict"
	// ProgressWeight: the router took a new split.
	ProgressWeight ProgressKind = "weight"
	// ProgressCheck: one metric's value against its range, or a failed check.
	ProgressCheck ProgressKind = "check"
	// ProgressGate: a confirm-* gate opened.
	ProgressGate ProgressKind = "gate"
	// ProgressQuery: one Prometheus query and its value (a DEBUG line).
	ProgressQuery ProgressKind = "query"
	// ProgressNote: anything else the operator should read (recovery, a held step).
	ProgressNote ProgressKind = "note"
	// ProgressWarning: what the apply's warnings say too.
	ProgressWarning ProgressKind = "warning"
)

// Progress is one line of a run's progress, with the fields a structured log keeps.
type Progress struct {
	Kind      ProgressKind
	Namespace string
	Name      string
	// Phase and Weight are the release's phase and canary weight as the run knows them.
	Phase  Phase
	Weight int
	// Metric, Value and Range are set for a check of a metric (Value only when one was read),
	// Query for a query.
	Metric string
	Value  *float64
	Range  string
	Query  string
	// Message is the line itself, without the release's name.
	Message string
}

// Detail reports a line for DEBUG logs only: the terminal and INFO logs leave it out.
func (p Progress) Detail() bool { return p.Kind == ProgressQuery }

// Text is the line as a terminal shows it: the release, then the message.
func (p Progress) Text() string {
	return fmt.Sprintf("canary_release %s/%s: %s", p.Namespace, p.Name, p.Message)
}

func (e *Engine) report(p Progress) {
	if e.Progress != nil {
		e.Progress(p)
	}
}

// note reports a line about rel outside a run (the lock).
func (e *Engine) note(rel Release, format string, args ...any) {
	e.report(Progress{Kind: ProgressNote, Namespace: rel.Namespace, Name: rel.Name, Message: fmt.Sprintf(format, args...)})
}

// report fills in the release, its phase and its weight, and reports p.
func (r *run) report(p Progress) {
	p.Namespace, p.Name = r.rel.Namespace, r.rel.Name
	if p.Phase == "" {
		p.Phase = r.st.Phase
	}
	p.Weight = r.st.CanaryWeight
	r.e.report(p)
}

// noteLater is note for code that runs off the run's path (the notifications): it reports
// with the phase and the weight of now, and reads nothing of the run later.
func (r *run) noteLater() func(format string, args ...any) {
	e, p := r.e, Progress{Kind: ProgressNote, Namespace: r.rel.Namespace, Name: r.rel.Name, Phase: r.st.Phase, Weight: r.st.CanaryWeight}
	return func(format string, args ...any) {
		p.Message = fmt.Sprintf(format, args...)
		e.report(p)
	}
}

// note reports a line of kind ProgressNote.
func (r *run) note(format string, args ...any) {
	r.report(Progress{Kind: ProgressNote, Message: fmt.Sprintf(format, args...)})
}

// The state ConfigMap's live view: labels that `kubectl get -L … -w` shows, and an
// annotation with the last check's detail. They are a projection of the status, written with
// every save and, between phases, by showProgress. The operator's own annotations on the
// ConfigMap (other keys of canary-release.dev/) are left as they are.
const (
	LabelPhase     = "canary-release.dev/phase"
	LabelWeight    = "canary-release.dev/weight"
	LabelLastCheck = "canary-release.dev/last-check"
	// AnnotationLastCheck holds the last check in full: when, the verdict, each metric's
	// value against its range.
	AnnotationLastCheck = "canary-release.dev/last-check"
)

// liveViewWindow is the least time between two writes of the state ConfigMap made only to
// show progress: under a short analysis interval the view is as fresh as the Events
// (eventBatchWindow), and under a longer one each step is shown, since steps are one
// interval apart. Phase changes and failed checks are saved anyway and show at once.
const liveViewWindow = eventBatchWindow

// checkVerdict is the first word of Status.LastCheck, the value of LabelLastCheck.
func checkVerdict(lastCheck string) string {
	verdict, _, _ := strings.Cut(lastCheck, " ")
	return verdict
}

// liveLabels is the live view of st, as labels.
func liveLabels(st Status) map[string]string {
	labels := map[string]string{LabelPhase: string(st.Phase), LabelWeight: strconv.Itoa(st.CanaryWeight)}
	if v := checkVerdict(st.LastCheck); v != "" {
		labels[LabelLastCheck] = v
	}
	return labels
}

// liveViewText is the part of st the live view shows, to tell whether it changed.
func liveViewText(st Status) string {
	return fmt.Sprintf("%s %d %s", st.Phase, st.CanaryWeight, checkVerdict(st.LastCheck))
}

// checked records the outcome of one analysis interval in the status: its verdict word
// (passed, failed or held), its time and its detail.
func (r *run) checked(verdict, detail string) {
	r.st.LastCheck = fmt.Sprintf("%s at %s: %s", verdict, r.e.now().UTC().Format(time.RFC3339), detail)
}

// showProgress writes the state ConfigMap when the live view (phase, weight, last check's
// verdict) changed since it was last written, unless it was written less than liveViewWindow
// ago: then the next save, or the next showProgress after the window, shows it. It is best
// effort, like the Events: the run never fails for it.
func (r *run) showProgress(ctx context.Context) {
	if r.store.last == nil || liveViewText(r.st) == r.store.shown || r.e.now().Sub(r.store.savedAt) < liveViewWindow {
		return
	}
	if err := r.save(ctx); err != nil {
		r.note("the state ConfigMap's live view was not updated: %v", err)
	}
}
