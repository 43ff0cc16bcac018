package provider

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// planIsClean runs terraform plan and fails the test when it errors or proposes a change.
func (w *workdir) planIsClean(what string) {
	w.t.Helper()
	out, err := w.run("plan", "-detailed-exitcode")
	if err != nil {
		w.t.Fatalf("%s: plan is not clean (%v):\n%s", what, err, out)
	}
}

// Issue 20, item 1: a release that owns its Deployment (manifest) is imported after
// terraform state rm. The plan with the unchanged configuration errors on nothing and replaces
// nothing, and the next change rolls out.
func TestAccRelease_importManifest(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	w := c.workdir(t)
	w.write(ns, "podinfo:6.0.0", "0")
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = w.run("destroy", "-auto-approve") })
	if out, err := w.run("state", "rm", addr); err != nil {
		t.Fatalf("state rm: %v\n%s", err, out)
	}
	if out, err := w.run("import", addr, ns+"/podinfo"); err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	out, err := w.run("plan")
	if err != nil || strings.Contains(out, "must be replaced") || strings.Contains(out, `""`) {
		t.Fatalf("plan after the import: %v\n%s", err, out)
	}
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("apply after the import: %v\n%s", err, out)
	}
	w.planIsClean("after the import's apply")
	w.write(ns, "podinfo:6.0.1", "0")
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("the release after the import: %v\n%s", err, out)
	}
	c.judge(t, ns, "podinfo:6.0.1")
}

// Issue 20, item 4: a create_before_destroy replacement. The new instance takes the release
// over; the deposed one's destroy then dismantles nothing, says why, and the release keeps
// serving and releasing.
func TestAccRelease_createBeforeDestroy(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	w := c.workdir(t)
	w.extra = "lifecycle {\n    create_before_destroy = true\n  }"
	w.write(ns, "podinfo:6.0.0", "0")
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = w.run("destroy", "-auto-approve") })
	out, err := w.run("apply", "-auto-approve", "-replace="+addr)
	if err != nil {
		t.Fatalf("replacement: %v\n%s", err, out)
	}
	if text := strings.Join(strings.Fields(out), " "); !strings.Contains(text, "is now run by another resource instance") {
		t.Errorf("the deposed instance's destroy did not say why it left the release alone:\n%s", out)
	}
	ctx := context.Background()
	for _, svc := range []string{"podinfo", "podinfo-primary", "podinfo-canary"} {
		if _, err := c.kube.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{}); err != nil {
			t.Errorf("Service %s after the replacement: %v", svc, err)
		}
	}
	if _, err := c.kube.CoreV1().ConfigMaps(ns).Get(ctx, rollout.StateConfigMapName("podinfo"), metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Error("the state ConfigMap was deleted by the deposed instance")
	}
	c.judge(t, ns, "podinfo:6.0.0")
	w.planIsClean("after the replacement")
	w.write(ns, "podinfo:6.0.1", "0")
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("the release after the replacement: %v\n%s", err, out)
	}
	c.judge(t, ns, "podinfo:6.0.1")
}
