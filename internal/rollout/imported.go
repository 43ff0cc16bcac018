package rollout

import (
	"context"
	"fmt"
	"maps"

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
	for _, kind := range append([]string{kinds.KindDeployment}, kinds.Others()...) {
		if manifest, ok, err := importedOfKind(ctx, kube, kind, namespace, release, target); ok || err != nil {
			return manifest, err
		}
	}
	return "", fmt.Errorf("release %s/%s owns no Deployment besides its primary, so its manifest cannot be rebuilt; import a release of target_ref, or apply the manifest first", namespace, release)
}

// importedOfKind is ImportedManifest for a manifest of one kind (internal/workload): the
// workload of that kind the release owns besides its primary, as the kind's manifest holds it.
// ok is false when it owns none.
func importedOfKind(ctx context.Context, kube kubernetes.Interface, kind, namespace, release, target string) (manifest string, ok bool, err error) {
	rel := Release{Namespace: namespace, Name: release, TargetKind: kind}
	list, err := workloadsOf(kube, rel).List(ctx, metav1.ListOptions{LabelSelector: router.LabelRelease + "=" + release})
	if err != nil {
		return "", false, err
	}
	found := -1
	for i := range list.Items {
		v := &list.Items[i]
		if v.Annotations[AnnotationPrimarySpec] != "" || (target != "" && v.Name != target) {
			continue
		}
		if found >= 0 {
			return "", false, fmt.Errorf("release %s/%s owns more than one %s besides its primary (%s, %s); import it with target_ref, or delete the stray one",
				namespace, release, rel.WorkloadKind(), list.Items[found].Name, v.Name)
		}
		found = i
	}
	if found < 0 {
		return "", false, nil
	}
	v := &list.Items[found]
	labels := maps.Clone(v.Labels)
	for k := range (workload{rel: rel}).ownedLabels() {
		delete(labels, k)
	}
	out, err := yaml.Marshal(kinds.Manifest(kind, v, labels))
	return string(out), true, err
}
