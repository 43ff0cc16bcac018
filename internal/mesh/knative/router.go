package knative

import (
	"context"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// knativeRouter writes the traffic of the user's Knative Service <target>: the canary's
// share to the pinned canary revision, the primary's to the pinned primary revision, each by
// revisionName (latestRevision false, as Knative's defaulting writes it), canary first as
// Flagger orders them. Before a canary is pinned the primary's entry alone carries 100. It
// writes nothing else of the Service but its two pin annotations, and never a tag (a tag
// would publish a URL per revision).
type knativeRouter struct {
	dyn dynamic.Interface
	s   router.Spec
	can router.Capabilities
	// last is the Service as last held (see take); lastRead says a read returned it, not a
	// write, so it needs no read to verify it.
	last     *unstructured.Unstructured
	lastRead bool
}

func newRouter(c router.Clients, s router.Spec, can router.Capabilities) *knativeRouter {
	return &knativeRouter{dyn: c.Dynamic, s: s, can: can}
}

func (r *knativeRouter) ref() string { return "Knative Service " + r.s.Namespace + "/" + r.s.Target }

func (r *knativeRouter) api() dynamic.ResourceInterface {
	return r.dyn.Resource(ServiceResource).Namespace(r.s.Namespace)
}

// pins are the revisions the split names.
type pins struct{ primary, canary string }

func pinsOf(svc *unstructured.Unstructured) pins {
	a := svc.GetAnnotations()
	return pins{primary: a[AnnotationPrimaryRevision], canary: a[AnnotationCanaryRevision]}
}

// render is spec.traffic for w between the pinned revisions.
func render(p pins, w router.Weights) ([]any, error) {
	entry := func(rev string, pct int) map[string]any {
		return map[string]any{"revisionName": rev, "latestRevision": false, "percent": int64(pct)}
	}
	if p.primary == "" {
		return nil, errors.New("no primary revision is pinned yet (annotation " + AnnotationPrimaryRevision + "): the release's initialisation pins it")
	}
	if p.canary == "" {
		if w.Canary != 0 {
			return nil, fmt.Errorf("no canary revision is pinned (annotation %s), so the canary cannot take %d%%", AnnotationCanaryRevision, w.Canary)
		}
		return []any{entry(p.primary, 100)}, nil
	}
	return []any{entry(p.canary, w.Canary), entry(p.primary, w.Primary)}, nil
}

// readTraffic reads the split of spec.traffic between the pinned revisions; any other shape
// is an error that says what the Service holds.
func readTraffic(svc *unstructured.Unstructured) (router.Weights, error) {
	p := pinsOf(svc)
	if p.primary == "" {
		return router.Weights{}, fmt.Errorf("no primary revision is pinned (annotation %s)", AnnotationPrimaryRevision)
	}
	list, _, _ := unstructured.NestedSlice(svc.Object, "spec", "traffic")
	targets := make([]map[string]any, 0, len(list))
	for _, item := range list {
		t, _ := item.(map[string]any)
		if t == nil || t["tag"] != nil || t["latestRevision"] == true {
			return router.Weights{}, fmt.Errorf("spec.traffic holds %s, not the release's split between pinned revisions", describe(list))
		}
		targets = append(targets, t)
	}
	percent := func(t map[string]any, rev string) (int, bool) {
		pct, ok := router.AsInt(t["percent"])
		return pct, ok && t["revisionName"] == rev
	}
	switch {
	case p.canary == "" && len(targets) == 1:
		if pct, ok := percent(targets[0], p.primary); ok && pct == 100 {
			return router.Weights{Primary: 100}, nil
		}
	case p.canary != "" && len(targets) == 2:
		c, okC := percent(targets[0], p.canary)
		pr, okP := percent(targets[1], p.primary)
		if okC && okP && c+pr == 100 {
			return router.Weights{Primary: pr, Canary: c}, nil
		}
	}
	return router.Weights{}, fmt.Errorf("spec.traffic holds %s, not the release's split between primary %s and canary %q", describe(list), p.primary, p.canary)
}

// describe is a traffic list in words.
func describe(list []any) string {
	if len(list) == 0 {
		return "nothing (Knative's default: all to the latest ready revision)"
	}
	parts := make([]string, 0, len(list))
	for _, item := range list {
		t, _ := item.(map[string]any)
		pct, _ := router.AsInt(t["percent"])
		to, _ := t["revisionName"].(string)
		if t["latestRevision"] == true {
			to = "latestRevision"
		}
		if tag, _ := t["tag"].(string); tag != "" {
			to += " (tag " + tag + ")"
		}
		parts = append(parts, fmt.Sprintf("%d%% to %s", pct, to))
	}
	return strings.Join(parts, ", ")
}

// read reads the Service under the retry policy; a missing one is a *router.NotFoundError.
func (r *knativeRouter) read(ctx context.Context) (*unstructured.Unstructured, error) {
	svc, err := router.Fetch(ctx, r.dyn, ServiceResource, r.s.Namespace, r.s.Target)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", r.ref(), err)
	}
	if svc == nil {
		return nil, &router.NotFoundError{Ref: r.ref()}
	}
	return svc, nil
}

// write sets spec.traffic to w between the pinned revisions, re-reading the Service on each
// attempt, and verifies the split the API server holds.
func (r *knativeRouter) write(ctx context.Context, w router.Weights, keep bool) error {
	var held *unstructured.Unstructured
	err := router.WithRetry(ctx, func() error {
		live := r.take()
		// unverified: a write returned the copy taken, and no read has compared it since.
		taken, unverified := live != nil, !r.lastRead
		if !taken {
			var err error
			if live, err = r.readOnce(ctx); err != nil {
				return err
			}
			unverified = false
		}
		want, traffic, err := r.plan(live, w, keep)
		if err != nil && taken {
			// The release's target (mesh.Target) pins revisions with writes of its own: the
			// copy held, whether a write returned it or GetRoutes read it, may predate a pin.
			if live, err = r.readOnce(ctx); err != nil {
				return err
			}
			unverified = false
			want, traffic, err = r.plan(live, w, keep)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", r.ref(), err)
		}
		if have, _, _ := unstructured.NestedSlice(live.Object, "spec", "traffic"); router.JSONEqual(have, traffic) && unverified {
			// Nothing to write, so nothing would check the copy held against the API server's:
			// plan again on a fresh read, whose pins may have changed since (the target pins
			// with writes of its own).
			if live, err = r.readOnce(ctx); err != nil {
				return err
			}
			if want, traffic, err = r.plan(live, w, keep); err != nil {
				return fmt.Errorf("%s: %w", r.ref(), err)
			}
		}
		if have, _, _ := unstructured.NestedSlice(live.Object, "spec", "traffic"); router.JSONEqual(have, traffic) {
			held, w = live, want
			return nil
		}
		return r.update(ctx, live, traffic, &held, &w, want)
	})
	if err != nil {
		if router.IsNotFound(err) {
			return err
		}
		return fmt.Errorf("writing the traffic of %s: %w", r.ref(), err)
	}
	if held == nil || held.GetKind() != "Service" || held.GetName() != r.s.Target {
		// The answer does not carry the object: read back what the API server holds.
		if held, err = r.read(ctx); err != nil {
			return fmt.Errorf("reading back the traffic written (%s): %w", router.SplitText(w), err)
		}
	}
	got, err := readTraffic(held)
	if err != nil {
		return fmt.Errorf("%s: wrote %s but the API server holds no readable split: %v", r.ref(), router.SplitText(w), err)
	}
	if got != w {
		return fmt.Errorf("%s: wrote %s but the API server holds %s", r.ref(), router.SplitText(w), router.SplitText(got))
	}
	r.last, r.lastRead = held.DeepCopy(), false
	return nil
}

// plan is the split to write onto live (with keep, the one it holds, if readable) and its
// spec.traffic between live's pins.
func (r *knativeRouter) plan(live *unstructured.Unstructured, w router.Weights, keep bool) (router.Weights, []any, error) {
	want := w
	if keep {
		if have, err := readTraffic(live); err == nil {
			want = have
		}
	}
	traffic, err := render(pinsOf(live), want)
	return want, traffic, err
}

// update writes traffic onto live; held and w receive the answer and the split written.
func (r *knativeRouter) update(ctx context.Context, live *unstructured.Unstructured, traffic []any, held **unstructured.Unstructured, w *router.Weights, want router.Weights) error {
	if err := unstructured.SetNestedSlice(live.Object, traffic, "spec", "traffic"); err != nil {
		return err
	}
	answer, err := r.api().Update(ctx, live, metav1.UpdateOptions{FieldManager: router.FieldManager})
	*held, *w = answer, want
	return err
}

// take returns the Service as the last write returned it or the last GetRoutes read it, and
// forgets it: the next write starts from it instead of a read, and its resourceVersion makes
// the API server refuse that write (a Conflict, then a fresh read) if anyone changed the
// Service since, the user's own template edits included.
func (r *knativeRouter) take() *unstructured.Unstructured {
	obj := r.last
	r.last = nil
	if obj == nil {
		r.lastRead = false
	}
	return obj
}

// readOnce reads the Service once; a missing one is a *router.NotFoundError.
func (r *knativeRouter) readOnce(ctx context.Context) (*unstructured.Unstructured, error) {
	live, err := router.GetOptional(ctx, r.dyn, ServiceResource, r.s.Namespace, r.s.Target)
	if err != nil {
		return nil, err
	}
	if live == nil {
		return nil, &router.NotFoundError{Ref: r.ref()}
	}
	return live, nil
}

// Reconcile puts the Service's traffic in the release's shape, keeping a split already there
// and starting at 100/0 otherwise. It needs the primary pinned: pinning is a promotion, which
// only the engine's chokepoint does (Target.PinPrimary).
func (r *knativeRouter) Reconcile(ctx context.Context) error {
	return r.write(ctx, router.Weights{Primary: 100}, true)
}

func (r *knativeRouter) SetRoutes(ctx context.Context, w router.Weights) error {
	if err := router.ValidateWeights(w); err != nil {
		return err
	}
	if err := r.can.Check("knative", r.s, w); err != nil {
		return fmt.Errorf("%s: %w", r.ref(), err)
	}
	return r.write(ctx, w, false)
}

// GetRoutes reads the split of spec.traffic. A Service whose primary is not pinned has no
// route of the release's yet: a *router.NotFoundError, like a missing generated object.
func (r *knativeRouter) GetRoutes(ctx context.Context) (router.Weights, error) {
	svc, err := r.read(ctx)
	if err != nil {
		return router.Weights{}, err
	}
	if pinsOf(svc).primary == "" {
		return router.Weights{}, &router.NotFoundError{Ref: r.ref() + " (no pinned primary revision)"}
	}
	r.last, r.lastRead = svc.DeepCopy(), true
	w, err := readTraffic(svc)
	if err != nil {
		return router.Weights{}, fmt.Errorf("%s: %w", r.ref(), err)
	}
	return w, nil
}

// Drift: the Service is missing, has no pinned primary, holds another traffic shape, or
// Knative reconciled the spec but serves another split (a pinned revision it refused).
func (r *knativeRouter) Drift(ctx context.Context) ([]string, error) {
	svc, err := router.Fetch(ctx, r.dyn, ServiceResource, r.s.Namespace, r.s.Target)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", r.ref(), err)
	}
	if svc == nil {
		return []string{r.ref() + " is missing"}, nil
	}
	if pinsOf(svc).primary == "" {
		return []string{fmt.Sprintf("%s has no pinned primary revision (annotation %s)", r.ref(), AnnotationPrimaryRevision)}, nil
	}
	if _, err := readTraffic(svc); err != nil {
		return []string{fmt.Sprintf("%s: %v", r.ref(), err)}, nil
	}
	if gen, found, _ := unstructured.NestedInt64(svc.Object, "status", "observedGeneration"); found && gen == svc.GetGeneration() {
		spec, _, _ := unstructured.NestedSlice(svc.Object, "spec", "traffic")
		status, _, _ := unstructured.NestedSlice(svc.Object, "status", "traffic")
		if !sameSplit(spec, status) {
			return []string{fmt.Sprintf("%s: Knative serves %s, not the spec.traffic it observed (%s)", r.ref(), describe(status), describe(spec))}, nil
		}
	}
	return nil, nil
}

// sameSplit compares the percent each revision gets in a spec and a status traffic list.
func sameSplit(spec, status []any) bool {
	sum := func(list []any) map[string]int {
		out := map[string]int{}
		for _, item := range list {
			t, _ := item.(map[string]any)
			name, _ := t["revisionName"].(string)
			pct, _ := router.AsInt(t["percent"])
			if pct > 0 {
				out[name] += pct
			}
		}
		return out
	}
	return router.JSONEqual(sum(spec), sum(status))
}

// Finalize hands the Service's traffic back to the user. When the pinned primary is the latest
// ready revision, Knative's default (everything to the latest revision) serves the same
// revision, so spec.traffic is removed. Otherwise the primary keeps 100% by name and the
// Service is marked left behind with what to do: a newer revision nobody promoted must not
// take the traffic because the release is gone. The pin annotations go either way.
func (r *knativeRouter) Finalize(ctx context.Context) error {
	return router.WithRetry(ctx, func() error {
		svc, err := router.GetOptional(ctx, r.dyn, ServiceResource, r.s.Namespace, r.s.Target)
		if err != nil || svc == nil {
			return err
		}
		p := pinsOf(svc)
		if p.primary == "" && p.canary == "" {
			return nil
		}
		annotations := svc.GetAnnotations()
		delete(annotations, AnnotationPrimaryRevision)
		delete(annotations, AnnotationCanaryRevision)
		latestReady, _, _ := unstructured.NestedString(svc.Object, "status", "latestReadyRevisionName")
		latestCreated, _, _ := unstructured.NestedString(svc.Object, "status", "latestCreatedRevisionName")
		switch {
		case p.primary == "":
			// Never initialised: the traffic was never the release's.
		case p.primary == latestReady && latestReady == latestCreated:
			unstructured.RemoveNestedField(svc.Object, "spec", "traffic")
		default:
			_ = unstructured.SetNestedSlice(svc.Object, []any{map[string]any{
				"revisionName": p.primary, "latestRevision": false, "percent": int64(100),
			}}, "spec", "traffic")
			annotations = router.WithLeftBehind(annotations, fmt.Sprintf(
				"the destroyed canary_release %q left all traffic on revision %s, the last it promoted; the latest revision (%s) was never promoted. "+
					"Set spec.traffic to latestRevision when that revision should serve", r.s.Name, p.primary, latestCreated))
		}
		svc.SetAnnotations(annotations)
		_, err = r.api().Update(ctx, svc, metav1.UpdateOptions{FieldManager: router.FieldManager})
		return err
	})
}

// Warnings: a Service the release cannot find yet.
func (r *knativeRouter) Warnings(ctx context.Context) []string {
	svc, err := router.Fetch(ctx, r.dyn, ServiceResource, r.s.Namespace, r.s.Target)
	if err == nil && svc == nil {
		return []string{r.ref() + " does not exist yet: the release's target must be a Knative Service"}
	}
	return nil
}
