package rollout

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// workloadAPI is what the engine asks of the API server about its two workloads, the target
// and its -primary copy. The engine reasons in Deployments: a Deployment passes through, and
// another kind (daemonSets) is read and written through a Deployment-shaped view of itself, so
// the one engine releases every kind that Flagger releases with a -primary copy. A
// StatefulSet is released in place instead (statefulset.go) and never comes here.
type workloadAPI interface {
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

// workloadsOf is the API of the release's workload kind in its namespace.
func workloadsOf(kube kubernetes.Interface, rel Release) workloadAPI {
	if rel.daemonSet() {
		return daemonSets{api: kube.AppsV1().DaemonSets(rel.Namespace)}
	}
	return kube.AppsV1().Deployments(rel.Namespace)
}

// workloads is workloadsOf the workload's release.
func (w workload) workloads() workloadAPI { return workloadsOf(w.kube, w.rel) }

// WorkloadKind is the kind of the release's target and primary, as messages name it.
func (r Release) WorkloadKind() string {
	switch r.TargetKind {
	case KindDaemonSet, KindStatefulSet:
		return r.TargetKind
	}
	return "Deployment"
}

// ListWorkloads lists the release's kind of workload (a DaemonSet as its Deployment-shaped
// view), for readers outside the engine such as the data source.
func ListWorkloads(ctx context.Context, kube kubernetes.Interface, rel Release, opts metav1.ListOptions) (*appsv1.DeploymentList, error) {
	return workloadsOf(kube, rel).List(ctx, opts)
}

// GetWorkload reads one workload of the release's kind, as ListWorkloads does.
func GetWorkload(ctx context.Context, kube kubernetes.Interface, rel Release, name string) (*appsv1.Deployment, error) {
	return workloadsOf(kube, rel).Get(ctx, name, metav1.GetOptions{})
}
