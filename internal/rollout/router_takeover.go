package rollout

import (
	"context"
	"fmt"

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
	r.e.logf("%s/%s: mesh_provider changed from %s to %s: all traffic went to the primary %s and the %s router's object was handed back",
		r.rel.Namespace, r.rel.Name, previous, r.rel.Provider, r.rel.PrimaryName(), previous)
	return r.tookOverRouting(ctx, previous)
}

// tookOverRouting records that the release's traffic is on this run's router from now on.
func (r *run) tookOverRouting(ctx context.Context, previous string) error {
	r.st.Router = r.rel.Provider
	if err := r.save(ctx); err != nil {
		return fmt.Errorf("recording that the %s router took the traffic over from the %s router: %w", r.rel.Provider, previous, err)
	}
	return nil
}
