// Package daemonset is the DaemonSet workload driver: it releases a DaemonSet as Flagger does,
// with a "-primary" DaemonSet, through the Deployment-shaped API the engine works on.
package daemonset

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	appsclient "k8s.io/client-go/kubernetes/typed/apps/v1"
)

// A DaemonSet is released as Flagger releases it: a "-primary" DaemonSet runs the promoted
// template on every node, and the target (the canary) runs its pods only while it is
// analysed. A DaemonSet has no replica count, so "scaled to zero" is a node selector that no
// node matches (NodeSelectorEmptied); it is kept out of the revision, since the engine adds
// and removes it, not the user.
//
// The engine reads and writes a DaemonSet through a Deployment-shaped view (View):
// its template without that selector, zero replicas when emptied and else the nodes it is
// scheduled on, and the DaemonSet's pod counts as the replica counts readiness judges:
// desiredNumberScheduled (wanted), updatedNumberScheduled (updated), numberReady and
// numberAvailable, at its observedGeneration.

// Kind is target_ref.kind (or the manifest's kind) for a DaemonSet.
const Kind = "DaemonSet"

// NodeSelectorEmptied is the node selector key that empties a DaemonSet: no node carries it.
const NodeSelectorEmptied = "canary-release.dev/scale-to-zero"

// API is the engine's workload API over the DaemonSets of a namespace.
type API struct {
	api appsclient.DaemonSetInterface
}

// New is the API over the DaemonSets api reads and writes.
func New(api appsclient.DaemonSetInterface) API { return API{api: api} }

// Emptied reports a template that the engine emptied with NodeSelectorEmptied.
func Emptied(t corev1.PodTemplateSpec) bool {
	_, ok := t.Spec.NodeSelector[NodeSelectorEmptied]
	return ok
}

// SetEmptied adds or removes NodeSelectorEmptied, leaving the user's own node selector as it is.
func SetEmptied(t *corev1.PodTemplateSpec, empty bool) {
	if empty {
		t.Spec.NodeSelector = maps.Clone(t.Spec.NodeSelector)
		if t.Spec.NodeSelector == nil {
			t.Spec.NodeSelector = map[string]string{}
		}
		t.Spec.NodeSelector[NodeSelectorEmptied] = "true"
		return
	}
	if _, ok := t.Spec.NodeSelector[NodeSelectorEmptied]; !ok {
		return
	}
	t.Spec.NodeSelector = maps.Clone(t.Spec.NodeSelector)
	delete(t.Spec.NodeSelector, NodeSelectorEmptied)
	if len(t.Spec.NodeSelector) == 0 {
		t.Spec.NodeSelector = nil
	}
}

// View is the Deployment-shaped view of a DaemonSet the engine works on.
func View(ds *appsv1.DaemonSet) *appsv1.Deployment {
	tmpl := *ds.Spec.Template.DeepCopy()
	replicas := int32(0)
	if !Emptied(tmpl) {
		// At least one: a DaemonSet that no node runs never reads as Ready.
		replicas = max(ds.Status.DesiredNumberScheduled, 1)
	}
	SetEmptied(&tmpl, false)
	s := ds.Status
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: Kind},
		ObjectMeta: *ds.ObjectMeta.DeepCopy(),
		Spec: appsv1.DeploymentSpec{
			Replicas:             &replicas,
			Selector:             ds.Spec.Selector.DeepCopy(),
			Template:             tmpl,
			Strategy:             deploymentStrategyOf(ds.Spec.UpdateStrategy),
			MinReadySeconds:      ds.Spec.MinReadySeconds,
			RevisionHistoryLimit: ds.Spec.RevisionHistoryLimit,
		},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: s.ObservedGeneration,
			Replicas:           s.CurrentNumberScheduled + s.NumberMisscheduled,
			UpdatedReplicas:    s.UpdatedNumberScheduled,
			ReadyReplicas:      s.NumberReady,
			AvailableReplicas:  s.NumberAvailable,
		},
	}
}

// Of is the DaemonSet a view stands for: emptied when the view has zero replicas.
func Of(v *appsv1.Deployment) *appsv1.DaemonSet {
	tmpl := *v.Spec.Template.DeepCopy()
	SetEmptied(&tmpl, v.Spec.Replicas != nil && *v.Spec.Replicas == 0)
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: Kind},
		ObjectMeta: *v.ObjectMeta.DeepCopy(),
		Spec: appsv1.DaemonSetSpec{
			Selector:             v.Spec.Selector.DeepCopy(),
			Template:             tmpl,
			UpdateStrategy:       daemonSetStrategyOf(v.Spec.Strategy),
			MinReadySeconds:      v.Spec.MinReadySeconds,
			RevisionHistoryLimit: v.Spec.RevisionHistoryLimit,
		},
	}
}

// The view's strategy stands for the DaemonSet's: OnDelete as Recreate, which primaryStrategy
// turns into a rolling update that never lowers the primary's Ready pods.
func deploymentStrategyOf(s appsv1.DaemonSetUpdateStrategy) appsv1.DeploymentStrategy {
	out := appsv1.DeploymentStrategy{}
	switch s.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
		out.Type = appsv1.RecreateDeploymentStrategyType
	case appsv1.RollingUpdateDaemonSetStrategyType:
		out.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if r := s.RollingUpdate; r != nil {
		out.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxUnavailable: r.MaxUnavailable, MaxSurge: r.MaxSurge}
	}
	return out
}

func daemonSetStrategyOf(s appsv1.DeploymentStrategy) appsv1.DaemonSetUpdateStrategy {
	out := appsv1.DaemonSetUpdateStrategy{}
	switch s.Type {
	case appsv1.RecreateDeploymentStrategyType:
		out.Type = appsv1.OnDeleteDaemonSetStrategyType
	case appsv1.RollingUpdateDeploymentStrategyType:
		out.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if r := s.RollingUpdate; r != nil {
		out.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: r.MaxUnavailable, MaxSurge: r.MaxSurge}
	}
	return out
}

func (a API) Get(ctx context.Context, name string, opts metav1.GetOptions) (*appsv1.Deployment, error) {
	ds, err := a.api.Get(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	return View(ds), nil
}

func (a API) List(ctx context.Context, opts metav1.ListOptions) (*appsv1.DeploymentList, error) {
	list, err := a.api.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := &appsv1.DeploymentList{ListMeta: list.ListMeta, Items: make([]appsv1.Deployment, 0, len(list.Items))}
	for i := range list.Items {
		out.Items = append(out.Items, *View(&list.Items[i]))
	}
	return out, nil
}

func (a API) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := a.api.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return newViewWatch(w), nil
}

func (a API) Create(ctx context.Context, d *appsv1.Deployment, opts metav1.CreateOptions) (*appsv1.Deployment, error) {
	ds, err := a.api.Create(ctx, Of(d), opts)
	if err != nil {
		return nil, err
	}
	return View(ds), nil
}

func (a API) Update(ctx context.Context, d *appsv1.Deployment, opts metav1.UpdateOptions) (*appsv1.Deployment, error) {
	ds, err := a.api.Update(ctx, Of(d), opts)
	if err != nil {
		return nil, err
	}
	return View(ds), nil
}

func (a API) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return a.api.Delete(ctx, name, opts)
}

// UpdateScale empties the DaemonSet (zero) or lets it run on its nodes (anything else). It
// reads and writes the DaemonSet, so a conflict is retried by the caller (onAPIError).
func (a API) UpdateScale(ctx context.Context, name string, s *autoscalingv1.Scale, opts metav1.UpdateOptions) (*autoscalingv1.Scale, error) {
	ds, err := a.api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	empty := s.Spec.Replicas == 0
	if Emptied(ds.Spec.Template) != empty {
		SetEmptied(&ds.Spec.Template, empty)
		if _, err := a.api.Update(ctx, ds, opts); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Patch server-side-applies a manifest given as its view (patchManifest): the body is
// turned back into the DaemonSet it stands for.
func (a API) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*appsv1.Deployment, error) {
	if pt != types.ApplyPatchType || len(subresources) > 0 {
		return nil, fmt.Errorf("DaemonSet %s: only a server-side apply of the whole object is supported, not a %s patch", name, pt)
	}
	var view appsv1.Deployment
	if err := json.Unmarshal(data, &view); err != nil {
		return nil, err
	}
	body, err := json.Marshal(Of(&view))
	if err != nil {
		return nil, err
	}
	ds, err := a.api.Patch(ctx, name, pt, body, opts)
	if err != nil {
		return nil, err
	}
	return View(ds), nil
}
