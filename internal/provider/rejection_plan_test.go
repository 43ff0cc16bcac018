package provider

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	fwresource "github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	kubescheme "k8s.io/client-go/kubernetes/scheme"

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

// A manifest release's plan is never fully known when its manifest changes (the computed values
// follow it), which once skipped the warning: the plan that asks again for a rejected manifest
// warns as a target_ref's does.
func TestPlanWarnsOfARejectedManifest(t *testing.T) {
	ctx := context.Background()
	manifest := func(image string) string {
		return `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"podinfo"},"spec":{"replicas":2,` +
			`"selector":{"matchLabels":{"app":"podinfo"}},"template":{"metadata":{"labels":{"app":"podinfo"}},` +
			`"spec":{"containers":[{"name":"podinfo","image":"` + image + `"}]}}}}`
	}
	plan := osmPlan(t)
	set := func(p *tfsdk.Plan, at path.Path, v any) {
		if d := p.SetAttribute(ctx, at, v); d.HasError() {
			t.Fatalf("setting %s: %v", at, d)
		}
	}
	set(&plan, path.Root("target_ref"), types.ObjectNull(plan.Schema.GetAttributes()["target_ref"].GetType().(attr.TypeWithAttributeTypes).AttributeTypes()))
	set(&plan, path.Root("manifest"), manifest("podinfo:2"))
	prior := tfsdk.State{Schema: plan.Schema, Raw: plan.Raw.Copy()}
	set(&plan, path.Root("manifest"), manifest("podinfo:3-bad"))
	set(&plan, path.Root("rollout_plan"), types.StringUnknown())
	if plan.Raw.IsFullyKnown() {
		t.Fatal("the test's plan is fully known; a changed manifest's is not")
	}
	var rejected appsv1.Deployment
	if err := json.Unmarshal([]byte(manifest("podinfo:3-bad")), &rejected); err != nil {
		t.Fatal(err)
	}
	status, _ := json.Marshal(rollout.Status{Phase: rollout.PhaseFailed, LastPromotedSpec: "old", Rejected: &rollout.Rejection{
		Revision: rollout.TemplateHash(&rejected), At: time.Date(2026, 12, 4, 1, 2, 3, 0, time.UTC), Check: "request-success-rate", Reason: "returned 50.00"}})
	kube := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: rollout.StateConfigMapName("podinfo"), Namespace: "shop"},
		Data: map[string]string{"status.json": string(status), "format": "2"}})
	res := &ReleaseResource{c: &clients{kube: kube, dynamic: dynamicfake.NewSimpleDynamicClient(kubescheme.Scheme)}}
	resp := fwresource.ModifyPlanResponse{Plan: plan}
	res.ModifyPlan(ctx, fwresource.ModifyPlanRequest{Plan: plan, State: prior}, &resp)
	var warned []string
	for _, w := range resp.Diagnostics.Warnings() {
		if w.Summary() == "canary_release keeps a rejected revision out" {
			warned = append(warned, w.Detail())
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "revision "+rollout.TemplateHash(&rejected)) || !strings.Contains(warned[0], "request-success-rate") {
		t.Fatalf("the plan of a rejected manifest warns %q, want one warning naming revision %s and its check (all diagnostics: %v)",
			warned, rollout.TemplateHash(&rejected), resp.Diagnostics)
	}
}
