// Package controls reads the operator's controls of a release: annotations on its state
// ConfigMap (pause, abort, promote-now and the approvals of the built-in gates), each with the
// field manager that set it and when, followed on one watch for the rest of a run. Who may set
// them is controlpolicy's concern; what a run does with them is the engine's.
package controls

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Built-in controls. An operator steers a run without a gate service by annotating the
// release's state ConfigMap (kubectl annotate configmap <name>-canary-release ...). The run
// follows the ConfigMap on one watch (no request per interval) and reads the annotations at
// every check; each change is logged with the field manager that made it and when.
const (
	// Prefix is the prefix of every control annotation.
	Prefix = "canary-release.dev/"
	// Pause=true holds the run before its next weight change and before the promotion;
	// the checks go on meanwhile. Removing it (or false) resumes. It outlives a run.
	Pause = Prefix + "pause"
	// Abort=true rolls the run back at its next check.
	Abort = Prefix + "abort"
	// PromoteNow=true promotes the canary at its next check, skipping the remaining
	// steps and gates, while every check so far has passed; it is refused after a failed one.
	PromoteNow = Prefix + "promote-now"
	// Approved opens a built-in gate: canary-release.dev/<gate type>=approved.
	Approved = "approved"
	// PauseCheck names the pause where a gate's name would be.
	PauseCheck = "pause"
)

// The webhook types that a webhook without url turns into a built-in gate, which an approval
// opens.
const (
	ConfirmRollout         = "confirm-rollout"
	ConfirmTrafficIncrease = "confirm-traffic-increase"
	ConfirmPromotion       = "confirm-promotion"
)

// builtInGates are the webhook types that may be built-in gates.
var builtInGates = []string{ConfirmRollout, ConfirmTrafficIncrease, ConfirmPromotion}

// ApprovalKey is the annotation that opens the built-in gates of a gate type.
func ApprovalKey(gateType string) string { return Prefix + gateType }

// IsBuiltInGate reports whether a webhook type may be a built-in gate (a webhook without url).
func IsBuiltInGate(hookType string) bool { return slices.Contains(builtInGates, hookType) }

// oneShot are the controls that act on the run they were set for: set before a revision's run
// starts, they are removed (and logged) by its first record.
func oneShot() []string {
	keys := []string{Abort, PromoteNow}
	for _, g := range builtInGates {
		keys = append(keys, ApprovalKey(g))
	}
	return keys
}

// ManagerName names a field manager for messages.
func ManagerName(m string) string {
	if m == "" {
		return "an unknown field manager"
	}
	return m
}

// Control is one control annotation and who set it, when.
type Control struct {
	Key, Value string
	// Manager is the field manager that last wrote the annotation (kubectl-annotate for
	// kubectl annotate); At is when that manager last changed the ConfigMap.
	Manager string
	At      time.Time
}

// By says who set the control and when, for logs, Events and messages.
func (c Control) By() string {
	who := ManagerName(c.Manager)
	if c.At.IsZero() {
		return fmt.Sprintf("%s=%s (set by %s)", c.Key, c.Value, who)
	}
	return fmt.Sprintf("%s=%s (set by %s at %s)", c.Key, c.Value, who, c.At.UTC().Format(time.RFC3339))
}

// Set is the control annotations of the state ConfigMap, by key.
type Set map[string]Control

// On reports a control set to want (true for the toggles, approved for the gates).
func (s Set) On(key, want string) (Control, bool) {
	c, ok := s[key]
	return c, ok && strings.EqualFold(strings.TrimSpace(c.Value), want)
}

// Of reads the control annotations of cm, each with the manager that last wrote it.
func Of(cm *corev1.ConfigMap) Set {
	set := Set{}
	if cm == nil {
		return set
	}
	for key, value := range cm.Annotations {
		if strings.HasPrefix(key, Prefix) && known(key) {
			manager, at := changedBy(cm, key)
			set[key] = Control{Key: key, Value: value, Manager: manager, At: at}
		}
	}
	return set
}

func known(key string) bool {
	return key == Pause || slices.Contains(oneShot(), key)
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

// DropOneShot removes from cm the one-shot controls it carries, and returns them.
func DropOneShot(cm *corev1.ConfigMap) []Control {
	var dropped []Control
	for _, key := range oneShot() {
		if value, ok := cm.Annotations[key]; ok {
			manager, at := changedBy(cm, key)
			dropped = append(dropped, Control{Key: key, Value: value, Manager: manager, At: at})
			delete(cm.Annotations, key)
		}
	}
	sort.Slice(dropped, func(i, j int) bool { return dropped[i].Key < dropped[j].Key })
	return dropped
}

// Watch follows the state ConfigMap for the rest of a run.
type Watch struct {
	mu     sync.Mutex
	latest *corev1.ConfigMap
	stop   context.CancelFunc
	done   chan struct{}
}

// Follow starts following the ConfigMap name from last, the copy the run last wrote, so that
// a change made after that write is seen.
func Follow(ctx context.Context, api corev1client.ConfigMapInterface, name string, last *corev1.ConfigMap) *Watch {
	wctx, cancel := context.WithCancel(ctx)
	cw := &Watch{stop: cancel, done: make(chan struct{}), latest: last.DeepCopy()}
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	var held *corev1.ConfigMap
	if last != nil && last.ResourceVersion != "" {
		held = last.DeepCopy()
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
	return cw
}

// Stop ends the watch and waits for it.
func (w *Watch) Stop() {
	w.stop()
	<-w.done
}

// Controls are the controls as the watch last saw them.
func (w *Watch) Controls() Set {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Of(w.latest)
}
