package provider

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// clusterKubeconfig writes a kubeconfig of the stack's API server whose only context is
// named context, standing in for another cluster's.
func (c *testCluster) clusterKubeconfig(t *testing.T, dir, context string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(c.env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	current := cfg.Contexts[cfg.CurrentContext]
	if current == nil {
		t.Fatalf("the stack's kubeconfig has no current context %q", cfg.CurrentContext)
	}
	out := clientcmdapi.NewConfig()
	out.Clusters[context] = cfg.Clusters[current.Cluster]
	out.AuthInfos[context] = cfg.AuthInfos[current.AuthInfo]
	out.Contexts[context] = &clientcmdapi.Context{Cluster: context, AuthInfo: context}
	path := filepath.Join(dir, context+".kubeconfig")
	if err := clientcmd.WriteToFile(*out, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAccExamples_multiCluster applies examples/multi-cluster with its two provider aliases
// on two kubeconfigs (two namespaces of the stack stand in for two clusters): both waves
// initialise; a version whose pods fail in the first cluster fails the first wave and leaves
// the second untouched; the next version promotes the first wave, then the second.
func TestAccExamples_multiCluster(t *testing.T) {
	c := testAccStack(t)
	first, second := c.namespace(t), c.namespace(t)
	dir := filepath.Join(copyExamples(t), "multi-cluster")
	w := &workdir{t: t, c: c, dir: dir}
	if out, err := w.run("get"); err != nil {
		t.Fatalf("terraform get: %v\n%s", err, out)
	}
	configs := t.TempDir()
	cluster := func(name, ns string, annotations map[string]string) map[string]any {
		return map[string]any{
			"config_path": c.clusterKubeconfig(t, configs, name), "config_context": name,
			"prometheus_address": c.env.PrometheusURL, "namespace": ns, "pod_annotations": annotations,
		}
	}
	// vars writes the variables of one release of frontend; firstFails gives the first
	// cluster's pods a failure rate the analysis rejects.
	vars := func(version string, firstFails bool) []string {
		firstAnnotations := map[string]string{}
		if firstFails {
			firstAnnotations[meshsim.AnnotationErrorRate] = "1"
		}
		b, err := json.Marshal(map[string]any{
			"first_cluster":  cluster("first", first, firstAnnotations),
			"second_cluster": cluster("second", second, map[string]string{}),
			"services":       map[string]any{"frontend": map[string]string{"image": "ghcr.io/example/frontend", "version": version}},
			"interval":       "2s", "metric_interval": "10s",
		})
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "release-"+version+".tfvars.json")
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"-var-file", file}
	}
	apply := func(args []string) (string, error) {
		return w.run(append([]string{"apply", "-auto-approve"}, args...)...)
	}
	primaryImage := func(ns string) string {
		t.Helper()
		d, err := c.deployment(ns, "frontend-primary")
		if err != nil {
			t.Fatal(err)
		}
		return d.Spec.Template.Spec.Containers[0].Image
	}

	if out, err := apply(vars("1.0.0", false)); err != nil {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	last := vars("1.0.2", false)
	t.Cleanup(func() {
		if out, err := w.run(append([]string{"destroy", "-auto-approve"}, last...)...); err != nil {
			t.Errorf("destroy: %v\n%s", err, out)
		}
	})
	for _, ns := range []string{first, second} {
		if got := primaryImage(ns); got != "ghcr.io/example/frontend:1.0.0" {
			t.Fatalf("%s's primary runs %s after the first apply, want 1.0.0", ns, got)
		}
	}

	// 1.0.1 fails its analysis in the first cluster: the apply fails there, and the second
	// wave, which depends on it, is not applied at all.
	secondRec := c.recordWeights(t, second, "frontend")
	out, err := apply(vars("1.0.1", true))
	if err == nil {
		t.Fatalf("1.0.1 succeeded, want the first wave's analysis to fail it\n%s", out)
	}
	if !strings.Contains(out, `module.first_wave["frontend"].canary_release.this`) || !wrapped("Canary analysis failed").MatchString(out) {
		t.Errorf("1.0.1 failed with:\n%s\nwant the first wave's release to fail its analysis", out)
	}
	if strings.Contains(out, `module.second_wave["frontend"].canary_release.this: Modifying`) {
		t.Errorf("the second wave was touched after the first failed:\n%s", out)
	}
	if got := primaryImage(first); got != "ghcr.io/example/frontend:1.0.0" {
		t.Errorf("the first cluster's primary runs %s after the failed release, want 1.0.0", got)
	}
	if got := primaryImage(second); got != "ghcr.io/example/frontend:1.0.0" {
		t.Errorf("the second cluster's primary runs %s after the first wave failed, want 1.0.0", got)
	}
	if got := secondRec.seen(); len(got) != 0 {
		t.Errorf("the second cluster's canary weights moved to %v while the first wave failed, want none", got)
	}

	// 1.0.2 is healthy: the first wave promotes, then the second starts. Its canary's first
	// window must not hold 1.0.1's failing requests (the same pods' series).
	waitOutCanaryMetricWindow()
	out, err = apply(last)
	if err != nil {
		t.Fatalf("1.0.2: %v\n%s", err, out)
	}
	for _, ns := range []string{first, second} {
		if got := primaryImage(ns); got != "ghcr.io/example/frontend:1.0.2" {
			t.Errorf("%s's primary runs %s after 1.0.2, want 1.0.2", ns, got)
		}
	}
	firstDone := regexp.MustCompile(`module\.first_wave\["frontend"\]\.canary_release\.this: Modifications complete`).FindStringIndex(out)
	secondStart := regexp.MustCompile(`module\.second_wave\["frontend"\]\.canary_release\.this: Modifying`).FindStringIndex(out)
	if firstDone == nil || secondStart == nil || secondStart[0] < firstDone[0] {
		t.Errorf("the second wave did not wait for the first to promote:\n%s", out)
	}
}
