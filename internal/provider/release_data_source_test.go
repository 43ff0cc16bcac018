package provider

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// dataSourceAnalysis holds each of its two steps long enough for a read in between.
const dataSourceAnalysis = `
    interval    = "8s"
    threshold   = 2
    step_weight = 20
    max_weight  = 40
    metrics = [
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },
    ]`

// liveRelease is what the data source gives, as `terraform output -json` prints it.
type liveRelease struct {
	Target        string `json:"target"`
	MeshProvider  string `json:"mesh_provider"`
	Phase         string `json:"phase"`
	PrimaryWeight int    `json:"primary_weight"`
	CanaryWeight  int    `json:"canary_weight"`
	PrimaryImage  string `json:"primary_image"`
	CanaryImage   string `json:"canary_image"`
	Message       string `json:"message"`
}

// The data source, read from another Terraform configuration in the middle of a rollout and
// after it, tells what is live: the phase, the router's weights and both sides' images.
func TestAccReleaseDataSource_midRolloutAndAfter(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	w := c.workdir(t)
	writeRelease := func(image string) {
		t.Helper()
		config := `terraform {
  required_providers {
    canary = { source = "canary-release/canary" }
  }
}
` + releaseConfig(ns, manifestWorkload(image, "0"), dataSourceAnalysis, "")
		if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reader := c.workdir(t)
	readerConfig := `terraform {
  required_providers {
    canary = { source = "canary-release/canary" }
  }
}
data "canary_release" "live" {
  name      = "podinfo"
  namespace = "` + ns + `"
}
output "live" { value = data.canary_release.live }
`
	if err := os.WriteFile(filepath.Join(reader.dir, "main.tf"), []byte(readerConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	read := func() liveRelease {
		t.Helper()
		if out, err := reader.run("apply", "-auto-approve"); err != nil {
			t.Fatalf("reading the data source: %v\n%s", err, out)
		}
		cmd, out := reader.command("output", "-json", "live")
		if err := cmd.Run(); err != nil {
			t.Fatalf("terraform output: %v\n%s", err, out)
		}
		var live liveRelease
		if err := json.Unmarshal(out.Bytes(), &live); err != nil {
			t.Fatalf("output: %v\n%s", err, out)
		}
		return live
	}

	writeRelease("podinfo:1")
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = w.run("destroy", "-auto-approve") })

	writeRelease("podinfo:2")
	running := w.applyUntil(ns, phaseAt(rollout.PhaseProgressing, 20))
	mid := read()
	if mid.Phase != string(rollout.PhaseProgressing) || (mid.CanaryWeight != 20 && mid.CanaryWeight != 40) || mid.PrimaryWeight+mid.CanaryWeight != 100 {
		t.Errorf("mid-rollout read = %+v, want phase Progressing at a canary weight of 20 or 40 out of 100", mid)
	}
	if mid.PrimaryImage != "podinfo:1" || mid.CanaryImage != "podinfo:2" || mid.Target != "podinfo" || mid.MeshProvider != "osm" {
		t.Errorf("mid-rollout read = %+v, want the primary on podinfo:1 and the canary on podinfo:2", mid)
	}
	if err := <-running.done; err != nil {
		t.Fatalf("the rollout failed: %v\n%s", err, running.out)
	}

	after := read()
	if after.Phase != string(rollout.PhaseSucceeded) || after.PrimaryWeight != 100 || after.CanaryWeight != 0 || after.PrimaryImage != "podinfo:2" {
		t.Errorf("read after the rollout = %+v, want Succeeded, 100/0 and the primary on podinfo:2", after)
	}
	primary, canary, err := c.splitWeights(ns, "podinfo")
	if err != nil || int(primary) != after.PrimaryWeight || int(canary) != after.CanaryWeight {
		t.Errorf("the router object holds %d/%d (%v); the data source said %d/%d", primary, canary, err, after.PrimaryWeight, after.CanaryWeight)
	}

	// A release that does not exist is an error that names it.
	missing := strings.Replace(readerConfig, `name      = "podinfo"`, `name      = "nothing"`, 1)
	if err := os.WriteFile(filepath.Join(reader.dir, "main.tf"), []byte(missing), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := reader.run("plan"); err == nil || !strings.Contains(out, "No such canary_release") || !strings.Contains(out, `no canary_release named "nothing"`) {
		t.Errorf("reading a missing release: %v\n%s", err, out)
	}
}
