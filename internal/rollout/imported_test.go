package rollout

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// An import rebuilds the manifest of the workload the release owns besides its primary, of
// whichever kind, without the release's own labels; two candidates are refused by name.
func TestImportedManifestRebuildsTheOwnedWorkload(t *testing.T) {
	ctx := context.Background()
	owned := map[string]string{router.LabelManagedBy: router.ManagedByValue, router.LabelRelease: "podinfo", "team": "a"}

	cs := newCluster()
	d := podinfo("podinfo:1", 3)
	d.Labels = owned
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	primary := podinfo("podinfo:0", 3)
	primary.Name, primary.Labels, primary.Annotations = "podinfo-primary", owned, map[string]string{AnnotationPrimarySpec: "x"}
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, primary, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := ImportedManifest(ctx, cs, "test", "podinfo", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: Deployment", "name: podinfo\n", "team: a", "image: podinfo:1"} {
		if !strings.Contains(got, want) {
			t.Errorf("manifest lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{router.LabelRelease, "replicas:", "podinfo:0"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("manifest holds %q:\n%s", unwanted, got)
		}
	}

	stray := podinfo("podinfo:1", 1)
	stray.Name, stray.Labels = "stray", owned
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, stray, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ImportedManifest(ctx, cs, "test", "podinfo", ""); err == nil || !strings.Contains(err.Error(), "owns more than one Deployment besides its primary (podinfo, stray)") {
		t.Errorf("two candidates: error = %v, want both named", err)
	}
	if got, err := ImportedManifest(ctx, cs, "test", "podinfo", "stray"); err != nil || !strings.Contains(got, "name: stray\n") {
		t.Errorf("the recorded target: %v\n%s", err, got)
	}

	ds := newCluster()
	daemon := podinfoDaemonSet("podinfo:2")
	daemon.Labels = owned
	if _, err := ds.AppsV1().DaemonSets("test").Create(ctx, daemon, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err = ImportedManifest(ctx, ds, "test", "podinfo", "podinfo")
	if err != nil || !strings.Contains(got, "kind: DaemonSet") || !strings.Contains(got, "image: podinfo:2") || !strings.Contains(got, "disk: ssd") {
		t.Errorf("a DaemonSet's manifest: %v\n%s", err, got)
	}
	if _, err := ImportedManifest(ctx, newCluster(), "test", "podinfo", ""); err == nil || !strings.Contains(err.Error(), "owns no Deployment besides its primary") {
		t.Errorf("nothing owned: error = %v", err)
	}
}
