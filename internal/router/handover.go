package router

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// handover is the form a route takes when destroy leaves it to the user instead of deleting
// it, because something the release does not own serves it: a Gateway, or the user's own
// routes naming it (Gloo).
type handover struct {
	// spec sends every request to dest: the apex Service, or Gloo's Upstream of it.
	spec map[string]any
	dest string
	// destinations lists the destinations an object of the route's kind names, in order.
	destinations func(*unstructured.Unstructured) []string
	// note is the AnnotationLeftBehind value: what the user may do with the object.
	note string
}

// handOver rewrites the object, if this release owns it, into h's form without the release
// labels and with h.note, so that it is the user's and a later release of the same apex takes
// it over (see leftBehind). It then checks that the API server holds dest as the one destination.
func (m managed) handOver(ctx context.Context, h handover) error {
	var held *unstructured.Unstructured
	err := withRetry(ctx, func() error {
		live, err := getOptional(ctx, m.c, m.gvr, m.namespace, m.name)
		if err != nil || live == nil || !owned(live, m.s) {
			held = nil
			return err
		}
		live.Object["spec"] = deepCopyMap(h.spec)
		live.SetLabels(withoutReleaseLabels(live.GetLabels()))
		live.SetAnnotations(withLeftBehind(live.GetAnnotations(), h.note))
		held, err = m.update(ctx, live, true)
		return err
	})
	if err != nil {
		return fmt.Errorf("handing %s over to Service %s/%s: %w", m.ref(), m.s.Namespace, m.s.Apex, err)
	}
	if held == nil {
		return nil // missing, foreign, or taken over meanwhile
	}
	if !m.carried(held) {
		if held, err = m.read(ctx); err != nil {
			return fmt.Errorf("reading back %s: %w", m.ref(), err)
		}
	}
	if got := h.destinations(held); !slices.Equal(got, []string{h.dest}) {
		return fmt.Errorf("%s: wrote a single destination %s but the API server holds destinations %v", m.ref(), h.dest, got)
	}
	return nil
}

// routeHandoverNote is the note on a route a Gateway served: nothing else names it, so the
// user may keep it as their own.
func routeHandoverNote(s Spec) string {
	return fmt.Sprintf("destroyed canary_release %s; this route now sends every request to Service %s and is yours: "+
		"keep, edit or delete it", s.Name, s.Apex)
}

// withoutReleaseLabels drops the labels that make an object a release's.
func withoutReleaseLabels(labels map[string]string) map[string]string {
	out := maps.Clone(labels)
	delete(out, LabelRelease)
	delete(out, LabelManagedBy)
	return out
}

func withLeftBehind(annotations map[string]string, note string) map[string]string {
	out := maps.Clone(annotations)
	if out == nil {
		out = map[string]string{}
	}
	out[AnnotationLeftBehind] = note
	return out
}
