package provider

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// The plan of a configuration that still asks for a rejected revision warns, naming the
// revision, when it failed and which check; retry_rejected or a changed template silences it.
func TestPlanWarnsOfARejectedRevision(t *testing.T) {
	ctx := context.Background()
	target := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: "apps"},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "podinfo", Image: "podinfo:2"}}}}}}
	rejected := rollout.Status{Phase: rollout.PhaseFailed, LastPromotedSpec: "old", Rejected: &rollout.Rejection{
		Revision: rollout.TemplateHash(target), At: time.Date(2026, 12, 4, 1, 2, 3, 0, time.UTC), Check: "request-success-rate", Reason: "returned 50.00"}}
	status, _ := json.Marshal(rejected)
	cs := fake.NewClientset(target, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: rollout.StateConfigMapName("podinfo"), Namespace: "apps"},
		Data: map[string]string{"status.json": string(status), "format": "2"}})
	eng := &rollout.Engine{Kube: cs}
	rel := rollout.Release{Namespace: "apps", Name: "podinfo", Target: "podinfo"}

	var diags diag.Diagnostics
	warnRejected(ctx, eng, rel, &diags)
	if diags.HasError() || diags.WarningsCount() != 1 {
		t.Fatalf("diagnostics %v, want one warning", diags)
	}
	detail := diags.Warnings()[0].Detail()
	for _, want := range []string{"revision " + rejected.Rejected.Revision, "2026-12-04T01:02:03Z", "request-success-rate", "retry_rejected"} {
		if !strings.Contains(detail, want) {
			t.Errorf("warning %q does not say %q", detail, want)
		}
	}

	retried := rel
	retried.RetryRejected = "2026-12-04"
	diags = nil
	if warnRejected(ctx, eng, retried, &diags); diags.WarningsCount() != 0 {
		t.Errorf("retry_rejected changed, still warned: %v", diags)
	}
	target.Spec.Template.Spec.Containers[0].Image = "podinfo:3"
	if _, err := cs.AppsV1().Deployments("apps").Update(ctx, target, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	diags = nil
	if warnRejected(ctx, eng, rel, &diags); diags.WarningsCount() != 0 {
		t.Errorf("a changed template is warned of: %v", diags)
	}
}
