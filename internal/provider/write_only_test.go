package provider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// TestAccRelease_writeOnlySecrets: a webhook's url_wo and metadata_wo and an alert's address_wo
// reach the engine of every apply that has them, and never the Terraform state; a change of a
// write-only value alone plans nothing until its _wo_version changes; a destroy, which has no
// configuration, calls none of them and fails nothing.
func TestAccRelease_writeOnlySecrets(t *testing.T) {
	c := testAccStack(t)
	requireTerraform(t, c.env.TerraformPath, "1.11.0")
	t.Parallel()
	ns := c.namespace(t)
	const token = "xoxb-write-0NLY"
	var hookCalls, alertCalls atomic.Int32
	var sawMetadata atomic.Bool
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/hooks/"+token):
			hookCalls.Add(1)
			var payload struct {
				Metadata map[string]string `json:"metadata"`
			}
			if json.NewDecoder(r.Body).Decode(&payload) == nil && payload.Metadata["cmd"] == "load "+token {
				sawMetadata.Store(true)
			}
		case strings.HasPrefix(r.URL.Path, "/alerts/"+token):
			alertCalls.Add(1)
		default:
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer server.Close()

	w := c.workdir(t)
	write := func(image, hookPath string, version int) {
		t.Helper()
		analysis := fmt.Sprintf(`
    interval    = "2s"
    step_weight = 50
    max_weight  = 100
    metrics = [
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },
    ]
    webhooks = [
      { name = "load", url_wo = %q, url_wo_version = %d, metadata_wo = { cmd = "load %s" }, metadata_wo_version = 1 },
    ]
    alerts = [
      { name = "team", provider = { type = "generic", address_wo = %q, address_wo_version = 1 } },
    ]`, server.URL+hookPath, version, token, server.URL+"/alerts/"+token)
		w.writeRelease(c.env.PrometheusURL, ns, image, analysis)
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := w.run(args...)
		if err != nil {
			t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, tail(out, 4000))
		}
		return out
	}
	write("podinfo:1", "/hooks/"+token, 1)
	run("apply", "-auto-approve")
	write("podinfo:2", "/hooks/"+token, 1)
	run("apply", "-auto-approve")
	if hookCalls.Load() == 0 || alertCalls.Load() == 0 {
		t.Fatalf("the release called the webhook %d times and the alert %d times: the write-only values did not reach it", hookCalls.Load(), alertCalls.Load())
	}
	if !sawMetadata.Load() {
		t.Errorf("no webhook call carried metadata_wo's cmd")
	}
	raw, err := os.ReadFile(filepath.Join(w.dir, "terraform.tfstate"))
	if err != nil {
		t.Fatal(err)
	}
	if i := strings.Index(string(raw), token); i >= 0 {
		t.Errorf("the Terraform state holds a write-only value: …%s…", raw[max(0, i-200):min(len(raw), i+60)])
	}

	// A new url_wo alone plans nothing; with a new url_wo_version it plans an update.
	write("podinfo:2", "/hooks/"+token+"/rotated", 1)
	if out, err := w.run("plan", "-detailed-exitcode"); err != nil {
		t.Errorf("a change of url_wo alone planned a change (%v):\n%s", err, out)
	}
	write("podinfo:2", "/hooks/"+token+"/rotated", 2)
	if out, err := w.run("plan"); err != nil || !strings.Contains(out, "1 to change") {
		t.Errorf("a new url_wo_version planned no update (%v):\n%s", err, out)
	}

	before := alertCalls.Load() + hookCalls.Load()
	if out := run("destroy", "-auto-approve"); strings.Contains(out, `alert "team"`) {
		t.Errorf("the destroy warned of an alert it could not send:\n%s", out)
	}
	if after := alertCalls.Load() + hookCalls.Load(); after != before {
		t.Errorf("the destroy called write-only endpoints %d times; it has no configuration to take them from", after-before)
	}
}

// requireTerraform skips a test on a Terraform CLI older than atLeast.
func requireTerraform(t *testing.T, cli, atLeast string) {
	t.Helper()
	out, err := exec.Command(cli, "version", "-json").Output()
	if err != nil {
		t.Fatalf("%s version: %v", cli, err)
	}
	var v struct {
		Version string `json:"terraform_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s version -json: %v\n%s", cli, err, out)
	}
	got, err := version.NewVersion(v.Version)
	if err != nil {
		t.Fatal(err)
	}
	if got.LessThan(version.Must(version.NewVersion(atLeast))) {
		t.Skipf("Terraform %s: write-only attributes need %s or later", got, atLeast)
	}
}

// TestWriteOnlyTwinsAreCheckedAtPlan: url_wo stands for url, one of address and address_wo is
// set, and a write-only twin never sits beside its stored one.
func TestWriteOnlyTwinsAreCheckedAtPlan(t *testing.T) {
	requireTerraform(t, "terraform", "1.11.0")
	kubeconfig := offlineKubeconfig(t)
	hook := `[{ name = "load", url_wo = "http://loadtester.test/", url_wo_version = 1 }]`
	t.Run("url_wo alone", func(t *testing.T) {
		t.Parallel()
		resource.UnitTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{{
				Config: invalidConfig(kubeconfig, nil, map[string]string{"webhooks": hook}), PlanOnly: true, ExpectNonEmptyPlan: true,
			}},
		})
	})
	for name, tc := range map[string]struct {
		analysis map[string]string
		want     string
	}{
		"url and url_wo": {map[string]string{"webhooks": `[{ name = "load", url = "http://a.test/", url_wo = "http://b.test/" }]`},
			`Attribute "analysis.webhooks[0].url" cannot be specified when "analysis.webhooks[0].url_wo" is specified`},
		"url_wo_version alone": {map[string]string{"webhooks": `[{ name = "load", url = "http://a.test/", url_wo_version = 2 }]`},
			`Attribute "analysis.webhooks[0].url_wo" must be specified when "analysis.webhooks[0].url_wo_version" is specified`},
		"neither address": {map[string]string{"alerts": `[{ name = "team", provider = { type = "slack" } }]`},
			`analysis.alerts[0].provider (alert "team") needs address, or address_wo`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{{
					Config: invalidConfig(kubeconfig, nil, tc.analysis), PlanOnly: true,
					ExpectError: phrasesRegexp(strings.Fields(tc.want)),
				}},
			})
		})
	}
}
