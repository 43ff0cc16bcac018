// Package statefulset is the StatefulSet workload driver: it releases a StatefulSet in place,
// by its RollingUpdate partition, as an in-place target (mesh.InPlace) of the engine's one run
// loop. A "-primary" copy would duplicate the set's volumes, so the revisions share the set's
// pods: the primary is the controller's current revision, the canary its update revision, and
// a weight is a number of pods on the update revision (PodsForWeight).
package statefulset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Between releases the set's partition is held at HoldPartitionMax, above any replica count the
// set can reach whatever an autoscaler's bounds become, so neither a template change nor a
// scale-up starts a pod of an unanalysed revision; a rollout lowers it step by step. Revision
// names are the StatefulSet controller's (the pods' controller-revision-hash), so the pods say
// which one each runs.

// Kind is target_ref.kind for a StatefulSet.
const Kind = "StatefulSet"

// HoldPartitionMax is the partition held between releases. Not an autoscaler's maxReplicas:
// raising that bound together with the template would let the scale-up start the new
// revision on the pods above the old bound before any analysis.
const HoldPartitionMax int32 = math.MaxInt32

// poll is how often the waits for the StatefulSet controller read the set and its pods.
const poll = 250 * time.Millisecond

// writeAttempts bounds the retries after a write conflict (the set changed between the read
// and the write): each try reads afresh.
const writeAttempts = 5

// FieldManager is the field manager of the driver's writes.
const FieldManager = "canary-release"

// AnnotationPinned is the set's record that a release holds it: the revision the release pinned
// as its primary. Every write of a release puts it on the set (PinPrimary names the revision it
// promotes), and only Finalize, which gives the set back to ordinary rolling updates, takes it
// off, so it stays while a step has lowered the partition. Pinned reads it.
const AnnotationPinned = "canary-release.dev/pinned-revision"

// PodsForWeight is the number of updated pods a step's weight gives a set of replicas pods:
// the weight's share rounded down, but at least one pod (a step of no pod analyses nothing)
// and at most all of them.
func PodsForWeight(weight int, replicas int32) int32 {
	k := int32(int64(replicas) * int64(weight) / 100)
	return max(1, min(k, replicas))
}

// Options tune one release's set.
type Options struct {
	// Deadline bounds every wait for the StatefulSet controller (progress_deadline); zero is
	// ten minutes.
	Deadline time.Duration
	// Warn tells the user what they must know although the call went through; nil drops it.
	Warn func(summary, detail string)
}

// Set is one release's StatefulSet, an in-place target.
type Set struct {
	kube            kubernetes.Interface
	namespace, name string
	o               Options
	// canary is the revision PinCanary named: pods go only to it.
	canary string
	// written is the split the last SetRoutes made, in whole pods.
	written *router.Weights
}

var _ mesh.InPlace = (*Set)(nil)

// New is the StatefulSet name of namespace as a release's in-place target.
func New(kube kubernetes.Interface, namespace, name string, o Options) *Set {
	if o.Deadline <= 0 {
		o.Deadline = 10 * time.Minute
	}
	return &Set{kube: kube, namespace: namespace, name: name, o: o}
}

func (s *Set) warn(summary, detail string) {
	if s.o.Warn != nil {
		s.o.Warn(summary, detail)
	}
}

// read returns the set once the controller has seen its spec, so that its status's update
// revision names the template the spec holds.
func (s *Set) read(ctx context.Context) (*appsv1.StatefulSet, error) {
	deadline := time.Now().Add(s.o.Deadline)
	for {
		set, err := s.kube.AppsV1().StatefulSets(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("target_ref: reading StatefulSet %s/%s: %w", s.namespace, s.name, err)
		}
		if t := set.Spec.UpdateStrategy.Type; t != "" && t != appsv1.RollingUpdateStatefulSetStrategyType {
			return nil, fmt.Errorf("target_ref: StatefulSet %s/%s has updateStrategy %s; a release by partition needs RollingUpdate", s.namespace, s.name, t)
		}
		if set.Status.ObservedGeneration >= set.Generation && set.Status.UpdateRevision != "" {
			return set, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("StatefulSet %s/%s: the StatefulSet controller has not observed generation %d within %s (is kube-controller-manager running?)",
				s.namespace, s.name, set.Generation, s.o.Deadline)
		}
		if err := sleep(ctx, poll); err != nil {
			return nil, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// Replicas is the set's replica count.
func Replicas(set *appsv1.StatefulSet) int32 {
	if set.Spec.Replicas == nil {
		return 1
	}
	return *set.Spec.Replicas
}

// Partition is the set's RollingUpdate partition.
func Partition(set *appsv1.StatefulSet) int32 {
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return *ru.Partition
	}
	return 0
}

// primaryOf is the revision the pods below the partition run: the controller's current one.
func primaryOf(set *appsv1.StatefulSet) string {
	if set.Status.CurrentRevision != "" {
		return set.Status.CurrentRevision
	}
	return set.Status.UpdateRevision
}

// Revisions reads the set's revisions: the current one is the primary, the update one (while
// it differs) the canary and the latest.
func (s *Set) Revisions(ctx context.Context) (mesh.Revisions, error) {
	set, err := s.read(ctx)
	if err != nil {
		return mesh.Revisions{}, err
	}
	revs := mesh.Revisions{Primary: primaryOf(set), LatestCreated: set.Status.UpdateRevision}
	if revs.LatestCreated != revs.Primary {
		revs.Canary = revs.LatestCreated
	}
	return revs, nil
}

// Serving reports whether every pod that runs revision is Ready (none is, too): a revision
// gets more pods only then.
func (s *Set) Serving(ctx context.Context, revision string) (bool, error) {
	pods, err := s.podRevisions(ctx)
	if err != nil {
		return false, err
	}
	ready, all := pods.updated(revision)
	return ready == all, nil
}

// PinCanary names the revision the next pods go to: the set's update revision, which must be
// revision.
func (s *Set) PinCanary(ctx context.Context, revision string) error {
	set, err := s.read(ctx)
	if err != nil {
		return err
	}
	if set.Status.UpdateRevision != revision {
		return fmt.Errorf("%w (revision %s, not %s)", mesh.ErrTemplateChanged, set.Status.UpdateRevision, revision)
	}
	s.canary = revision
	return nil
}

// PinPrimary rolls every pod to the revision proof admits and waits until each runs it and is
// Ready: when the set's template makes it, by partition 0; otherwise (a rollback) by restoring
// its template from its ControllerRevision, the partition kept where it is.
func (s *Set) PinPrimary(ctx context.Context, proof mesh.Admission) error {
	revision := proof.Revision()
	if !proof.Admits(revision) {
		return fmt.Errorf("StatefulSet %s/%s: revision %s is not admitted", s.namespace, s.name, revision)
	}
	var template *corev1.PodTemplateSpec
	change := func(set *appsv1.StatefulSet) (bool, error) {
		if set.Status.UpdateRevision != revision {
			if template == nil {
				var err error
				if template, err = s.revisionTemplate(ctx, revision); err != nil {
					return false, err
				}
			}
			set.Spec.Template = *template
			return true, nil
		}
		pods, err := s.podRevisions(ctx)
		if err != nil {
			return false, err
		}
		pinned := set.Annotations[AnnotationPinned] != revision
		if pinned {
			metav1.SetMetaDataAnnotation(&set.ObjectMeta, AnnotationPinned, revision)
		}
		if pods.allOn(revision, Replicas(set)) {
			return pinned, nil
		}
		return setPartition(set, 0) || pinned, nil
	}
	// The wait ends when every pod the set has, as it scales, runs revision. A partition that
	// holds pods off revision while the template makes it (raised by hand during the roll, or
	// kept when a rollback restored a template that is not the controller's current revision)
	// would leave them on another for good: the pin is written again, lowering it.
	for attempt := 1; ; attempt++ {
		err := s.write(ctx, change)
		if err == nil {
			err = s.waitPods(ctx, revision, allPods)
			if errors.Is(err, errHeldBack) && attempt < writeAttempts {
				continue
			}
		}
		if err != nil {
			// Whatever ended the roll (a deadline, a cancelled apply), the partition is raised
			// back: that moves no pod, and a lowered one would roll every pod onto whatever
			// template is written next, before any analysis. The next run's recovery takes
			// back the pods left off the pinned revision.
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), holdTimeout)
			herr := s.write(hctx, func(set *appsv1.StatefulSet) (bool, error) { return setPartition(set, HoldPartitionMax), nil })
			cancel()
			if herr != nil {
				s.warn("canary_release could not hold the StatefulSet's partition",
					fmt.Sprintf("A roll of StatefulSet %s/%s failed, and its partition could not be raised back to %d: %v. Until the next apply holds it, a template written onto the set rolls its pods without analysis.",
						s.namespace, s.name, HoldPartitionMax, herr))
			}
			return fmt.Errorf("rolling StatefulSet %s/%s to revision %s: %w", s.namespace, s.name, revision, err)
		}
		return nil
	}
}

// holdTimeout bounds the write that holds the partition after a failed roll (PinPrimary),
// which runs even when the apply was cancelled.
const holdTimeout = 10 * time.Second

// allPods is the want of a wait for every pod the set has, read at each poll.
const allPods int32 = -1

// errHeldBack is a wait for every pod that found the set's partition holding pods off the
// revision its template makes.
var errHeldBack = errors.New("the partition holds pods off the revision")

// write applies change to a fresh read of the set and writes that very copy when change says
// so, so a set changed in between fails the write (and is read again) instead of getting the
// change.
func (s *Set) write(ctx context.Context, change func(set *appsv1.StatefulSet) (bool, error)) error {
	var err error
	for range writeAttempts {
		var set *appsv1.StatefulSet
		if set, err = s.read(ctx); err != nil {
			return err
		}
		set = set.DeepCopy()
		changed, cerr := change(set)
		if cerr != nil || !changed {
			return cerr
		}
		if _, ok := set.Annotations[AnnotationPinned]; !ok && !givenBack(set) {
			metav1.SetMetaDataAnnotation(&set.ObjectMeta, AnnotationPinned, primaryOf(set))
		}
		if _, err = s.kube.AppsV1().StatefulSets(s.namespace).Update(ctx, set, metav1.UpdateOptions{FieldManager: FieldManager}); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// givenBack reports a set that ordinary rolling updates run again: partition 0 and nothing held
// behind it.
func givenBack(set *appsv1.StatefulSet) bool {
	return Partition(set) == 0 && set.Status.UpdateRevision == primaryOf(set)
}

// setPartition sets the set's partition; false when it already is.
func setPartition(set *appsv1.StatefulSet, partition int32) bool {
	if set.Spec.UpdateStrategy.Type == "" {
		set.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
	}
	if Partition(set) == partition && set.Spec.UpdateStrategy.RollingUpdate != nil && set.Spec.UpdateStrategy.RollingUpdate.Partition != nil {
		return false
	}
	if set.Spec.UpdateStrategy.RollingUpdate == nil {
		set.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
	}
	set.Spec.UpdateStrategy.RollingUpdate.Partition = &partition
	return true
}

// Reconcile holds the partition at HoldPartitionMax when nothing is being released (the set's
// template is its current revision). Raising the partition moves no pod.
func (s *Set) Reconcile(ctx context.Context) error {
	before := int32(-1)
	err := s.write(ctx, func(set *appsv1.StatefulSet) (bool, error) {
		if set.Status.UpdateRevision != primaryOf(set) {
			return false, nil
		}
		before = Partition(set)
		return setPartition(set, HoldPartitionMax), nil
	})
	if err == nil && before >= 0 && before != HoldPartitionMax {
		s.warn("canary_release holds the StatefulSet's partition",
			fmt.Sprintf("canary_release set spec.updateStrategy.rollingUpdate.partition of StatefulSet %s/%s to %d (it was %d), above any replica count the set can reach, "+
				"so that neither a template change nor a scale-up runs an unanalysed pod: each release lowers it step by step. "+
				"If another tool manages the StatefulSet, make it ignore that field (lifecycle ignore_changes, or a server-side apply field manager of its own).",
				s.namespace, s.name, HoldPartitionMax, before))
	}
	return err
}

// SetRoutes gives the canary revision the pods w's weight allows (PodsForWeight) by lowering
// the partition, and waits until they run it and are Ready; no weight holds the partition at
// HoldPartitionMax, and takes back (withdraw) the pods of any revision that is neither the
// pinned primary nor the pinned canary. The partition is never lowered for a revision other
// than the pinned canary, nor raised by a weight: the canary's pods stay so until PinPrimary
// rolls them.
func (s *Set) SetRoutes(ctx context.Context, w router.Weights) error {
	if w.Canary <= 0 {
		if err := s.write(ctx, func(set *appsv1.StatefulSet) (bool, error) { return setPartition(set, HoldPartitionMax), nil }); err != nil {
			return err
		}
		if err := s.withdraw(ctx); err != nil {
			return err
		}
		s.written = &router.Weights{Primary: 100}
		return nil
	}
	var k, n int32
	var revision string
	err := s.write(ctx, func(set *appsv1.StatefulSet) (bool, error) {
		revision, n = set.Status.UpdateRevision, Replicas(set)
		if s.canary == "" || revision != s.canary {
			return false, fmt.Errorf("%w (revision %s, not the pinned %s)", mesh.ErrTemplateChanged, revision, s.canary)
		}
		k = PodsForWeight(w.Canary, n)
		if n-k >= Partition(set) {
			return false, nil
		}
		return setPartition(set, n-k), nil
	})
	if err != nil {
		return err
	}
	share := int(k * 100 / n)
	s.written = &router.Weights{Primary: 100 - share, Canary: share}
	return s.waitPods(ctx, revision, k)
}

// withdraw gives the pinned primary back the pods that run a revision the release did not pin,
// neither as the primary nor, in this run, as the canary: the pods a run that stopped half-way
// left on its canary revision (raising the partition moves no pod, so they would keep
// running a revision whose analysis starts again from its first step). With the partition held
// above every ordinal, the controller recreates a deleted pod on its current revision, which
// must be the pinned one: one pod at a time, from the highest ordinal, each once the one
// before is back on the pinned revision and Ready. It does nothing while the controller's
// current revision is not the pinned one (a promotion's roll it has not yet recorded).
func (s *Set) withdraw(ctx context.Context) error {
	for {
		set, err := s.read(ctx)
		if err != nil {
			return err
		}
		pinned := set.Annotations[AnnotationPinned]
		if pinned == "" || pinned != set.Status.CurrentRevision {
			return nil
		}
		pods, err := s.podRevisions(ctx)
		if err != nil {
			return fmt.Errorf("reading the pods of StatefulSet %s/%s: %w", s.namespace, s.name, err)
		}
		victim := int32(-1)
		for ord, pod := range pods {
			rev := pod.Labels[appsv1.ControllerRevisionHashLabelKey]
			if pod.DeletionTimestamp != nil || rev == pinned || (s.canary != "" && rev == s.canary) || ord >= Partition(set) {
				continue
			}
			victim = max(victim, ord)
		}
		if victim < 0 {
			return nil
		}
		pod := pods[victim]
		var opts metav1.DeleteOptions
		if pod.UID != "" {
			// Not the pod the controller may have recreated meanwhile.
			opts.Preconditions = &metav1.Preconditions{UID: &pod.UID}
		}
		err = s.kube.CoreV1().Pods(s.namespace).Delete(ctx, pod.Name, opts)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("StatefulSet %s/%s: taking pod %s off revision %s, back to the pinned %s: %w",
				s.namespace, s.name, pod.Name, pod.Labels[appsv1.ControllerRevisionHashLabelKey], pinned, err)
		}
		if err := s.waitOrdinal(ctx, victim, pinned); err != nil {
			return err
		}
	}
}

// waitOrdinal waits until the pod of ordinal runs revision and is Ready, within the deadline.
func (s *Set) waitOrdinal(ctx context.Context, ordinal int32, revision string) error {
	deadline := time.Now().Add(s.o.Deadline)
	for {
		pods, err := s.podRevisions(ctx)
		if err == nil {
			if pod, ok := pods[ordinal]; ok && pod.Labels[appsv1.ControllerRevisionHashLabelKey] == revision && podReady(pod) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("StatefulSet %s/%s: pod %s-%d is not Ready on revision %s after %s (progress_deadline)", s.namespace, s.name, s.name, ordinal, revision, s.o.Deadline)
		}
		if err := sleep(ctx, poll); err != nil {
			return err
		}
	}
}

// Written is the split the last SetRoutes made, in whole pods.
func (s *Set) Written(asked router.Weights) router.Weights {
	if s.written != nil {
		return *s.written
	}
	return asked
}

// GetRoutes reads the share of the pods that run the update revision, when it is not the
// current one.
func (s *Set) GetRoutes(ctx context.Context) (router.Weights, error) {
	set, err := s.kube.AppsV1().StatefulSets(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		return router.Weights{}, err
	}
	if set.Status.UpdateRevision == "" || set.Status.UpdateRevision == primaryOf(set) {
		return router.Weights{Primary: 100}, nil
	}
	pods, err := s.podRevisions(ctx)
	if err != nil {
		return router.Weights{}, err
	}
	_, on := pods.updated(set.Status.UpdateRevision)
	share := int(int64(on) * 100 / int64(max(Replicas(set), 1)))
	return router.Weights{Primary: 100 - share, Canary: share}, nil
}

// Share counts the pods on revision against the pods weight allows.
func (s *Set) Share(ctx context.Context, revision string, weight int) (mesh.Share, error) {
	set, err := s.read(ctx)
	if err != nil {
		return mesh.Share{}, err
	}
	if set.Status.UpdateRevision != revision {
		return mesh.Share{}, fmt.Errorf("%w (revision %s, not %s)", mesh.ErrTemplateChanged, set.Status.UpdateRevision, revision)
	}
	pods, err := s.podRevisions(ctx)
	if err != nil {
		return mesh.Share{}, fmt.Errorf("reading the pods of StatefulSet %s/%s: %w", s.namespace, s.name, err)
	}
	_, on := pods.updated(revision)
	n := Replicas(set)
	return mesh.Share{On: on, Of: n, Allowed: PodsForWeight(weight, n)}, nil
}

// Queries are the built-in queries of the update revision against the current one, and the
// variables updated_revision and current_revision.
func (s *Set) Queries(ctx context.Context) (queries, variables map[string]string, err error) {
	set, err := s.read(ctx)
	if err != nil {
		return nil, nil, err
	}
	updated, current := set.Status.UpdateRevision, set.Status.CurrentRevision
	return BuiltInQueries(updated, current), map[string]string{"updated_revision": updated, "current_revision": current}, nil
}

// Pinned is the revision a release pinned as the set's primary, as the set shows it: while a
// release holds the set (its AnnotationPinned, or its partition held at HoldPartitionMax, as a
// release holds it between releases and as an earlier version left it), the controller's
// current revision, which the pods below the partition run (the annotation already names the
// revision a promotion rolls to before its roll completes), unless neither the current nor the
// update revision is the annotation's: then the annotation's. "" when no release holds the set, the
// controller has named no current revision, or the set is gone.
func (s *Set) Pinned(ctx context.Context) (string, error) {
	set, err := s.kube.AppsV1().StatefulSets(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("target_ref: reading StatefulSet %s/%s: %w", s.namespace, s.name, err)
	}
	pinned, held := set.Annotations[AnnotationPinned]
	if !held && Partition(set) != HoldPartitionMax {
		return "", nil
	}
	if pinned != "" && set.Status.CurrentRevision != pinned && set.Status.UpdateRevision != pinned {
		// Neither what the pods below the partition run nor what the template makes is the
		// revision the release pinned: the template changed while a run that stopped left the
		// partition lowered (PinPrimary's roll), and the controller rolled every pod onto a
		// revision no release pinned. The release pinned the annotation's.
		return pinned, nil
	}
	return set.Status.CurrentRevision, nil
}

// Drift reports a partition not held while a template waits behind it.
func (s *Set) Drift(ctx context.Context) ([]string, error) {
	set, err := s.kube.AppsV1().StatefulSets(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		return []string{fmt.Sprintf("target StatefulSet %s/%s cannot be read: %v", s.namespace, s.name, err)}, nil
	}
	if Partition(set) < HoldPartitionMax && set.Status.UpdateRevision != primaryOf(set) {
		return []string{fmt.Sprintf("target StatefulSet %s/%s: its partition is %d, below the held %d; the next apply holds it again", s.namespace, s.name, Partition(set), HoldPartitionMax)}, nil
	}
	return nil, nil
}

// Finalize gives the set back to ordinary rolling updates when nothing unanalysed is held back
// (partition 0 then changes no pod); otherwise it leaves the partition, and says so.
func (s *Set) Finalize(ctx context.Context) error {
	set, err := s.kube.AppsV1().StatefulSets(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("giving StatefulSet %s/%s its partition back: %w", s.namespace, s.name, err)
	}
	if set.Status.UpdateRevision != primaryOf(set) || set.Status.ObservedGeneration < set.Generation {
		s.warn("StatefulSet partition left held", fmt.Sprintf("StatefulSet %s/%s holds revision %s, which never passed analysis, behind its partition %d; "+
			"the partition was left so that destroying the release does not roll it out. Lower it yourself once you want it.", s.namespace, s.name, set.Status.UpdateRevision, Partition(set)))
		return nil
	}
	if err := s.write(ctx, func(set *appsv1.StatefulSet) (bool, error) {
		if set.Status.UpdateRevision != primaryOf(set) {
			return false, nil
		}
		_, pinned := set.Annotations[AnnotationPinned]
		delete(set.Annotations, AnnotationPinned)
		return setPartition(set, 0) || pinned, nil
	}); err != nil {
		return fmt.Errorf("giving StatefulSet %s/%s its partition back: %w", s.namespace, s.name, err)
	}
	return nil
}

// Warnings: none at plan time.
func (s *Set) Warnings(context.Context) []string { return nil }

// revisionTemplate reads the pod template a revision holds (the StatefulSet controller's
// ControllerRevision, which it keeps while a pod runs it).
func (s *Set) revisionTemplate(ctx context.Context, name string) (*corev1.PodTemplateSpec, error) {
	cr, err := s.kube.AppsV1().ControllerRevisions(s.namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading ControllerRevision %s/%s, the promoted template of StatefulSet %s: %w", s.namespace, name, s.name, err)
	}
	template, err := TemplateOfRevision(cr.Data.Raw)
	if err != nil {
		return nil, fmt.Errorf("ControllerRevision %s/%s: %w", s.namespace, name, err)
	}
	return template, nil
}

// TemplateOfRevision decodes the pod template a StatefulSet's ControllerRevision holds (the
// controller stores {"spec":{"template":{..., "$patch":"replace"}}}).
func TemplateOfRevision(raw []byte) (*corev1.PodTemplateSpec, error) {
	var data struct {
		Spec struct {
			Template *corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &data); err != nil {
		return nil, fmt.Errorf("decoding its pod template: %w", err)
	}
	if data.Spec.Template == nil {
		return nil, errors.New("it holds no pod template")
	}
	return data.Spec.Template, nil
}

// podRevisions are the set's pods by ordinal.
type podRevisions map[int32]corev1.Pod

func (p podRevisions) allOn(revision string, replicas int32) bool {
	for i := range replicas {
		pod, ok := p[i]
		if !ok || pod.Labels[appsv1.ControllerRevisionHashLabelKey] != revision || !podReady(pod) {
			return false
		}
	}
	return true
}

// updated counts the Ready pods that run revision, and every pod that runs it.
func (p podRevisions) updated(revision string) (ready, all int32) {
	for _, pod := range p {
		if pod.Labels[appsv1.ControllerRevisionHashLabelKey] == revision && pod.DeletionTimestamp == nil {
			all++
			if podReady(pod) {
				ready++
			}
		}
	}
	return ready, all
}

func podReady(pod corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (s *Set) podRevisions(ctx context.Context) (podRevisions, error) {
	set, err := s.kube.AppsV1().StatefulSets(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("StatefulSet %s/%s: its selector: %w", s.namespace, s.name, err)
	}
	list, err := s.kube.CoreV1().Pods(s.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	out := podRevisions{}
	prefix := s.name + "-"
	for _, pod := range list.Items {
		ordinal, err := strconv.ParseInt(strings.TrimPrefix(pod.Name, prefix), 10, 32)
		if !strings.HasPrefix(pod.Name, prefix) || err != nil {
			continue
		}
		out[int32(ordinal)] = pod
	}
	return out, nil
}

// waitPods waits until at least want pods run revision and are Ready, and every pod of the
// set is Ready; want allPods is every pod the set has, and fails with errHeldBack when the
// partition holds some off the revision the template makes. The StatefulSet controller rolls one pod at a time, each once the one before is
// Ready, so a roll of many pods takes as many readiness waits: the deadline bounds the time
// without progress, as a Deployment's progressDeadlineSeconds does, and starts again whenever
// more pods than ever before in this wait are Ready on revision (or Ready at all).
func (s *Set) waitPods(ctx context.Context, revision string, want int32) error {
	deadline := time.Now().Add(s.o.Deadline)
	bestOn, bestAll := int32(-1), int32(-1)
	all := want == allPods
	for {
		pods, err := s.podRevisions(ctx)
		if err == nil {
			set, serr := s.kube.AppsV1().StatefulSets(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
			if serr != nil {
				return serr
			}
			ready, _ := pods.updated(revision)
			if all {
				if Partition(set) > 0 && set.Status.UpdateRevision == revision && set.Status.ObservedGeneration >= set.Generation &&
					!pods.allOn(revision, Replicas(set)) {
					return fmt.Errorf("StatefulSet %s/%s: %w (partition %d)", s.namespace, s.name, errHeldBack, Partition(set))
				}
				want = Replicas(set)
			}
			allReady := int32(0)
			for _, pod := range pods {
				if podReady(pod) {
					allReady++
				}
			}
			if ready >= want && allReady >= Replicas(set) {
				return nil
			}
			if ready > bestOn || allReady > bestAll {
				bestOn, bestAll = max(bestOn, ready), max(bestAll, allReady)
				deadline = time.Now().Add(s.o.Deadline)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("StatefulSet %s/%s: %d of the %d pods wanted on revision %s are Ready, and no more became Ready for %s (progress_deadline)",
					s.namespace, s.name, ready, want, revision, s.o.Deadline)
			}
		}
		if err := sleep(ctx, poll); err != nil {
			return err
		}
	}
}
