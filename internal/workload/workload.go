// Package workload is the registry of the workload kinds: each kind is a driver, in a folder of
// its own. A kind that a release copies into a "-primary" gives the engine one
// Deployment-shaped API over its objects; a kind released in place gives it an in-place target
// (mesh.InPlace). The engine releases every kind through the same run loop and names none.
package workload

import (
	"context"
	"maps"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/workload/daemonset"
	"github.com/canary-release/terraform-provider-canary/internal/workload/statefulset"
)

// KindDeployment is target_ref.kind (or the manifest's kind) for a Deployment, the kind every
// other kind's API is shaped like.
const KindDeployment = "Deployment"

// API is what the engine asks of the API server about a release's two workloads, the target
// and its -primary copy. A Deployment passes through; another kind is read and written
// through a Deployment-shaped view of itself.
type API interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*appsv1.Deployment, error)
	List(ctx context.Context, opts metav1.ListOptions) (*appsv1.DeploymentList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, d *appsv1.Deployment, opts metav1.CreateOptions) (*appsv1.Deployment, error)
	Update(ctx context.Context, d *appsv1.Deployment, opts metav1.UpdateOptions) (*appsv1.Deployment, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	// UpdateScale sets how many pods a workload runs: a replica count for a Deployment; for
	// a DaemonSet, zero empties it and anything else runs it on every node it selects.
	UpdateScale(ctx context.Context, name string, s *autoscalingv1.Scale, opts metav1.UpdateOptions) (*autoscalingv1.Scale, error)
	// Patch takes a Deployment-shaped body (the manifest's view) and returns the view.
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*appsv1.Deployment, error)
}

// driver is one kind other than a Deployment.
type driver struct {
	api func(kube kubernetes.Interface, namespace string) API
	// object is the object of the kind that a view stands for, as a manifest holds it.
	object func(view *appsv1.Deployment) any
}

// drivers are the kinds other than a Deployment, by kind.
var drivers = map[string]driver{
	daemonset.Kind: {
		api: func(kube kubernetes.Interface, namespace string) API {
			return daemonset.New(kube.AppsV1().DaemonSets(namespace))
		},
		object: func(view *appsv1.Deployment) any { return daemonset.Of(view) },
	},
}

// For is the API of a kind of workload in a namespace; an empty kind is a Deployment.
func For(kube kubernetes.Interface, namespace, kind string) API {
	if d, ok := drivers[kind]; ok {
		return d.api(kube, namespace)
	}
	return kube.AppsV1().Deployments(namespace)
}

// Others are the kinds besides a Deployment, sorted.
func Others() []string { return slices.Sorted(maps.Keys(drivers)) }

// Object is the object of kind that view stands for, as a manifest of that kind holds it.
func Object(kind string, view *appsv1.Deployment) any {
	if d, ok := drivers[kind]; ok {
		return d.object(view)
	}
	out := view.DeepCopy()
	out.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: KindDeployment}
	return out
}

// Manifest is the manifest of kind that rebuilds a release's target from its view, for an
// import: its name, labels and what its pods run, with the API server's defaults.
func Manifest(kind string, view *appsv1.Deployment, labels map[string]string) any {
	if d, ok := drivers[kind]; ok {
		one := int32(1)
		return d.object(&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: view.Name, Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: view.Spec.Selector, Template: view.Spec.Template, Strategy: view.Spec.Strategy,
				MinReadySeconds: view.Spec.MinReadySeconds},
		})
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: KindDeployment},
		ObjectMeta: metav1.ObjectMeta{Name: view.Name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: view.Spec.Selector, Template: view.Spec.Template, Strategy: view.Spec.Strategy,
			MinReadySeconds: view.Spec.MinReadySeconds, ProgressDeadlineSeconds: view.Spec.ProgressDeadlineSeconds,
		},
	}
}

// Copied reports whether releases of kind run a "-primary" copy through For.
func Copied(kind string) bool {
	_, ok := drivers[kind]
	return ok || kind == KindDeployment || kind == ""
}

// InPlaceOptions tune an in-place target for one release.
type InPlaceOptions struct {
	// Deadline bounds each wait for the kind's controller (progress_deadline).
	Deadline time.Duration
	// Warn tells the user what they must know although the call went through.
	Warn func(summary, detail string)
}

// inPlace are the kinds released in place, by kind: the driver is the release's target, and
// its own router (its pods are its traffic).
var inPlace = map[string]func(kube kubernetes.Interface, namespace, name string, o InPlaceOptions) mesh.InPlace{
	statefulset.Kind: func(kube kubernetes.Interface, namespace, name string, o InPlaceOptions) mesh.InPlace {
		return statefulset.New(kube, namespace, name, statefulset.Options{Deadline: o.Deadline, Warn: o.Warn})
	},
}

// InPlace is the in-place target of a release of kind, named name in namespace; nil when the
// kind is not released in place.
func InPlace(kind string, kube kubernetes.Interface, namespace, name string, o InPlaceOptions) mesh.InPlace {
	if f, ok := inPlace[kind]; ok {
		return f(kube, namespace, name, o)
	}
	return nil
}

// ReleasedInPlace reports a kind released in place.
func ReleasedInPlace(kind string) bool {
	_, ok := inPlace[kind]
	return ok
}

// InPlaceKinds are the kinds released in place, sorted.
func InPlaceKinds() []string { return slices.Sorted(maps.Keys(inPlace)) }
