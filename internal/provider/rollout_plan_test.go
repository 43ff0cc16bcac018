package provider

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// rolloutPlanAnalysis is the example: four steps at a 10 s interval.
func rolloutPlanAnalysis(interval string) string {
	return `
    interval     = "` + interval + `"
    threshold    = 2
    step_weights = [5, 10, 25, 50]
    metrics = [
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },
    ]`
}

// The plan shows what the apply will do: rollout_plan, and a warning when the rollout may
// outlast timeouts.update. Applying it leaves no diff behind.
func TestAccRelease_rolloutPlan(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	w := c.workdir(t)
	write := func(image, interval, extra string) {
		t.Helper()
		config := `terraform {
  required_providers {
    canary = { source = "canary-release/canary" }
  }
}
` + releaseConfig(ns, manifestWorkload(image, "0"), rolloutPlanAnalysis(interval), extra)
		if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := w.run(args...)
		if err != nil {
			t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	planned := func() string {
		t.Helper()
		run("plan", "-out=tfplan")
		var p struct {
			ResourceChanges []struct {
				Change struct {
					After map[string]any `json:"after"`
				} `json:"change"`
			} `json:"resource_changes"`
		}
		if err := json.Unmarshal([]byte(run("show", "-json", "tfplan")), &p); err != nil || len(p.ResourceChanges) != 1 {
			t.Fatalf("plan JSON: %v", err)
		}
		text, _ := p.ResourceChanges[0].Change.After["rollout_plan"].(string)
		return text
	}

	write("podinfo:1", "10s", "")
	if got := planned(); got != noRolloutCreate {
		t.Errorf("create plan: rollout_plan = %q, want %q", got, noRolloutCreate)
	}
	run("apply", "tfplan")
	t.Cleanup(func() { _, _ = w.run("destroy", "-auto-approve") })

	write("podinfo:2", "10s", "")
	want := "weights: 5 → 10 → 25 → 50 → promote\n" +
		"checks: 4 intervals of 10s, each judging metric request-success-rate\n" +
		"gates: none; rollback at 2 failed checks\n" +
		"duration: 40s at best, 2m50s at worst (1 failed check below the threshold, readiness waits of 1m, every webhook at its timeout)"
	if got := planned(); got != want {
		t.Errorf("update plan: rollout_plan =\n%s\nwant\n%s", got, want)
	}
	if out := run("plan"); !strings.Contains(out, "5 → 10 → 25 → 50 → promote") || strings.Contains(out, "timeouts.update") {
		t.Errorf("the plan does not show the schedule, or warns without cause:\n%s", out)
	}

	// One hour of analysis against a 30-minute update timeout.
	write("podinfo:2", "15m", `timeouts = { update = "30m" }`)
	if out := run("plan"); !strings.Contains(out, "Warning: The rollout cannot finish within timeouts.update") ||
		!strings.Contains(out, "takes 1h, above timeouts.update (30m)") {
		t.Errorf("no timeout warning for a one-hour analysis:\n%s", out)
	}

	// The rollout runs, and the same configuration plans nothing afterwards.
	write("podinfo:2", "3s", "")
	run("apply", "-auto-approve")
	cmd, out := w.command("plan", "-detailed-exitcode", "-no-color")
	var exit *exec.ExitError
	if err := cmd.Run(); errors.As(err, &exit) && exit.ExitCode() == 2 {
		t.Errorf("the plan after the rollout is not empty (perpetual diff):\n%s", out)
	} else if err != nil {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	c.judge(t, ns, "podinfo:2")

	// A change that leaves the pod template alone runs no rollout.
	write("podinfo:2", "3s", "skip_analysis = false\n  revert_on_deletion = false")
	if got := planned(); got != noRolloutUnchanged {
		t.Errorf("rollout_plan = %q, want %q", got, noRolloutUnchanged)
	}
}
