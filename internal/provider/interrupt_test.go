package provider

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// TestAccRelease_interrupt presses Ctrl-C on a real `terraform apply` in the middle of the
// analysis: traffic must end on the primary, the canary at zero, and the next plan must know.
// It runs the provider binary that `make up` built, through the CLI's dev_overrides, because
// resource.Test cannot interrupt an apply.
func TestAccRelease_interrupt(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	dir := t.TempDir()
	write := func(image string) {
		config := `terraform {
  required_providers {
    canary = { source = "canary-release/canary" }
  }
}
` + releaseConfig(ns, manifestWorkload(image, "0"), healthyAnalysis, "")
		if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tf := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, c.env.TerraformPath, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), c.env.TerraformEnv()...)
		return cmd
	}
	ctx := context.Background()

	write("podinfo:6.0.0")
	if out, err := tf(ctx, "apply", "-auto-approve", "-no-color").CombinedOutput(); err != nil {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = tf(ctx, "destroy", "-auto-approve").Run() })

	write("podinfo:6.0.1")
	rec := c.recordWeights(t, ns, "podinfo")
	var out bytes.Buffer
	apply := tf(ctx, "apply", "-auto-approve", "-no-color")
	apply.Stdout, apply.Stderr = &out, &out
	if err := apply.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !slicesContain(rec.seen(), 20) {
		if time.Now().After(deadline) {
			_ = apply.Process.Kill()
			t.Fatalf("the rollout never reached 20%%; weights %v\n%s", rec.seen(), out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	interrupted := time.Now()
	if err := apply.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := apply.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("interrupted apply ended with %v, want a failure\n%s", err, out.String())
	}
	if took := time.Since(interrupted); took > 30*time.Second {
		t.Errorf("the apply took %s to stop after Ctrl-C", took)
	}
	if !strings.Contains(out.String(), "interrupted") {
		t.Errorf("the apply's output does not say it was interrupted:\n%s", out.String())
	}

	for _, check := range []func() error{
		func() error { return c.checkSplit(ns, 100, 0)(nil) },
		func() error { return c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0")(nil) },
		func() error { return c.checkReady(ns, "podinfo-primary")(nil) },
		func() error { return c.checkReplicas(ns, "podinfo", 0)(nil) },
	} {
		if err := check(); err != nil {
			t.Error(err)
		}
	}
	st, ok, err := rollout.LoadState(ctx, c.kube, ns, "podinfo")
	if err != nil || !ok || st.Status.Phase != rollout.PhaseFailed || !strings.Contains(st.Status.Message, "interrupted") {
		t.Errorf("cluster state after Ctrl-C = %+v (found %v, %v); want phase Failed saying interrupted", st.Status, ok, err)
	}
	// The next plan proposes the release again: exit code 2 means "changes present".
	plan := tf(ctx, "plan", "-detailed-exitcode", "-no-color")
	planOut, err := plan.CombinedOutput()
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("plan after Ctrl-C: %v, want exit code 2 (changes)\n%s", err, planOut)
	}
}

func slicesContain(s []int64, v int64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
