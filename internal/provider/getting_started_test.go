package provider

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// TestAccGettingStarted_asPasted follows the getting-started guide as a new user would, as far
// as the local stack allows: it builds the provider into Terraform's implied local mirror (a
// HOME of its own), copies the guide's files into an empty folder, has the stack's API server
// judge every manifest with a server-side dry run, and runs the guide's terraform init,
// validate and plan against the stack. Only what names the user's cluster changes: the
// kubeconfig, its context, the namespace and Prometheus's address.
func TestAccGettingStarted_asPasted(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	raw, err := os.ReadFile(examplesRoot + "/getting-started/app.yaml")
	if err != nil {
		t.Fatal(err)
	}
	resources := map[string]schema.GroupVersionResource{
		"GatewayClass": {Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gatewayclasses"},
		"Gateway":      {Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"},
		"Deployment":   {Group: "apps", Version: "v1", Resource: "deployments"},
	}
	docs := strings.Split(string(raw), "\n---\n")
	if len(docs) != 3 {
		t.Fatalf("app.yaml holds %d documents, want 3", len(docs))
	}
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("%v:\n%s", err, doc)
		}
		gvr, ok := resources[u.GetKind()]
		if !ok {
			t.Fatalf("no resource for kind %s", u.GetKind())
		}
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
		if u.GetNamespace() == "" {
			_, err = c.dyn.Resource(gvr).Create(context.Background(), u, dry)
		} else {
			u.SetNamespace(ns)
			_, err = c.dyn.Resource(gvr).Namespace(ns).Create(context.Background(), u, dry)
			if err == nil && u.GetKind() == "Deployment" {
				// The plan reads the release's target: kubectl apply -f app.yaml made it.
				_, err = c.dyn.Resource(gvr).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
			}
		}
		if err != nil {
			t.Errorf("%s %s: the API server refuses it: %v", u.GetKind(), u.GetName(), err)
		}
	}

	// Section 1: go build into ~/.terraform.d/plugins/registry.terraform.io/canary-release/canary/0.1.0/<os>_<arch>.
	home := t.TempDir()
	mirror := filepath.Join(home, ".terraform.d", "plugins", "registry.terraform.io", "canary-release", "canary", "0.1.0", runtime.GOOS+"_"+runtime.GOARCH)
	if err := os.MkdirAll(mirror, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(mirror, "terraform-provider-canary_v0.1.0"), ".")
	build.Dir = filepath.Join(examplesRoot, "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build into the local mirror: %v\n%s", err, out)
	}

	// Sections 2 and 6: the folder, with the user's cluster in place of the guide's.
	dir := filepath.Join(home, "getting-started")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := clientcmd.LoadFromFile(c.env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	yours := strings.NewReplacer(
		`config_path    = "~/.kube/config"`, `config_path    = "`+c.env.Kubeconfig+`"`,
		`config_context = "my-cluster"`, `config_context = "`+kubeconfig.CurrentContext+`"`,
		`namespace     = "demo"`, `namespace     = "`+ns+`"`,
		`"http://prometheus-server.monitoring:80"`, `"`+c.env.PrometheusURL+`"`,
	)
	for _, name := range []string{"terraform.tf", "variables.tf", "main.tf"} {
		src, err := os.ReadFile(filepath.Join(examplesRoot, "getting-started", name))
		if err != nil {
			t.Fatal(err)
		}
		text := string(src)
		if name == "main.tf" {
			if text = yours.Replace(text); text == string(src) || strings.Contains(text, "my-cluster") || strings.Contains(text, `"demo"`) {
				t.Fatalf("main.tf no longer names the cluster as this test expects:\n%s", src)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	terraform := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(c.env.TerraformPath, append(args, "-no-color")...)
		cmd.Dir = dir
		// A user's environment: no CLI configuration of the tests (no dev override), this HOME.
		for _, kv := range os.Environ() {
			if name, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(name, "TF_") && name != "HOME" {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "HOME="+home)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := terraform("init"); !strings.Contains(out, "Installing canary-release/canary v0.1.0") {
		t.Errorf("terraform init did not install the local build:\n%s", out)
	}
	if out := terraform("validate"); !strings.Contains(out, "The configuration is valid") {
		t.Errorf("terraform validate:\n%s", out)
	}
	if out := terraform("plan", "-var", "gateway_address=127.0.0.1"); !strings.Contains(out, "Plan: 1 to add, 0 to change, 0 to destroy") {
		t.Errorf("terraform plan does not add the release:\n%s", out)
	}
}
