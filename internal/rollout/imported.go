package rollout

import (
	"context"
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"
)

// ImportedManifest rebuilds the manifest of a release that owns its Deployment, for an import:
// the state ConfigMap never records the manifest (it may carry secrets), but the Deployment it
// made is in the cluster, labelled as the release's. target is the name the record gives
// (empty in records older than format 2: the release's only non-primary Deployment is taken).
// The YAML holds the API server's defaults, so the first plan after an import shows an
// update to the configured manifest, which applies without a rollout when the templates agree.
func ImportedManifest(ctx context.Context, kube kubernetes.Interface, namespace, release, target string) (string, error) {
	list, err := kube.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{LabelSelector: router.LabelRelease + "=" + release})
	if err != nil {
		return "", err
	}
	var found *appsv1.Deployment
	for i := range list.Items {
		d := &list.Items[i]
		if d.Annotations[AnnotationPrimarySpec] != "" || (target != "" && d.Name != target) {
			continue
		}
		if found != nil {
			return "", fmt.Errorf("release %s/%s owns more than one Deployment besides its primary (%s, %s); import it with target_ref, or delete the stray one", namespace, release, found.Name, d.Name)
		}
		found = d
	}
	if found == nil {
		for _, kind := range kinds.Others() {
			if manifest, ok, err := importedOfKind(ctx, kube, kind, namespace, release, target); ok || err != nil {
				return manifest, err
			}
		}
		return "", fmt.Errorf("release %s/%s owns no Deployment besides its primary, so its manifest cannot be rebuilt; import a release of target_ref, or apply the manifest first", namespace, release)
	}
	labels := maps.Clone(found.Labels)
	for k := range (workload{rel: Release{Name: release}}).ownedLabels() {
		delete(labels, k)
	}
	m := appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: found.Name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: found.Spec.Selector, Template: found.Spec.Template, Strategy: found.Spec.Strategy,
			MinReadySeconds: found.Spec.MinReadySeconds, ProgressDeadlineSeconds: found.Spec.ProgressDeadlineSeconds,
		},
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// importedOfKind is ImportedManifest for a release of a manifest of another kind than a
// Deployment (internal/workload): the workload it owns besides its primary, as its kind's
// manifest holds it. ok is false when it owns none.
func importedOfKind(ctx context.Context, kube kubernetes.Interface, kind, namespace, release, target string) (manifest string, ok bool, err error) {
	rel := Release{Namespace: namespace, Name: release, TargetKind: kind}
	list, err := workloadsOf(kube, rel).List(ctx, metav1.ListOptions{LabelSelector: router.LabelRelease + "=" + release})
	if err != nil {
		return "", false, err
	}
	for i := range list.Items {
		v := &list.Items[i]
		if v.Annotations[AnnotationPrimarySpec] != "" || (target != "" && v.Name != target) {
			continue
		}
		labels := maps.Clone(v.Labels)
		for k := range (workload{rel: rel}).ownedLabels() {
			delete(labels, k)
		}
		one := int32(1)
		out, err := yaml.Marshal(kinds.Object(kind, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: v.Name, Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: v.Spec.Selector, Template: v.Spec.Template, Strategy: v.Spec.Strategy,
				MinReadySeconds: v.Spec.MinReadySeconds},
		}))
		return string(out), true, err
	}
	return "", false, nil
}
