package knative

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Knative's labels on a Revision and on its pods.
const (
	LabelService  = "serving.knative.dev/service"
	LabelRevision = "serving.knative.dev/revision"
)

// target is the user's Knative Service as the release sees it: the revisions Knative made of
// its templates, and the two the split names.
type target struct {
	r    *knativeRouter
	kube kubernetes.Interface
}

func newTarget(c router.Clients, s router.Spec) *target {
	return &target{r: newRouter(c, s, Driver{}.Describe().Capabilities), kube: c.Kube}
}

var _ mesh.Target = (*target)(nil)

func (t *target) Revisions(ctx context.Context) (mesh.Revisions, error) {
	svc, err := t.r.read(ctx)
	if err != nil {
		return mesh.Revisions{}, err
	}
	p := pinsOf(svc)
	revs := mesh.Revisions{Primary: p.primary, Canary: p.canary}
	if !observed(svc) {
		// Knative has not yet made a revision of the template the user applied last: its
		// latest revisions are those of an older one, and the next canary is not known yet.
		return revs, nil
	}
	revs.LatestCreated, _, _ = unstructured.NestedString(svc.Object, "status", "latestCreatedRevisionName")
	revs.LatestReady, _, _ = unstructured.NestedString(svc.Object, "status", "latestReadyRevisionName")
	return revs, nil
}

// observed: Knative's status describes the Service's current spec (status.observedGeneration
// has reached metadata.generation) and its Configuration's current template. The API server
// raises the generation on each change of spec; until Knative's controllers have caught up,
// latestCreatedRevisionName still names the revision of the template before, and reading it as
// the latest would release nothing. The Service's reconciler sets observedGeneration whatever
// its Configuration did: while the Configuration has not made a revision of the new template
// yet, it marks ConfigurationsReady Unknown with reason OutOfDate and leaves the latest
// revisions as they were (knative.dev/serving, MarkConfigurationNotReconciled).
func observed(svc *unstructured.Unstructured) bool {
	seen, _, _ := unstructured.NestedInt64(svc.Object, "status", "observedGeneration")
	if seen < svc.GetGeneration() {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(svc.Object, "status", "conditions")
	for _, item := range conds {
		if c, _ := item.(map[string]any); c["type"] == "ConfigurationsReady" && c["status"] == "Unknown" && c["reason"] == "OutOfDate" {
			return false
		}
	}
	return true
}

// revision reads one of the Service's revisions; another Service's is refused.
func (t *target) revision(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	rev, err := router.Fetch(ctx, t.r.dyn, RevisionResource, t.r.s.Namespace, name)
	if err != nil {
		return nil, fmt.Errorf("reading Knative Revision %s/%s: %w", t.r.s.Namespace, name, err)
	}
	if rev == nil {
		return nil, fmt.Errorf("knative Revision %s/%s does not exist", t.r.s.Namespace, name)
	}
	if owner := rev.GetLabels()[LabelService]; owner != t.r.s.Target {
		return nil, fmt.Errorf("knative Revision %s/%s belongs to Service %q, not %s", t.r.s.Namespace, name, owner, t.r.s.Target)
	}
	return rev, nil
}

// Serving: the Revision is Ready and at least one of its pods is. Knative counts a revision
// scaled to zero as Ready (its activator wakes it), which is not a side that serves now.
func (t *target) Serving(ctx context.Context, name string) (bool, error) {
	rev, err := t.revision(ctx, name)
	if err != nil {
		return false, err
	}
	if !conditionTrue(rev, "Ready") {
		return false, nil
	}
	var pods *corev1.PodList
	err = router.WithRetry(ctx, func() (err error) {
		pods, err = t.kube.CoreV1().Pods(t.r.s.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: labels.SelectorFromSet(labels.Set{LabelRevision: name}).String()})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("listing the pods of Knative Revision %s/%s: %w", t.r.s.Namespace, name, err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
	}
	return false, nil
}

func conditionTrue(obj *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, item := range conds {
		c, _ := item.(map[string]any)
		if c["type"] == typ {
			return c["status"] == "True"
		}
	}
	return false
}

// PinPrimary pins the admitted revision as the primary, moving the primary's share to it in
// the same write. A revision that serves nothing may only be pinned while the primary's
// share is 0.
func (t *target) PinPrimary(ctx context.Context, proof mesh.Admission) error {
	name := proof.Revision()
	if !proof.Admits(name) {
		return fmt.Errorf("%s: no proof admits revision %q as the primary", t.r.ref(), name)
	}
	return t.pin(ctx, name, func(p *pins) { p.primary = name }, func(w router.Weights) int { return w.Primary })
}

// PinCanary pins the canary revision; a change of revision is refused while the canary carries
// weight, so a new revision always starts at 0.
func (t *target) PinCanary(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("%s: no canary revision to pin", t.r.ref())
	}
	return t.pin(ctx, name, func(p *pins) { p.canary = name }, nil)
}

// pin sets one pin and the traffic that follows from it in one write. share, when set, is the
// weight the pinned side carries on; it must be 0 for a revision that does not serve.
func (t *target) pin(ctx context.Context, name string, set func(*pins), share func(router.Weights) int) error {
	if _, err := t.revision(ctx, name); err != nil {
		return fmt.Errorf("%s: %w", t.r.ref(), err)
	}
	return router.WithRetry(ctx, func() error {
		svc, err := router.GetOptional(ctx, t.r.dyn, ServiceResource, t.r.s.Namespace, t.r.s.Target)
		if err != nil {
			return err
		}
		if svc == nil {
			return &router.NotFoundError{Ref: t.r.ref()}
		}
		was := pinsOf(svc)
		now := was
		set(&now)
		if now == was {
			return nil
		}
		w, err := readTraffic(svc)
		if err != nil {
			// Nothing of the release's yet: the primary is being pinned for the first time, and
			// the split starts at 100/0 on it.
			if was.primary != "" {
				return fmt.Errorf("%s: %w", t.r.ref(), err)
			}
			w = router.Weights{Primary: 100}
		}
		if share == nil && w.Canary > 0 {
			return fmt.Errorf("%s: the canary revision %s still carries %d%%; a new canary revision starts at 0", t.r.ref(), was.canary, w.Canary)
		}
		if share != nil && share(w) > 0 {
			serving, err := t.Serving(ctx, name)
			if err != nil {
				return err
			}
			if !serving {
				return fmt.Errorf("%s: revision %s has no Ready pods, so it cannot take the primary's %d%%", t.r.ref(), name, share(w))
			}
		}
		traffic, err := render(now, w)
		if err != nil {
			return fmt.Errorf("%s: %w", t.r.ref(), err)
		}
		annotations := svc.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[AnnotationPrimaryRevision] = now.primary
		if now.canary != "" {
			annotations[AnnotationCanaryRevision] = now.canary
		}
		svc.SetAnnotations(annotations)
		if err := unstructured.SetNestedSlice(svc.Object, traffic, "spec", "traffic"); err != nil {
			return err
		}
		_, err = t.r.api().Update(ctx, svc, metav1.UpdateOptions{FieldManager: router.FieldManager})
		return err
	})
}
