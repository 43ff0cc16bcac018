package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// The release's state lives in the cluster in a ConfigMap named StateConfigMapName(name), so a
// later apply (or import) can tell an interrupted rollout from a finished one.
const (
	stateKeyStatus = "status.json"
	stateKeySpec   = "spec.json"
	stateKeyFormat = "format"
	// stateKeySequence and stateKeyMAC sign the record (seal.go), from format 4.
	stateKeySequence = "sequence"
	stateKeyMAC      = "mac"
)

// stateFormat is the version of the state ConfigMap's layout this provider writes. Version 1
// had no format key; version 2 adds the owner instance and the target's name to the status.
// Version 3 adds the promoted-template history (Status.Promoted), which a provider that does
// not know it would leave holding a template whose analysis failed since: such a provider
// refuses it. Version 4 signs the record (sequence and mac, see seal.go); the older ones carry no
// MAC, so a run reads them as unverifiable (untrusted.go). A newer version than this one is
// refused rather than misread.
const stateFormat = 4

// StateConfigMapName is the ConfigMap holding a release's cluster-side state.
func StateConfigMapName(release string) string { return release + "-canary-release" }

// ClusterState is what the state ConfigMap holds.
type ClusterState struct {
	Status Status
	// Spec is the resource's configuration as the provider last applied it (opaque JSON).
	Spec []byte
	// sealed is what the record's MAC covers, as read, and mac the MAC it carries.
	sealed sealed
	mac    string
}

// Verify says why the record cannot be trusted under seal (the key and the last sequence the
// Terraform state holds); nil when it can.
func (cs ClusterState) Verify(seal *Seal) error { return seal.verify(cs.sealed, cs.mac) }

type stateStore struct {
	kube kubernetes.Interface
	rel  Release
	// clearOneShot asks the next save to remove the one-shot controls (package controls) the
	// ConfigMap carries; dropped are those it removed.
	clearOneShot bool
	dropped      []controls.Control
	// last is the ConfigMap as this store last wrote it. A run saves after every step, so the
	// next save updates it directly instead of reading it first; a conflict (someone else
	// wrote it meanwhile) reads it again.
	last *corev1.ConfigMap
	// shown is the live view (liveViewText) the last save wrote, and savedAt when, by the
	// run's clock (see showProgress).
	shown   string
	savedAt time.Time
}

// LoadState reads the state; ok is false when none exists.
func LoadState(ctx context.Context, kube kubernetes.Interface, namespace, name string) (ClusterState, bool, error) {
	st, _, ok, err := loadState(ctx, kube, namespace, name)
	return st, ok, err
}

// loadState is LoadState that also returns the ConfigMap read, so that a run's first save
// updates it without reading it again.
func loadState(ctx context.Context, kube kubernetes.Interface, namespace, name string) (ClusterState, *corev1.ConfigMap, bool, error) {
	cm, err := kube.CoreV1().ConfigMaps(namespace).Get(ctx, StateConfigMapName(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ClusterState{}, nil, false, nil
	}
	if err != nil {
		return ClusterState{}, nil, false, err
	}
	if f := cm.Data[stateKeyFormat]; f != "" && f != strconv.Itoa(stateFormat) && f != "1" && f != "2" && f != "3" {
		return ClusterState{}, nil, false, fmt.Errorf("ConfigMap %s/%s has state format %q, written by a newer canary provider than this one (which reads 1 to %d): upgrade the provider",
			namespace, cm.Name, f, stateFormat)
	}
	var st ClusterState
	if err := json.Unmarshal([]byte(cm.Data[stateKeyStatus]), &st.Status); err != nil {
		return ClusterState{}, nil, false, fmt.Errorf("ConfigMap %s/%s: %w", namespace, cm.Name, err)
	}
	st.Spec = []byte(cm.Data[stateKeySpec])
	// An unreadable sequence reads as 0: the MAC, made over the written one, then fails.
	sequence, _ := strconv.ParseUint(cm.Data[stateKeySequence], 10, 64)
	st.sealed = sealed{namespace: namespace, name: name, format: cm.Data[stateKeyFormat], sequence: sequence,
		status: []byte(cm.Data[stateKeyStatus]), spec: st.Spec}
	st.mac = cm.Data[stateKeyMAC]
	if st.Status.Phase != "" && st.Status.Phase != PhaseInitializing {
		// Records written before the flag existed: any later phase means initialised.
		st.Status.Initialized = true
	}
	return st, cm, true, nil
}

// save writes the status (and the spec, when given).
func (s *stateStore) save(ctx context.Context, st Status, spec []byte) error {
	statusJSON, err := json.Marshal(st)
	if err != nil {
		return err
	}
	api := s.kube.CoreV1().ConfigMaps(s.rel.Namespace)
	name := StateConfigMapName(s.rel.Name)
	seal := s.rel.Seal
	sequence := uint64(0)
	if seal.usable() {
		sequence = seal.Sequence + 1
	}
	err = onAPIError(ctx, func() error {
		cm := s.last
		if cm == nil {
			live, err := api.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.rel.Namespace, Labels: map[string]string{
						router.LabelManagedBy: router.ManagedByValue, router.LabelRelease: s.rel.Name,
					}},
					Data: map[string]string{stateKeyStatus: string(statusJSON), stateKeySpec: string(spec)},
				}
				s.sign(cm, sequence)
				setLiveView(cm, st)
				created, err := api.Create(ctx, cm, metav1.CreateOptions{FieldManager: FieldManager})
				if err == nil {
					// A record just created held no control to drop: the ones set from now on
					// are this run's, and a later save must keep them.
					s.last, s.clearOneShot = created, false
				}
				return err
			}
			if err != nil {
				return err
			}
			cm = live
		}
		cm = cm.DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		var dropped []controls.Control
		if s.clearOneShot {
			dropped = controls.DropOneShot(cm)
		}
		cm.Data[stateKeyStatus] = string(statusJSON)
		if spec != nil {
			cm.Data[stateKeySpec] = string(spec)
		}
		s.sign(cm, sequence)
		setLiveView(cm, st)
		updated, err := api.Update(ctx, cm, metav1.UpdateOptions{FieldManager: FieldManager})
		if err != nil {
			// Whatever failed, the next try starts from a fresh read.
			s.last = nil
			return err
		}
		s.last = updated
		if s.clearOneShot {
			s.clearOneShot, s.dropped = false, dropped
		}
		return nil
	})
	if err == nil && seal.usable() {
		seal.Sequence = sequence
	}
	return err
}

// sign sets the record's format, sequence and MAC over the status and spec cm now holds.
// Without a key the record goes unsigned, and the next run cannot trust it.
func (s *stateStore) sign(cm *corev1.ConfigMap, sequence uint64) {
	cm.Data[stateKeyFormat] = strconv.Itoa(stateFormat)
	if !s.rel.Seal.usable() {
		delete(cm.Data, stateKeySequence)
		delete(cm.Data, stateKeyMAC)
		return
	}
	cm.Data[stateKeySequence] = strconv.FormatUint(sequence, 10)
	cm.Data[stateKeyMAC] = s.rel.Seal.mac(sealed{namespace: s.rel.Namespace, name: s.rel.Name, format: cm.Data[stateKeyFormat], sequence: sequence,
		status: []byte(cm.Data[stateKeyStatus]), spec: []byte(cm.Data[stateKeySpec])})
}

// setLiveView writes the live view of st into cm's labels and annotations, leaving the
// others as they are.
func setLiveView(cm *corev1.ConfigMap, st Status) {
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	delete(cm.Labels, LabelLastCheck)
	for k, v := range liveLabels(st) {
		cm.Labels[k] = v
	}
	if st.LastCheck == "" {
		delete(cm.Annotations, AnnotationLastCheck)
		return
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[AnnotationLastCheck] = st.LastCheck
}

func (s *stateStore) delete(ctx context.Context) error {
	err := s.kube.CoreV1().ConfigMaps(s.rel.Namespace).Delete(ctx, StateConfigMapName(s.rel.Name), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// maxEventMessage is the API server's limit on an Event's message; longer ones are refused.
const maxEventMessage = 1024

// shorten cuts a message to n bytes, on a rune boundary, marking the cut.
func shorten(message string, n int) string {
	if len(message) <= n {
		return message
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(message[cut]) {
		cut--
	}
	return message[:cut] + mark
}

// event records a Kubernetes Event on the target, so `kubectl describe` tells the story.
func (s *stateStore) event(ctx context.Context, eventType, reason, message string) {
	now := time.Now()
	message = shorten(message, maxEventMessage)
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: s.rel.Target + ".", Namespace: s.rel.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "apps/v1", Kind: s.rel.WorkloadKind(), Name: s.rel.Target, Namespace: s.rel.Namespace,
		},
		Reason: reason, Message: message, Type: eventType,
		FirstTimestamp: metav1.NewTime(now), LastTimestamp: metav1.NewTime(now), Count: 1,
		// EventTime keeps sub-second order, so the story reads in sequence.
		EventTime: metav1.NewMicroTime(now), Action: reason,
		Source:              corev1.EventSource{Component: "canary-release"},
		ReportingController: "canary-release.dev/terraform-provider-canary",
		ReportingInstance:   "terraform",
	}
	// Events are best effort: a release never fails because one could not be recorded.
	_, _ = s.kube.CoreV1().Events(s.rel.Namespace).Create(ctx, ev, metav1.CreateOptions{})
}
