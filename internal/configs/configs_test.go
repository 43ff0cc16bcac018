package configs

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// podSpec reads ConfigMap settings through envFrom and Secret token through a projected volume.
func podSpec() corev1.PodSpec {
	return corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}}},
		Volumes: []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "token"}}},
		}}}}},
	}
}

// The primary reads the copies of what it tracks; a config opted out of tracking is shared,
// and only the tracked data changes the revision.
func TestPrimaryReadsTheCopiesOfTrackedConfigs(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "test"}, Data: map[string]string{"MODE": "a"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: "test", Annotations: map[string]string{AnnotationTracking: "disabled"}}, Data: map[string][]byte{"t": []byte("x")}},
	)
	c := Copies{Kube: cs, Namespace: "test", Release: "podinfo", FieldManager: "test", CheckOwned: func(metav1.Object, string) error { return nil }}
	spec := podSpec()
	if got := Referenced(spec); !slices.Equal(got, []Ref{{"ConfigMap", "settings"}, {"Secret", "token"}}) {
		t.Fatalf("Referenced = %v", got)
	}
	tracked, err := c.Track(ctx, spec, "Deployment test/podinfo")
	if err != nil || len(tracked) != 1 || tracked[0].Ref != (Ref{"ConfigMap", "settings"}) {
		t.Fatalf("Track = %v, %v; want settings only (token opts out)", tracked, err)
	}
	if Revision("h", tracked) == "h" || Revision("h", nil) != "h" {
		t.Errorf("the revision must be the template hash without tracked data, and another with it")
	}
	if err := c.EnsurePrimary(ctx, tracked); err != nil {
		t.Fatal(err)
	}
	cp, err := cs.CoreV1().ConfigMaps("test").Get(ctx, "settings-primary", metav1.GetOptions{})
	if err != nil || cp.Data["MODE"] != "a" || cp.Annotations[AnnotationOwners] != "podinfo" {
		t.Fatalf("the primary's copy = %v, %v", cp, err)
	}
	UsePrimary(&spec, tracked)
	if got := Referenced(spec); !slices.Equal(got, []Ref{{"ConfigMap", "settings-primary"}, {"Secret", "token"}}) {
		t.Errorf("the primary reads %v; want the copy of settings and the shared token", got)
	}
	if err := c.DeleteAll(ctx, c.Used(spec)); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("test").Get(ctx, "settings-primary", metav1.GetOptions{}); err == nil {
		t.Error("the copy outlived its only owner")
	}
}

// Labels and annotations with an included prefix reach the primary; its own keys win, and
// the release's and the identity's keys are never copied.
func TestCopiedMetadata(t *testing.T) {
	m := Metadata{IncludePrefix: DefaultIncludeLabelPrefix}
	copied := m.CopiedFrom(map[string]string{"app.kubernetes.io/part-of": "shop", "app": "podinfo", "team": "a", "canary-release.dev/x": "y"}, "app")
	if len(copied) != 1 || copied["app.kubernetes.io/part-of"] != "shop" {
		t.Fatalf("copied = %v, want only app.kubernetes.io/part-of", copied)
	}
	tmpl := WithCopied(corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/part-of": "own"}}}, copied, nil)
	if tmpl.Labels["app.kubernetes.io/part-of"] != "own" {
		t.Errorf("the template's own value was replaced: %v", tmpl.Labels)
	}
	live := map[string]string{"app.kubernetes.io/version": "1", "kept": "k"}
	if got := m.ReplaceCopied(live, copied, "app"); len(got) != 2 || got["kept"] != "k" || got["app.kubernetes.io/part-of"] != "shop" {
		t.Errorf("ReplaceCopied = %v; a copied key the target dropped stays, or one not copied went", got)
	}
}
