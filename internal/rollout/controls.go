package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Built-in controls. An operator steers a run without a gate service by annotating the
// release's state ConfigMap (kubectl annotate configmap <name>-canary-release ...). The run
// follows the ConfigMap on one watch (no request per interval) and reads the annotations at
// every check; each change is logged with the field manager that made it and when.
const (
	// ControlPrefix is the prefix of every control annotation.
	ControlPrefix = "canary-release.dev/"
	// ControlPause=true holds the run before its next weight change and before the promotion;
	// the checks go on meanwhile. Removing it (or false) resumes. It outlives a run.
	ControlPause = ControlPrefix + "pause"
	// ControlAbort=true rolls the run back at its next check.
	ControlAbort = ControlPrefix + "abort"
	// ControlPromoteNow=true promotes the canary at its next check, skipping the remaining
	// steps and gates, while every check so far has passed; it is refused after a failed one.
	ControlPromoteNow = ControlPrefix + "promote-now"
	// approvedValue opens a built-in gate: canary-release.dev/<gate type>=approved.
	approvedValue = "approved"
	// pauseCheck names the pause where a gate's name would be.
	pauseCheck = "pause"
)

// builtInGates are the webhook types that a webhook without url turns into a built-in gate.
var builtInGates = []string{HookConfirmRollout, HookConfirmTrafficIncrease, HookConfirmPromotion}

// ApprovalKey is the annotation that opens the built-in gates of a gate type.
func ApprovalKey(gateType string) string { return ControlPrefix + gateType }

// IsBuiltInGate reports whether a webhook type may be a built-in gate (a webhook without url).
func IsBuiltInGate(hookType string) bool {
	for _, g := range builtInGates {
		if g == hookType {
			return true
		}
	}
	return false
}

// oneShotControls are the controls that act on the run they were set for: set before a
// revision's run starts, they are removed (and logged) by its first record.
func oneShotControls() []string {
	keys := []string{ControlAbort, ControlPromoteNow}
	for _, g := range builtInGates {
		keys = append(keys, ApprovalKey(g))
	}
	return keys
}

// managerName names a field manager for messages.
func managerName(m string) string {
	if m == "" {
		return "an unknown field manager"
	}
	return m
}

// control is one control annotation and who set it, when.
type control struct {
	Key, Value string
	// Manager is the field manager that last wrote the annotation (kubectl-annotate for
	// kubectl annotate); At is when that manager last changed the ConfigMap.
	Manager string
	At      time.Time
}

// by says who set the control and when, for logs, Events and messages.
func (c control) by() string {
	who := managerName(c.Manager)
	if c.At.IsZero() {
		return fmt.Sprintf("%s=%s (set by %s)", c.Key, c.Value, who)
	}
	return fmt.Sprintf("%s=%s (set by %s at %s)", c.Key, c.Value, who, c.At.UTC().Format(time.RFC3339))
}

// controlSet is the control annotations of the state ConfigMap, by key.
type controlSet map[string]control

// on reports a control set to want (true for the toggles, approved for the gates).
func (s controlSet) on(key, want string) (control, bool) {
	c, ok := s[key]
	return c, ok && strings.EqualFold(strings.TrimSpace(c.Value), want)
}

// controlsOf reads the control annotations of cm, each with the manager that last wrote it.
func controlsOf(cm *corev1.ConfigMap) controlSet {
	set := controlSet{}
	if cm == nil {
		return set
	}
	for key, value := range cm.Annotations {
		if strings.HasPrefix(key, ControlPrefix) && knownControl(key) {
			manager, at := changedBy(cm, key)
			set[key] = control{Key: key, Value: value, Manager: manager, At: at}
		}
	}
	return set
}

func knownControl(key string) bool {
	if key == ControlPause {
		return true
	}
	for _, k := range oneShotControls() {
		if k == key {
			return true
		}
	}
	return false
}

// changedBy finds, in the ConfigMap's managedFields, the manager that owns the annotation and
// the time of its last change. The API server keeps one entry per manager and operation; the
// latest entry owning the field wins.
func changedBy(cm *corev1.ConfigMap, key string) (string, time.Time) {
	var manager string
	var at time.Time
	for _, entry := range cm.ManagedFields {
		if entry.FieldsV1 == nil || !ownsAnnotation(entry.FieldsV1.Raw, key) {
			continue
		}
		var t time.Time
		if entry.Time != nil {
			t = entry.Time.Time
		}
		if manager == "" || t.After(at) {
			manager, at = entry.Manager, t
		}
	}
	return manager, at
}

// ownsAnnotation reports whether a managedFields entry (FieldsV1 JSON) owns the annotation.
func ownsAnnotation(raw []byte, key string) bool {
	var fields struct {
		Metadata struct {
			Annotations map[string]json.RawMessage `json:"f:annotations"`
		} `json:"f:metadata"`
	}
	if json.Unmarshal(raw, &fields) != nil {
		return false
	}
	_, ok := fields.Metadata.Annotations["f:"+key]
	return ok
}

// dropOneShotControls removes from cm the one-shot controls it carries, and returns them.
func dropOneShotControls(cm *corev1.ConfigMap) []control {
	var dropped []control
	for _, key := range oneShotControls() {
		if value, ok := cm.Annotations[key]; ok {
			manager, at := changedBy(cm, key)
			dropped = append(dropped, control{Key: key, Value: value, Manager: manager, At: at})
			delete(cm.Annotations, key)
		}
	}
	sort.Slice(dropped, func(i, j int) bool { return dropped[i].Key < dropped[j].Key })
	return dropped
}

// controlWatch follows the state ConfigMap for the rest of a run.
type controlWatch struct {
	mu     sync.Mutex
	latest *corev1.ConfigMap
	stop   context.CancelFunc
	done   chan struct{}
}

// followControls starts following the state ConfigMap from the copy this run last wrote, so
// a change made after that write is seen; it replaces any earlier watch of the run.
func (r *run) followControls(ctx context.Context) {
	r.stopFollowingControls()
	wctx, cancel := context.WithCancel(ctx)
	cw := &controlWatch{stop: cancel, done: make(chan struct{}), latest: r.store.last.DeepCopy()}
	api := r.e.Kube.CoreV1().ConfigMaps(r.rel.Namespace)
	name := StateConfigMapName(r.rel.Name)
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	var held *corev1.ConfigMap
	if r.store.last != nil && r.store.last.ResourceVersion != "" {
		held = r.store.last.DeepCopy()
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if held != nil {
				first := held
				held = nil
				return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: first.ResourceVersion}, Items: []corev1.ConfigMap{*first}}, nil
			}
			o.FieldSelector = byName
			o.ResourceVersion, o.ResourceVersionMatch = "", ""
			return api.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return api.Watch(ctx, o)
		},
	}
	go func() {
		defer close(cw.done)
		_, _ = watchtools.UntilWithSync(wctx, lw, &corev1.ConfigMap{}, nil, func(ev watch.Event) (bool, error) {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || cm.Name != name {
				return false, nil
			}
			if ev.Type == watch.Deleted {
				cm = nil
			}
			cw.mu.Lock()
			cw.latest = cm
			cw.mu.Unlock()
			return false, nil
		})
	}()
	r.ctl = cw
}

// stopFollowingControls ends the run's watch of the controls, if any.
func (r *run) stopFollowingControls() {
	if r.ctl != nil {
		r.ctl.stop()
		<-r.ctl.done
		r.ctl = nil
	}
}

// controls reads the controls as the watch last saw them, and logs what changed since the
// last look: who set or removed which control, and when.
func (r *run) controls() controlSet {
	if r.ctl == nil {
		return controlSet{}
	}
	r.ctl.mu.Lock()
	set := controlsOf(r.ctl.latest)
	r.ctl.mu.Unlock()
	for key, c := range set {
		if seen, ok := r.seenControls[key]; !ok || seen.Value != c.Value || !seen.At.Equal(c.At) {
			r.report(Progress{Kind: ProgressGate, Message: fmt.Sprintf("control %s", c.by())})
		}
	}
	for key, seen := range r.seenControls {
		if _, ok := set[key]; !ok {
			r.report(Progress{Kind: ProgressGate, Message: fmt.Sprintf("control %s removed (it was %s)", key, seen.by())})
		}
	}
	r.seenControls = set
	return set
}

// logDroppedControls tells of one-shot controls that the run's first record removed: they were
// set before this revision's run started, so they do not act on it.
func (r *run) logDroppedControls(dropped []control) {
	for _, c := range dropped {
		r.report(Progress{Kind: ProgressGate, Message: fmt.Sprintf("ignored control %s: it was set before this revision's run started, and was removed", c.by())})
	}
}

// pausedBy reports a pause, as the gate that holds the run.
func (r *run) pausedBy(set controlSet) *CheckFailure {
	c, ok := set.on(ControlPause, "true")
	if !ok {
		return nil
	}
	return &CheckFailure{Check: pauseCheck, Message: fmt.Sprintf("paused by the operator: %s; remove the annotation to resume", c.by())}
}

// builtInGateClosed reports the first built-in gate of hookType (a webhook without url) that
// no approval opened.
func (r *run) builtInGateClosed(ctx context.Context, a analyzer, set controlSet, hookType string) *CheckFailure {
	for _, h := range a.hooksOf(hookType) {
		if h.URL != "" {
			continue
		}
		if c, ok := set.on(ApprovalKey(hookType), approvedValue); ok {
			r.noteApproval(ctx, c)
			continue
		}
		return &CheckFailure{Check: h.Name, Message: fmt.Sprintf("the built-in %s gate %s waits for an approval: kubectl annotate configmap -n %s %s %s=%s",
			hookType, h.Name, r.rel.Namespace, StateConfigMapName(r.rel.Name), ApprovalKey(hookType), approvedValue)}
	}
	return nil
}

// noteApproval records an Event the first time an approval opens a gate.
func (r *run) noteApproval(ctx context.Context, c control) {
	if r.approvals == nil {
		r.approvals = map[string]bool{}
	}
	if r.approvals[c.Key] {
		return
	}
	r.approvals[c.Key] = true
	r.report(Progress{Kind: ProgressGate, Message: fmt.Sprintf("the built-in gates approved by the operator: %s", c.by())})
	r.event(ctx, normalEvent, "Approved", "Approved by the operator: "+c.by())
}

// steer acts on abort and promote-now at a check. It returns the next phase when the run ends
// or promotes; "" goes on. Promote-now acts only once the canary is Ready, and only while no
// check of the run has failed: then the run records it (with the revision and who asked)
// before the promotion, which is the proof the promotion chokepoint takes.
func (r *run) steer(ctx context.Context) (Phase, error) {
	set := r.controls()
	if c, ok := set.on(ControlAbort, "true"); ok {
		return r.aborted(c)
	}
	c, ok := set.on(ControlPromoteNow, "true")
	if !ok || !r.canaryReady {
		return "", nil
	}
	if r.st.FailedChecks > 0 {
		r.refusePromoteNow(ctx, c)
		return "", nil
	}
	r.st.PromoteNow = &OperatorAction{Revision: r.hash, Manager: c.Manager, At: c.At, FailedChecks: r.st.FailedChecks}
	r.st.PassedSpec = r.hash
	r.report(Progress{Kind: ProgressGate, Message: fmt.Sprintf("promoting now at %s, as the operator asked: %s", splitText(r.split()), c.by())})
	return PhasePromoting, nil
}

// aborted rolls the run back for the operator's abort c, rejecting its revision.
func (r *run) aborted(c control) (Phase, error) {
	r.rejection = &Rejection{Check: "abort", Reason: "aborted by the operator: " + c.by()}
	return r.rollBack(fmt.Sprintf("aborted by the operator at %s: %s", splitText(r.split()), c.by()))
}

// refusePromoteNow says, once per request, why a promote-now does not act.
func (r *run) refusePromoteNow(ctx context.Context, c control) {
	key := c.by()
	if r.refused == key {
		return
	}
	r.refused = key
	message := fmt.Sprintf("Promote-now refused: %d check(s) of this analysis failed so far (the last: %s), and a promotion now needs every check so far to have passed; "+
		"the analysis goes on. The request was %s", r.st.FailedChecks, r.lastFailure, c.by())
	r.event(ctx, warningEvent, "PromoteNowRefused", message)
	r.e.warn(r.rel, "canary_release promote-now refused", fmt.Sprintf("%s/%s: %s.", r.rel.Namespace, r.rel.Name, message))
}
