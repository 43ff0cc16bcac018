package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"

	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"

	"github.com/canary-release/terraform-provider-canary/internal/configs"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Delete removes the release, holding its lock, after recovering any run that stopped
// half-way.
//   - target_ref with revert: the target is scaled up and Ready and the apex selects it
//     before the primary and the routes go. A target whose template is not the last promoted
//     one is refused (revert never hands traffic to a template that did not pass), and a
//     missing target leaves the generated objects serving, with a warning that names them.
//   - target_ref without revert: the generated objects stay and keep serving.
//   - manifest: the release-owned Deployment is deleted with the rest.
func (e *Engine) Delete(ctx context.Context, rel Release, revert bool) error {
	e.bindTarget(rel)
	_, err := e.withLock(ctx, rel, true, func(ctx context.Context) (Status, error) {
		return Status{}, e.deleteLocked(ctx, rel, revert)
	})
	return err
}

func (e *Engine) deleteLocked(ctx context.Context, rel Release, revert bool) error {
	r := e.newRun(rel, Status{}, nil)
	// Recovering a half-way run may notify (a rollback's Events and alerts).
	defer r.drainNotifications(ctx)
	rec, existing, err := r.loadRecord(ctx)
	if err != nil {
		return err
	}
	if !existing {
		return nil
	}
	apex, err := r.w.ownedApex(ctx)
	if err != nil {
		return err
	}
	if owner := r.otherOwner(rec, apex); owner != "" {
		// A replacement (create_before_destroy), a move or another configuration took the
		// release over: it is theirs to run, not this instance's to dismantle.
		return &NotOwnerError{Namespace: rel.Namespace, Name: rel.Name, Owner: owner, Instance: rel.Instance}
	}
	r.st = rec
	if e.Owned != nil {
		return r.ownedDelete(ctx)
	}
	// servedBy: an earlier destroy recovered the run, handed the apex over to this Deployment
	// and stopped; this one carries on from there (the routes it read are gone).
	servedBy := handedTo(apex)
	if servedBy == "" {
		if err := r.takeOverRouting(ctx); err != nil {
			return fmt.Errorf("destroy first takes the traffic over from the old router: %w", err)
		}
		if err := r.recover(ctx); err != nil {
			return fmt.Errorf("destroy first recovers the run that stopped half-way, and that failed: %w", err)
		}
	}
	if rel.Manifest == nil && !revert {
		return r.store.delete(ctx)
	}
	if rel.Manifest == nil {
		target, err := r.w.target(ctx)
		var missing *targetNotFoundError
		if err != nil {
			if !errors.As(err, &missing) {
				return err
			}
			e.warn(rel, "canary_release destroyed without revert: the target is gone",
				fmt.Sprintf("revert_on_deletion could not give the workload back to %s %s/%s, which no longer exists. "+
					"The primary %s %s, the Services %s, %s-primary and %s-canary and the routing objects were left serving; delete them when nothing needs them.",
					rel.WorkloadKind(), rel.Namespace, rel.Target, rel.WorkloadKind(), rel.PrimaryName(), rel.Apex(), rel.Apex(), rel.Apex()))
			return r.store.delete(ctx)
		}
		if servedBy != rel.Target && r.st.LastPromotedSpec == "" {
			return fmt.Errorf("revert_on_deletion would hand all traffic to %s %s/%s, but neither the state ConfigMap nor the primary records "+
				"which template was last promoted, so it cannot be shown to have passed analysis. Apply once (which records it), "+
				"or set revert_on_deletion = false and apply, then destroy", rel.WorkloadKind(), rel.Namespace, rel.Target)
		}
		hash, err := r.w.revision(ctx, target)
		if err != nil {
			return err
		}
		if servedBy != rel.Target && hash != r.st.LastPromotedSpec {
			return fmt.Errorf("revert_on_deletion would hand all traffic to %s %s/%s, whose revision (%s: its pod template and the ConfigMaps and Secrets it uses) is not the last promoted one (%s): "+
				"it has not passed analysis. Set the target's template and config back to the promoted ones (for example the image it last released) and apply, "+
				"or set revert_on_deletion = false and apply, then destroy", rel.WorkloadKind(), rel.Namespace, rel.Target, hash, r.st.LastPromotedSpec)
		}
		key, value, err := kinds.Selector(target)
		if err != nil {
			return err
		}
		if err := r.w.scale(ctx, rel.Target, r.primaryReplicas(ctx, target)); err != nil {
			return err
		}
		if err := r.w.waitReady(ctx, rel.Target, rel.ProgressDeadline); err != nil {
			return fmt.Errorf("giving the workload back to %s: %w", rel.Target, err)
		}
		if err := r.w.handOverApex(ctx, map[string]string{key: value}, rel.Target); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	} else if servedBy == "" {
		// The apex serves the primary's pods on its own once the routes go: marked first, so
		// that a destroy stopped from here on is carried on, not recovered.
		if err := r.w.handOverApex(ctx, nil, rel.PrimaryName()); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	if err := e.Router.Finalize(ctx); err != nil {
		return err
	}
	// The data plane drops a deleted route a moment after the API does; the backends the route
	// pointed at must outlive that moment, or requests in flight find no Service.
	if err := sleep(ctx, e.drainDelay()); err != nil {
		return err
	}
	del := func(err error) error {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	services := []string{rel.Apex() + "-primary", rel.Apex() + "-canary"}
	if rel.Manifest != nil {
		services = append(services, rel.Apex())
		if err := del(workloadsOf(e.Kube, rel).Delete(ctx, rel.Target, metav1.DeleteOptions{})); err != nil {
			return err
		}
	}
	for _, s := range services {
		if err := del(e.Kube.CoreV1().Services(rel.Namespace).Delete(ctx, s, metav1.DeleteOptions{})); err != nil {
			return err
		}
	}
	copies, err := r.w.primaryConfigCopies(ctx)
	if err != nil {
		return err
	}
	// And those the target's template names: a destroy that stopped after deleting the
	// primary still leaves this release's ownership of them.
	if target, err := r.w.target(ctx); err == nil {
		for _, ref := range configs.Referenced(target.Spec.Template.Spec) {
			for _, name := range []string{configs.PrimaryName(ref.Name), r.w.copies().OwnCopyName(ref.Name)} {
				if c := (configs.Ref{Kind: ref.Kind, Name: name}); !slices.Contains(copies, c) {
					copies = append(copies, c)
				}
			}
		}
	}
	if err := del(workloadsOf(e.Kube, rel).Delete(ctx, rel.PrimaryName(), metav1.DeleteOptions{})); err != nil {
		return err
	}
	if err := r.w.copies().DeleteAll(ctx, copies); err != nil {
		return err
	}
	if err := r.w.scalers().DeletePrimary(ctx); err != nil {
		return err
	}
	return r.store.delete(ctx)
}

// NotOwnerError is a Delete by a resource instance that no longer owns the release: it
// dismantles nothing, and the instance only leaves the Terraform state.
type NotOwnerError struct {
	Namespace, Name string
	// Owner is the instance the cluster's record names; Instance is the one deleting.
	Owner, Instance string
}

func (e *NotOwnerError) Error() string {
	self := e.Instance
	if self == "" {
		self = "one created before instance identities existed"
	}
	return fmt.Sprintf("canary_release %s/%s is now run by another resource instance (%s; this one is %s): a create_before_destroy replacement, "+
		"a move without a moved block, or another configuration took it over. Its primary, Services, routes and state were left to that instance; "+
		"this one was only removed from the Terraform state", e.Namespace, e.Name, e.Owner, self)
}

// Drift lists the ways the cluster no longer matches the release; the next apply repairs them.
// It includes the invariant's third rule: the recorded weights must be the router's.
func (e *Engine) Drift(ctx context.Context, rel Release, st Status) ([]string, error) {
	e.bindTarget(rel)
	if e.Owned != nil {
		return e.ownedDrift(ctx, rel, st)
	}
	w := workload{kube: e.Kube, rel: rel, dyn: e.Dynamic}
	var out []string
	target, err := w.target(ctx)
	var missing *targetNotFoundError
	switch {
	case errors.As(err, &missing):
		return []string{err.Error()}, nil
	case err != nil:
		return nil, fmt.Errorf("reading the target %s %s/%s: %w", rel.WorkloadKind(), rel.Namespace, rel.Target, err)
	}
	revision, err := w.revision(ctx, target)
	if err != nil {
		return nil, err
	}
	if st.LastPromotedSpec != "" && revision != st.LastPromotedSpec {
		out = append(out, fmt.Sprintf("target %s %s/%s: its pod template or a ConfigMap or Secret it uses differs from the last promoted revision; the next apply analyses it", rel.WorkloadKind(), rel.Namespace, rel.Target))
	}
	if servedBy, err := w.handedOverApex(ctx); err != nil {
		return nil, err
	} else if servedBy != "" {
		out = append(out, fmt.Sprintf("Service %s/%s serves %s %s's pods on its own: a destroy stopped after handing the route over to it; "+
			"the next apply gives the route back to the primary once the primary has Ready pods", rel.Namespace, rel.Apex(), rel.WorkloadKind(), servedBy))
	}
	cs, ok, err := LoadState(ctx, e.Kube, rel.Namespace, rel.Name)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		out = append(out, fmt.Sprintf("the state ConfigMap %s/%s is missing; the next apply rebuilds it from the primary %s", rel.Namespace, StateConfigMapName(rel.Name), rel.WorkloadKind()))
	case cs.Status.Router != "" && cs.Status.Router != rel.Provider:
		out = append(out, fmt.Sprintf("the %s router still carries the release's traffic; the next apply moves it to the %s router", cs.Status.Router, rel.Provider))
	case cs.Status.Phase.active():
		out = append(out, fmt.Sprintf("a rollout was interrupted in phase %s", cs.Status.Phase))
	default:
		st = cs.Status
	}
	if live, err := e.Router.GetRoutes(ctx); err == nil {
		if live.Session, live.Expired = "", ""; live != st.recordedSplit() {
			out = append(out, fmt.Sprintf("the router holds %s, but the recorded status says %s", splitText(live), splitText(st.recordedSplit())))
		}
		held, err := w.primaryWithoutPodsDrift(ctx, st, live)
		if err != nil {
			return nil, err
		}
		out = append(out, held...)
	}
	wd, err := w.drift(ctx)
	if err != nil {
		return nil, err
	}
	out = append(out, wd...)
	ad, err := w.scalers().Drift(ctx)
	if err != nil {
		return nil, err
	}
	out = append(out, ad...)
	rd, err := e.Router.Drift(ctx)
	if err != nil {
		return nil, err
	}
	return append(out, rd...), nil
}
