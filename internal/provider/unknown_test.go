package provider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// unknownValuesConfig feeds the analysis, the webhook metadata, the hosts and the triggers
// from terraform_data outputs, which are unknown at plan time whenever the input changes.
func unknownValuesConfig(ns, image, weights, hookURL string) string {
	return fmt.Sprintf(`terraform {
  required_providers {
    canary = { source = "canary-release/canary" }
  }
}

resource "terraform_data" "settings" {
  input = {
    weights = %[3]s
    min     = 99
    host    = "podinfo.example.com"
    cmd     = "hey -z 1m http://podinfo-canary.%[1]s:9898/"
    image   = %[2]q
  }
}

resource "canary_release" "podinfo" {
  name          = "podinfo"
  namespace     = %[1]q
  mesh_provider = "osm"
  %[4]s
  triggers = { image = terraform_data.settings.output.image }
  service = {
    port  = 9898
    hosts = [terraform_data.settings.output.host]
  }
  analysis = {
    interval     = "2s"
    threshold    = 2
    step_weights = terraform_data.settings.output.weights
    metrics = [
      { name = "request-success-rate", interval = "10s", threshold_range = { min = terraform_data.settings.output.min } },
    ]
    webhooks = [
      { name = "smoke", type = "pre-rollout", url = "%[5]s", metadata = { cmd = terraform_data.settings.output.cmd } },
    ]
  }
}
`, ns, image, weights, manifestWorkload(image, "0"), hookURL)
}

// TestAccRelease_unknownValues plans a release whose settings are known only after apply, then
// applies it: the plan must not fail on the unknown values, and the apply uses the final ones.
func TestAccRelease_unknownValues(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	w := c.workdir(t)
	// The pre-rollout hook records the metadata it receives: the final value, not a placeholder.
	var mu sync.Mutex
	var cmds []string
	hook := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		var payload struct {
			Metadata map[string]string `json:"metadata"`
		}
		_ = json.NewDecoder(req.Body).Decode(&payload)
		mu.Lock()
		cmds = append(cmds, payload.Metadata["cmd"])
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	write := func(image, weights string) {
		t.Helper()
		config := unknownValuesConfig(ns, image, weights, hook.URL)
		if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("podinfo:6.0.0", "[10, 20]")
	if out, err := w.run("validate"); err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := w.run("destroy", "-auto-approve"); err != nil {
			t.Errorf("destroy: %v\n%s", err, out)
		}
	})
	write("podinfo:6.0.1", "[15, 30]")
	out, err := w.run("plan")
	if err != nil {
		t.Fatalf("plan with unknown values: %v\n%s", err, out)
	}
	if !strings.Contains(out, "(known after apply)") {
		t.Errorf("the plan shows no unknown value, so it tested nothing:\n%s", out)
	}
	rec := c.recordWeights(t, ns, "podinfo")
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("apply with the final values: %v\n%s", err, out)
	}
	if got := rec.seen(); !slices.Equal(got, []int64{15, 30, 0}) {
		t.Errorf("TrafficSplit canary weights were %v, want the final step_weights 15, 30, then 0", got)
	}
	c.judge(t, ns, "podinfo:6.0.1")
	mu.Lock()
	defer mu.Unlock()
	if want := "hey -z 1m http://podinfo-canary." + ns + ":9898/"; len(cmds) == 0 || cmds[len(cmds)-1] != want {
		t.Errorf("the pre-rollout hook received metadata.cmd %q, want %q", cmds, want)
	}
}
