package rollout

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationOwner on the primary Deployment and the generated Services names the resource
// instance that runs the release (Release.Instance), as the state ConfigMap's record does.
// The ConfigMap can be deleted by hand; the owner must survive it, or the Delete of an
// instance that a replacement took the release from would dismantle the live release.
const AnnotationOwner = "canary-release.dev/owner"

// withOwner is annotations with the release's owner, when the release has an instance.
func (w workload) withOwner(annotations map[string]string) map[string]string {
	if w.rel.Instance == "" {
		return annotations
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationOwner] = w.rel.Instance
	return annotations
}

// claim names this run's instance as the owner on the primary and the apex Service that
// already exist, before the run records anything: from the first record on, a Delete of a
// former owner finds the claim even if that record is lost. Objects created later carry it
// from their creation (withOwner).
func (r *run) claim(ctx context.Context) error {
	if r.rel.Instance == "" {
		return nil
	}
	svc := r.e.Kube.CoreV1().Services(r.rel.Namespace)
	apex, err := r.knownApex(ctx)
	if err != nil {
		return err
	}
	if apex != nil && apex.Annotations[AnnotationOwner] != r.rel.Instance {
		err = onAPIError(ctx, func() error {
			if apex == nil {
				read, err := svc.Get(ctx, r.rel.Apex(), metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				if err != nil {
					return err
				}
				if !r.w.owns(read) {
					return nil
				}
				apex = read
			}
			claimed := apex.DeepCopy()
			apex = nil
			claimed.Annotations = r.w.withOwner(claimed.Annotations)
			held, err := svc.Update(ctx, claimed, metav1.UpdateOptions{FieldManager: FieldManager})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			if r.services != nil {
				r.services[held.Name] = held
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("recording the owner on Service %s/%s: %w", r.rel.Namespace, r.rel.Apex(), err)
		}
	}
	if p := r.primaryLive; p == nil || p.Annotations[AnnotationOwner] == r.rel.Instance {
		return nil
	}
	deployments := r.w.workloads()
	err = onAPIError(ctx, func() error {
		primary := r.primaryLive
		r.primaryLive = nil
		if primary == nil {
			read, err := deployments.Get(ctx, r.rel.PrimaryName(), metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			primary = read
		}
		primary = primary.DeepCopy()
		primary.Annotations = r.w.withOwner(primary.Annotations)
		held, err := deployments.Update(ctx, primary, metav1.UpdateOptions{FieldManager: FieldManager})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			r.primaryLive = held
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("recording the owner on %s %s/%s: %w", r.rel.WorkloadKind(), r.rel.Namespace, r.rel.PrimaryName(), err)
	}
	return nil
}

// otherOwner is the instance other than this run's that the record, the primary or the apex
// Service names as the release's owner; empty when none does. Any one of them suffices: each
// was written by an instance that took the release over, and a Delete that dismantled a
// release another instance runs could not be undone.
func (r *run) otherOwner(rec Status, apex *corev1.Service) string {
	owners := []string{rec.Owner}
	if r.primaryLive != nil {
		owners = append(owners, r.primaryLive.Annotations[AnnotationOwner])
	}
	if apex != nil {
		owners = append(owners, apex.Annotations[AnnotationOwner])
	}
	for _, owner := range owners {
		if owner != "" && owner != r.rel.Instance {
			return owner
		}
	}
	return ""
}
