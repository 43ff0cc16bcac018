package localstack

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func kwokModuleDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "sigs.k8s.io", "kwok@v0.8.0")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("kwok module source not downloaded: %v", err)
	}
	return dir
}

func TestRenderStagesKeepsAnnotatedPodsUnready(t *testing.T) {
	data, err := RenderStages(kwokModuleDir(t))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := DecodeManifests(data)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byName := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		names = append(names, o.GetName())
		byName[o.GetName()] = o
	}
	want := []string{"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete", "pod-running-unready"}
	if !slices.Equal(names, want) {
		t.Fatalf("stages %v, want %v", names, want)
	}
	exprs := func(stage string) []string {
		list, _, _ := unstructured.NestedSlice(byName[stage].Object, "spec", "selector", "matchExpressions")
		var out []string
		for _, e := range list {
			m := e.(map[string]any)
			out = append(out, fmt.Sprintf("%s %s %v", m["key"], m["operator"], m["values"]))
		}
		return out
	}
	if got := exprs("pod-ready"); !slices.Contains(got, `.metadata.annotations["sim.canary-release.dev/ready"] NotIn [false]`) {
		t.Errorf("pod-ready selector %v does not exclude never-ready pods", got)
	}
	if got := exprs("pod-running-unready"); !slices.Contains(got, `.metadata.annotations["sim.canary-release.dev/ready"] In [false]`) {
		t.Errorf("pod-running-unready selector %v does not pick never-ready pods", got)
	}
	tmpl, _, _ := unstructured.NestedString(byName["pod-ready"].Object, "spec", "next", "statusTemplate")
	if !strings.Contains(tmpl, "phase: Running") {
		t.Errorf("pod-ready template lost its content: %q", tmpl)
	}
}

func TestLoadParsesEnvFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "env")
	content := `# comment
export KUBECONFIG='/s/state/kubeconfig'
export KUBE_CONFIG_PATH='/s/state/kubeconfig'
export CANARY_PROMETHEUS_ADDRESS='http://127.0.0.1:19090'
export CANARY_SIMULATOR_ADDRESS='http://127.0.0.1:19095'
export CANARY_PUSHGATEWAY_ADDRESS='http://127.0.0.1:19091'
export TF_CLI_CONFIG_FILE='/c/terraformrc'
export CANARY_PROVIDER_DIR='/c/provider'
export CANARY_TERRAFORM='/c/tfbin/terraform'
export PATH='/c/tfbin':"$PATH"
`
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := Load("/repo", file)
	if err != nil {
		t.Fatal(err)
	}
	want := Env{
		Root: "/repo", Kubeconfig: "/s/state/kubeconfig", PrometheusURL: "http://127.0.0.1:19090",
		SimulatorURL: "http://127.0.0.1:19095", PushgatewayURL: "http://127.0.0.1:19091", TerraformPath: "/c/tfbin/terraform",
		CLIConfigFile: "/c/terraformrc", ProviderDir: "/c/provider",
	}
	if *env != want {
		t.Fatalf("Load = %+v, want %+v", *env, want)
	}
	t.Setenv("PATH", "/usr/bin")
	got := env.TerraformEnv()
	for _, kv := range []string{
		"KUBE_CONFIG_PATH=/s/state/kubeconfig", "CANARY_PROMETHEUS_ADDRESS=http://127.0.0.1:19090",
		"TF_CLI_CONFIG_FILE=/c/terraformrc", "PATH=/c/tfbin:/usr/bin",
	} {
		if !slices.Contains(got, kv) {
			t.Errorf("TerraformEnv() = %v lacks %s", got, kv)
		}
	}

	if err := os.WriteFile(file, []byte("export KUBECONFIG='/k'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load("/repo", file); err == nil || !strings.Contains(err.Error(), "does not set") {
		t.Errorf("Load of an incomplete file: %v", err)
	}
}

func TestInvariantViolations(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/invariants" {
			http.NotFound(w, r)
			return
		}
		switch r.URL.Query().Get("namespace") {
		case "clean":
			fmt.Fprint(w, `[]`)
		case "none":
			fmt.Fprint(w, `null`) // what encoding a nil slice gives
		case "dirty":
			fmt.Fprint(w, `[{"time":"2026-12-02T13:00:00Z","namespace":"dirty","object":"TrafficSplit/podinfo","message":"weights sum to 90"},`+
				`{"message":"no object"},"plain text",{"other":1}]`)
		default:
			http.Error(w, "boom", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	env := &Env{SimulatorURL: srv.URL}
	got, err := env.InvariantViolations(t.Context(), "clean")
	if err != nil || len(got) != 0 {
		t.Errorf("clean: %v, %v", got, err)
	}
	got, err = env.InvariantViolations(t.Context(), "none")
	if err != nil || len(got) != 0 {
		t.Errorf("none: %v, %v", got, err)
	}
	got, err = env.InvariantViolations(t.Context(), "dirty")
	if err != nil || !slices.Equal(got, []string{"TrafficSplit/podinfo: weights sum to 90", "no object", "plain text", `{"other":1}`}) {
		t.Errorf("dirty: %q, %v", got, err)
	}
	if _, err := env.InvariantViolations(t.Context(), "broken"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("broken: %v", err)
	}
}
