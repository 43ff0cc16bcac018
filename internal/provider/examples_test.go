package provider

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
}

// TestAccExamples_serviceModule applies the root module that uses the service module twice,
// then releases a new frontend version through it.
func TestAccExamples_serviceModule(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	dir := filepath.Join(copyExamples(t), "service-module")
	w := &workdir{t: t, c: c, dir: dir}
	if out, err := w.run("get"); err != nil {
		t.Fatalf("terraform get: %v\n%s", err, out)
	}
	vars := func(frontend string) []string {
		return []string{"-var", "namespace=" + ns, "-var", "interval=2s", "-var", "metric_interval=10s", "-var", "frontend_version=" + frontend}
	}
	if out, err := w.run(append([]string{"apply", "-auto-approve"}, vars("1.0.0")...)...); err != nil {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := w.run(append([]string{"destroy", "-auto-approve"}, vars("1.0.1")...)...); err != nil {
			t.Errorf("destroy: %v\n%s", err, out)
		}
	})
	rec := c.recordWeights(t, ns, "frontend")
	if out, err := w.run(append([]string{"apply", "-auto-approve"}, vars("1.0.1")...)...); err != nil {
		t.Fatalf("release of frontend 1.0.1: %v\n%s", err, out)
	}
	if got := rec.seen(); !slices.Equal(got, []int64{10, 25, 50, 0}) {
		t.Errorf("frontend's TrafficSplit canary weights were %v, want the module's steps 10, 25, 50, then 0", got)
	}
	for name, image := range map[string]string{"frontend": "ghcr.io/example/frontend:1.0.1", "backend": "ghcr.io/example/backend:1.0.0"} {
		d, err := c.deployment(ns, name+"-primary")
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Spec.Template.Spec.Containers[0].Image; got != image {
			t.Errorf("%s-primary runs %s, want %s", name, got, image)
		}
	}
	cmd, out := w.command("output", "-json", "phases")
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), `"frontend":"Succeeded"`) {
		t.Errorf("output phases: %v %s, want frontend Succeeded", err, out)
	}
}
