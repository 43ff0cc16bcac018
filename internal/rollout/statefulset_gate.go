package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout/promotion"
)

// The partition gate. A StatefulSet's partition decides which pods run the new revision, so a
// change of it is a traffic change: every write of it (and a rollback's restored template)
// goes through setPartition, which asks admitPartition first. writePartition is the only
// writer of the StatefulSet (TestOneWeightWriterAndOnePromoter).

// errPartitionRefused is a partition write the gate refused.
var errPartitionRefused = errors.New("partition change refused")

// partitionMove is one write: the partition to set, or a template to restore with the
// partition kept where it is (a rollback). Lowering the partition past the step the record
// has reached, and restoring a template, need proof: the revision that may run on every pod.
type partitionMove struct {
	to      int32
	proof   promotion.Proof
	restore *corev1.PodTemplateSpec
}

// setPartitionAttempts bounds the retries after a write conflict (the set changed between
// the read and the write): each try reads and judges afresh.
const setPartitionAttempts = 5

// setPartition admits the move against a fresh read of the set and writes it on that very
// copy, so a template changed in between fails the write instead of getting the pods.
func (s *stsRun) setPartition(ctx context.Context, m partitionMove) error {
	var err error
	for range setPartitionAttempts {
		var set *appsv1.StatefulSet
		if set, err = s.read(ctx); err != nil {
			return err
		}
		if err = s.admitPartition(ctx, set, m); err != nil {
			return err
		}
		if err = s.writePartition(ctx, set, m); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// admitPartition refuses a write that would give an unanalysed revision more pods than the
// recorded step, or pods while the updated ones are not Ready.
func (s *stsRun) admitPartition(ctx context.Context, set *appsv1.StatefulSet, m partitionMove) error {
	current, update := partitionOf(set), set.Status.UpdateRevision
	if m.restore != nil {
		if !m.proof.Admits(s.st.LastPromotedSpec) {
			return fmt.Errorf("%w: StatefulSet %s/%s gets back only the last promoted template (%s), not %s", errPartitionRefused, s.rel.Namespace, s.rel.Target, s.st.LastPromotedSpec, m.proof.Revision())
		}
		return nil
	}
	if m.to >= current || m.proof.Admits(update) {
		return nil
	}
	n := replicasOf(set)
	steps := (canaryStrategy{s.rel.Analysis}).Steps()
	if s.st.Phase != PhaseProgressing || update != s.st.CanarySpec || s.st.Step >= len(steps) {
		return fmt.Errorf("%w: StatefulSet %s/%s runs revision %s, which is not the one under analysis (%s): its partition stays %d",
			errPartitionRefused, s.rel.Namespace, s.rel.Target, update, s.st.CanarySpec, current)
	}
	if allowed := PodsForWeight(steps[s.st.Step], n); n-m.to > allowed {
		return fmt.Errorf("%w: partition %d would run %d pods of StatefulSet %s/%s on revision %s, beyond the %d of the step reached",
			errPartitionRefused, m.to, n-m.to, s.rel.Namespace, s.rel.Target, update, allowed)
	}
	pods, err := s.podRevisions(ctx)
	if err != nil {
		return fmt.Errorf("checking the updated pods before lowering the partition: %w", err)
	}
	if ready, all := pods.updated(update); ready < all {
		return fmt.Errorf("%w: %d of the %d pods of StatefulSet %s/%s on revision %s are not Ready: no more pods move to it",
			errPartitionRefused, all-ready, all, s.rel.Namespace, s.rel.Target, update)
	}
	return nil
}

// overStep re-reads, at every check, the pods that run the revision under analysis: a
// scale-up gives each new pod the update revision whatever the partition, so an autoscaler
// can put more pods on it than the step reached allows. A check taken so judges more than the
// step and does not count: over is true, the status says so and the step is held, and once
// that has lasted progress_deadline_seconds the run rolls back (next).
func (s *stsRun) overStep(ctx context.Context, set *appsv1.StatefulSet, c *stsChecks) (over bool, next Phase, err error) {
	pods, err := s.podRevisions(ctx)
	if err != nil {
		next, err := s.rollBack(s.stopReason(ctx, fmt.Errorf("reading the pods of StatefulSet %s/%s: %w", s.rel.Namespace, s.rel.Target, err)))
		return true, next, err
	}
	_, updated := pods.updated(c.candidate)
	n, w := replicasOf(set), s.stepWeight()
	allowed := PodsForWeight(w, n)
	if updated <= allowed {
		c.overSince = time.Time{}
		return false, "", nil
	}
	now := s.e.now()
	if c.overSince.IsZero() {
		c.overSince = now
	}
	if held := now.Sub(c.overSince); held >= s.deadline() {
		next, err := s.rollBack(fmt.Sprintf("%d of the %d pods of StatefulSet %s ran revision %s for %s (progress_deadline_seconds), more than the %d its step of %d%% allows "+
			"(a scale-up gives every new pod the new revision): no check of the step could count", updated, n, s.rel.Target, c.candidate, s.deadline(), allowed, w))
		return true, next, err
	}
	message := fmt.Sprintf("check does not count: %d of the %d pods of StatefulSet %s run revision %s, more than the %d its step of %d%% allows "+
		"(a scale-up gives every new pod the new revision); the step is held, and rolled back if this lasts progress_deadline_seconds (%s)",
		updated, n, s.rel.Target, c.candidate, allowed, w, s.deadline())
	return true, "", s.record(ctx, s.st.Phase, message)
}

// writePartition writes the move onto the copy the gate judged.
func (s *stsRun) writePartition(ctx context.Context, set *appsv1.StatefulSet, m partitionMove) error {
	set = set.DeepCopy()
	partition := m.to
	if m.restore != nil {
		set.Spec.Template = *m.restore
		partition = partitionOf(set)
	}
	if set.Spec.UpdateStrategy.RollingUpdate == nil {
		set.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
	}
	if set.Spec.UpdateStrategy.Type == "" {
		set.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
	}
	if m.restore == nil && partitionOf(set) == partition {
		return nil
	}
	set.Spec.UpdateStrategy.RollingUpdate.Partition = &partition
	_, err := s.e.Kube.AppsV1().StatefulSets(s.rel.Namespace).Update(ctx, set, metav1.UpdateOptions{FieldManager: FieldManager})
	if err == nil {
		s.e.note(s.rel, "StatefulSet %s: partition %d", s.rel.Target, partition)
	}
	return err
}

// templateOfRevision decodes the pod template a StatefulSet's ControllerRevision holds (the
// controller stores {"spec":{"template":{..., "$patch":"replace"}}}).
func templateOfRevision(raw []byte) (*corev1.PodTemplateSpec, error) {
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
