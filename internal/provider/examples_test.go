package provider

import (
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// examplesRoot is the repository's examples folder, which the docs render.
const examplesRoot = "../../examples"

// copyExamples copies the examples to a temporary folder, so that module paths resolve and no
// .terraform folder is left in the checkout, and returns the copy's root.
func copyExamples(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "examples")
	if err := os.CopyFS(dst, os.DirFS(examplesRoot)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// exampleDirs lists the folders under root that hold Terraform files.
func exampleDirs(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		// The recipes need the kubernetes and helm providers, which cannot be installed
		// here: TestRecipes reads them instead (fmt -check still covers them).
		if err == nil && d.IsDir() && d.Name() == "recipes" {
			return filepath.SkipDir
		}
		if err != nil || d.IsDir() || filepath.Ext(p) != ".tf" || seen[filepath.Dir(p)] {
			return err
		}
		seen[filepath.Dir(p)] = true
		dirs = append(dirs, filepath.Dir(p))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 5 {
		t.Fatalf("found %d example folders, want at least 5: %v", len(dirs), dirs)
	}
	return dirs
}

// TestAccExamples_validate checks that every example folder is formatted and validates on its
// own, with this build of the provider and no other provider.
func TestAccExamples_validate(t *testing.T) {
	c := testAccStack(t)
	root := copyExamples(t)
	w := &workdir{t: t, c: c, dir: root}
	if out, err := w.run("fmt", "-check", "-recursive", "-diff"); err != nil {
		t.Fatalf("terraform fmt -check: %v (run make generate, which formats the examples)\n%s", err, out)
	}
	for _, dir := range exampleDirs(t, root) {
		rel, _ := filepath.Rel(root, dir)
		t.Run(rel, func(t *testing.T) {
			w := &workdir{t: t, c: c, dir: dir}
			// get installs local modules; init would also look the provider up in the
			// registry, which the dev override makes needless and this machine cannot reach.
			if out, err := w.run("get"); err != nil {
				t.Fatalf("terraform get: %v\n%s", err, out)
			}
			out, err := w.run("validate")
			if err != nil || !strings.Contains(out, "The configuration is valid") {
				t.Fatalf("terraform validate: %v\n%s", err, out)
			}
		})
	}
	// README's configuration, as a reader pastes it into an empty folder.
	t.Run("README", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "readme")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		blocks := readmeConfigurations(t)
		if len(blocks) == 0 {
			t.Fatal("README.md holds no ```hcl block with a terraform block")
		}
		for i, block := range blocks {
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(block), 0o644); err != nil {
				t.Fatal(err)
			}
			w := &workdir{t: t, c: c, dir: dir}
			if out, err := w.run("fmt", "-check", "-diff"); err != nil {
				t.Errorf("README.md's configuration %d is not formatted: %v\n%s", i+1, err, out)
			}
			if out, err := w.run("validate"); err != nil || !strings.Contains(out, "The configuration is valid") {
				t.Errorf("README.md's configuration %d: terraform validate: %v\n%s", i+1, err, out)
			}
		}
	})
}

// readmeConfigurations are README's ```hcl blocks that hold a whole configuration (a terraform
// block): what a reader copies into an empty folder.
func readmeConfigurations(t *testing.T) []string {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(examplesRoot, "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, part := range strings.Split(string(body), "```hcl\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		if strings.Contains(block, "terraform {") {
			blocks = append(blocks, block)
		}
	}
	return blocks
}

// TestAccExamples_serviceModule applies the root module for three services through one
// for_each module block, then releases a new version of all three where checkout's fails its
// analysis: the apply fails naming checkout and the metric, checkout keeps its old primary,
// the two others are promoted, and no router leaves traffic on a canary.
func TestAccExamples_serviceModule(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	dir := filepath.Join(copyExamples(t), "service-module")
	w := &workdir{t: t, c: c, dir: dir}
	if out, err := w.run("get"); err != nil {
		t.Fatalf("terraform get: %v\n%s", err, out)
	}
	names := []string{"frontend", "backend", "checkout"}
	// release writes the services' variables for one version; failing gets pods whose
	// requests the simulator fails, so its analysis fails.
	release := func(version, failing string) []string {
		services := map[string]any{}
		for _, name := range names {
			service := map[string]any{"image": "ghcr.io/example/" + name, "version": version}
			if name == failing {
				service["pod_annotations"] = map[string]string{meshsim.AnnotationErrorRate: "1"}
			}
			services[name] = service
		}
		file := filepath.Join(dir, "release-"+version+".tfvars.json")
		vars, err := json.Marshal(map[string]any{"namespace": ns, "interval": "2s", "metric_interval": "10s", "services": services})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, vars, 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"-var-file", file}
	}
	if out, err := w.run(append([]string{"apply", "-auto-approve"}, release("1.0.0", "")...)...); err != nil {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	next := release("1.0.1", "checkout")
	t.Cleanup(func() {
		if out, err := w.run(append([]string{"destroy", "-auto-approve"}, next...)...); err != nil {
			t.Errorf("destroy: %v\n%s", err, out)
		}
	})
	recorders := map[string]*weightRecorder{}
	for _, name := range names {
		recorders[name] = c.recordWeights(t, ns, name)
	}
	out, err := w.run(append([]string{"apply", "-auto-approve"}, next...)...)
	if err == nil {
		t.Fatalf("release of 1.0.1 succeeded, want checkout's analysis to fail it\n%s", out)
	}
	failed := wrappedPattern(`Canary analysis failed at canary weight 10%: metric request-success-rate returned \d+\.\d\d, ` +
		`outside threshold_range \[min 99\]`)
	if !failed.MatchString(out) || !strings.Contains(out, `module.service["checkout"].canary_release.this`) {
		t.Errorf("release of 1.0.1 failed with:\n%s\nwant an error for module.service[\"checkout\"] that names request-success-rate", out)
	}
	if n := strings.Count(out, "Error: "); n != 1 {
		t.Errorf("release of 1.0.1 reported %d errors, want only checkout's\n%s", n, out)
	}
	want := map[string]string{
		"frontend": "ghcr.io/example/frontend:1.0.1",
		"backend":  "ghcr.io/example/backend:1.0.1",
		"checkout": "ghcr.io/example/checkout:1.0.0",
	}
	for name, image := range want {
		d, err := c.deployment(ns, name+"-primary")
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Spec.Template.Spec.Containers[0].Image; got != image {
			t.Errorf("%s-primary runs %s, want %s", name, got, image)
		}
		split := routerObject{gvr: trafficSplits, name: name, weights: func(u *unstructured.Unstructured) (int64, int64, error) {
			return backendWeights(u, name)
		}}
		if primary, canary, err := c.liveWeights(ns, split); err != nil || primary != 100 || canary != 0 {
			t.Errorf("%s's TrafficSplit is at primary %d, canary %d (%v), want 100 and 0", name, primary, canary, err)
		}
	}
	wantSteps := map[string][]int64{"frontend": {10, 25, 50, 0}, "backend": {10, 25, 50, 0}, "checkout": {10, 0}}
	for name, steps := range wantSteps {
		if got := recorders[name].seen(); !slices.Equal(got, steps) {
			t.Errorf("%s's TrafficSplit canary weights were %v, want %v", name, got, steps)
		}
	}
	// A failed apply leaves the root outputs as they were, so the phases are read from the state.
	wantPhases := map[string]string{"frontend": "Succeeded", "backend": "Succeeded", "checkout": "Failed"}
	if got := w.modulePhases(); !maps.Equal(got, wantPhases) {
		t.Errorf("the state's phases are %v, want %v", got, wantPhases)
	}
}

// modulePhases reads each module instance's release phase from terraform show -json, by the
// instance's key.
func (w *workdir) modulePhases() map[string]string {
	w.t.Helper()
	cmd, out := w.command("show", "-json", "-no-color")
	if err := cmd.Run(); err != nil {
		w.t.Fatalf("terraform show: %v\n%s", err, out)
	}
	var state struct {
		Values struct {
			RootModule struct {
				ChildModules []struct {
					Resources []struct {
						Values struct {
							Status *struct {
								Phase string `json:"phase"`
							} `json:"status"`
						} `json:"values"`
					} `json:"resources"`
					Address string `json:"address"`
				} `json:"child_modules"`
			} `json:"root_module"`
		} `json:"values"`
	}
	if err := json.Unmarshal(out.Bytes(), &state); err != nil {
		w.t.Fatalf("terraform show -json: %v\n%s", err, out)
	}
	phases := map[string]string{}
	for _, m := range state.Values.RootModule.ChildModules {
		key := strings.TrimSuffix(strings.TrimPrefix(m.Address, `module.service["`), `"]`)
		for _, r := range m.Resources {
			if r.Values.Status != nil {
				phases[key] = r.Values.Status.Phase
			}
		}
	}
	return phases
}
