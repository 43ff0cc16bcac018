package rollout

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Taking the traffic over from another router. The record names the mesh_provider whose router
// carries the release's traffic (Status.Router). A run on another one, after a replacement
// that changed mesh_provider, finds the old router's object still routing, perhaps at the
// split of a run killed half-way; recovery reads only the new router, so before anything else
// the run moves every request to the primary, through the traffic gate, on both routers, then
// hands the old router's object back as that driver's destroy would (router.Finalize: deleted,
// or left to the apex Service where a Gateway serves it), and records the new router. Until
// then every save keeps the old router in the record, so a run killed half-way through the
// takeover is finished by the next one.

// AnnotationRouter on the primary Deployment names the mesh_provider whose router carries the
// release's traffic, as the record's Router does: a state ConfigMap deleted by hand must not
// lose it, or the run of a replacement on another mesh_provider would never take the traffic
// over from the old router's object, which keeps routing to the pods that run then scales.
const AnnotationRouter = "canary-release.dev/router"

// withRouter is annotations naming this run's router. The primary is written only once the
// run routes through it (takeOverRouting comes first).
func (w workload) withRouter(annotations map[string]string) map[string]string {
	if w.rel.Provider != "" {
		annotations[AnnotationRouter] = w.rel.Provider
	}
	return annotations
}

// routingPending reports a record whose traffic is on another mesh_provider's router.
func (r *run) routingPending() bool { return r.st.Router != "" && r.st.Router != r.rel.Provider }

// takeOverRouting moves the traffic from the recorded router to this run's, if they differ.
func (r *run) takeOverRouting(ctx context.Context) error {
	if !r.routingPending() {
		return nil
	}
	previous := r.st.Router
	fail := func(what string, err error) error {
		return fmt.Errorf("mesh_provider changed from %s to %s, and %s: %w; the %s router keeps routing the release until an apply completes this",
			previous, r.rel.Provider, what, err, previous)
	}
	if r.e.RouterFor == nil {
		return fail("this engine cannot build the old router", fmt.Errorf("no RouterFor"))
	}
	old, err := r.e.RouterFor(previous, r.recordedSpec)
	if err != nil {
		return fail("its router could not be built", err)
	}
	live, err := old.GetRoutes(ctx)
	if router.IsNotFound(err) {
		// It routes nothing: there is nothing to move, only what is left of it to remove.
		if err := old.Finalize(ctx); err != nil {
			return fail("what is left of its router could not be removed", err)
		}
		return r.tookOverRouting(ctx, previous)
	}
	if err != nil {
		return fail("its live weights could not be read", err)
	}
	// The gate judges every write against where traffic really is: on the old router.
	r.st.recordSplit(live)
	toPrimary := router.Weights{Primary: 100}
	// Checked before the new router's object is created, since a new object starts at 100/0.
	if err := r.admit(ctx, toPrimary); err != nil {
		return fail(fmt.Sprintf("its router sends %s, which cannot move to the primary", splitText(live)), err)
	}
	if err := r.e.Router.Reconcile(ctx); err != nil {
		return fail("the new router's object could not be written", err)
	}
	if err := r.setSplitVia(ctx, nil, toPrimary); err != nil {
		return fail("the new router could not send everything to the primary", err)
	}
	if err := r.setSplitVia(ctx, old, toPrimary); err != nil {
		return fail("the old router could not send everything to the primary", err)
	}
	if err := old.Finalize(ctx); err != nil {
		return fail("the old router's object could not be handed back", err)
	}
	if canaryHasTraffic(live) {
		// The canary's pods keep serving what the data planes still send them.
		if err := sleep(ctx, r.e.drainDelay()); err != nil {
			return err
		}
	}
	r.note("mesh_provider changed from %s to %s: all traffic went to the primary %s and the %s router's object was handed back", previous, r.rel.Provider, r.rel.PrimaryName(), previous)
	return r.tookOverRouting(ctx, previous)
}

// tookOverRouting records that the release's traffic is on this run's router from now on.
func (r *run) tookOverRouting(ctx context.Context, previous string) error {
	r.st.Router = r.rel.Provider
	if err := r.save(ctx); err != nil {
		return fmt.Errorf("recording that the %s router took the traffic over from the %s router: %w", r.rel.Provider, previous, err)
	}
	// After the record: a primary still naming the old router only makes a rebuilt record
	// finalize what is already gone, while one naming the new router early would lose the old one.
	if err := r.annotateRouter(ctx); err != nil {
		return fmt.Errorf("recording on %s %s/%s that the %s router took the traffic over from the %s router: %w", r.rel.WorkloadKind(), r.rel.Namespace, r.rel.PrimaryName(), r.rel.Provider, previous, err)
	}
	return nil
}

// annotateRouter names this run's router on the primary, if there is one.
func (r *run) annotateRouter(ctx context.Context) error {
	deployments := r.w.workloads()
	return onAPIError(ctx, func() error {
		primary, err := deployments.Get(ctx, r.rel.PrimaryName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if primary.Annotations[AnnotationRouter] == r.rel.Provider || !r.w.owns(primary) {
			return nil
		}
		primary = primary.DeepCopy()
		if primary.Annotations == nil {
			primary.Annotations = map[string]string{}
		}
		primary.Annotations = r.w.withRouter(primary.Annotations)
		held, err := deployments.Update(ctx, primary, metav1.UpdateOptions{FieldManager: FieldManager})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			r.primaryLive = held
		}
		return err
	})
}
