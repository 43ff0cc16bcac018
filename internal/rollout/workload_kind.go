package rollout

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"
)

// workloadsOf is the API of the release's workload kind in its namespace (internal/workload):
// a kind released in place is its own target instead (in_place.go) and never comes here.
func workloadsOf(kube kubernetes.Interface, rel Release) kinds.API {
	return kinds.For(kube, rel.Namespace, rel.TargetKind)
}

// workloads is workloadsOf the workload's release.
func (w workload) workloads() kinds.API { return workloadsOf(w.kube, w.rel) }

// WorkloadKind is the kind of the release's target and primary, as messages name it.
func (r Release) WorkloadKind() string {
	switch r.TargetKind {
	case "":
		return kinds.KindDeployment
	}
	return r.TargetKind
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
