package router

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Handover is the form a route takes when destroy leaves it to the user instead of deleting
// it, because something the release does not own serves it: a Gateway, or the user's own
// routes naming it (Gloo).
type Handover struct {
	// spec sends every request to dest: the apex Service, or Gloo's Upstream of it.
	Spec map[string]any
	Dest string
	// destinations lists the destinations an object of the route's kind names, in order.
	Destinations func(*unstructured.Unstructured) []string
	// note is the AnnotationLeftBehind value: what the user may do with the object.
	Note string
}

// HandOver rewrites the object, if this release owns it, into h's form without the release
// labels and with h.note, so that it is the user's and a later release of the same apex takes
// it over (see leftBehind). It then checks that the API server holds dest as the one destination.
func (m Managed) HandOver(ctx context.Context, h Handover) error {
	var held *unstructured.Unstructured
	err := WithRetry(ctx, func() error {
		live, err := GetOptional(ctx, m.Dynamic, m.GVR, m.Namespace, m.Name)
		if err != nil || live == nil || !Owned(live, m.Spec) {
			held = nil
			return err
		}
		live.Object["spec"] = DeepCopyMap(h.Spec)
		live.SetLabels(WithoutReleaseLabels(live.GetLabels()))
		live.SetAnnotations(WithLeftBehind(live.GetAnnotations(), h.Note))
		held, err = m.update(ctx, live, true)
		return err
	})
	if err != nil {
		return fmt.Errorf("handing %s over to Service %s/%s: %w", m.Ref(), m.Spec.Namespace, m.Spec.Apex, err)
	}
	if held == nil {
		return nil // missing, foreign, or taken over meanwhile
	}
	if !m.carried(held) {
		if held, err = m.read(ctx); err != nil {
			return fmt.Errorf("reading back %s: %w", m.Ref(), err)
		}
	}
	if got := h.Destinations(held); !slices.Equal(got, []string{h.Dest}) {
		return fmt.Errorf("%s: wrote a single destination %s but the API server holds destinations %v", m.Ref(), h.Dest, got)
	}
	return nil
}

// RouteHandoverNote is the note on a route a Gateway served: nothing else names it, so the
// user may keep it as their own.
func RouteHandoverNote(s Spec) string {
	return fmt.Sprintf("destroyed canary_release %s; this route now sends every request to Service %s and is yours: "+
		"keep, edit or delete it", s.Name, s.Apex)
}

// WithoutReleaseLabels drops the labels that make an object a release's.
func WithoutReleaseLabels(labels map[string]string) map[string]string {
	out := maps.Clone(labels)
	delete(out, LabelRelease)
	delete(out, LabelManagedBy)
	return out
}

// WithLeftBehind is annotations with AnnotationLeftBehind set to note.
func WithLeftBehind(annotations map[string]string, note string) map[string]string {
	out := maps.Clone(annotations)
	if out == nil {
		out = map[string]string{}
	}
	out[AnnotationLeftBehind] = note
	return out
}
