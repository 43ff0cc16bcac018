// Package localstack starts and describes the local test stack: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kwok with fake nodes, Prometheus and the mesh
// simulator, all on loopback (see stack.sh). Tests, the demo and benchmarks reach it
// through Ensure.
package localstack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/gofrs/flock"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Env describes a running stack. Every path is absolute.
type Env struct {
	Root          string // repository root
	Kubeconfig    string
	PrometheusURL string
	SimulatorURL  string
	// PushgatewayURL is the stack's Pushgateway, which Prometheus scrapes; empty for a stack
	// started before it had one (make up adds it).
	PushgatewayURL string
	// ProxyAddress is Traefik's web entry point (host:port), for real requests through a real
	// proxy; empty for a stack started before it had one.
	ProxyAddress string
	// ProxyAPIURL is Traefik's API (http://host:port, the traefik entry point), which shows the
	// configuration it applies; empty for a stack started before it was exported.
	ProxyAPIURL   string
	TerraformPath string // terraform in .local/tfbin
	CLIConfigFile string // terraform CLI configuration with dev_overrides for the provider
	ProviderDir   string // folder holding terraform-provider-canary
}

// Ensure returns the running stack, starting it with `stack.sh up` when it does not
// answer. A file lock keeps concurrent test binaries from starting it twice.
func Ensure(ctx context.Context) (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	dir := StackDir(root)
	envFile := filepath.Join(dir, "env")
	if env, err := loadReady(ctx, root, envFile); err == nil {
		return env, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lock := flock.New(filepath.Join(dir, "stack.lock"))
	locked, err := lock.TryLockContext(ctx, 250*time.Millisecond)
	if err != nil || !locked {
		return nil, fmt.Errorf("localstack: lock %s: %v", lock.Path(), err)
	}
	defer func() { _ = lock.Unlock() }() // the lock file's lock also ends with the process
	// Another process may have started the stack while this one waited for the lock.
	if env, err := loadReady(ctx, root, envFile); err == nil {
		return env, nil
	}
	if err := runStack(ctx, root, "up"); err != nil {
		return nil, err
	}
	return loadReady(ctx, root, envFile)
}

// RepoRoot walks up from the working directory to the folder holding go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("localstack: no go.mod above the working directory")
		}
		dir = parent
	}
}

// StackDir is the folder of the stack's state, logs and env file: CANARY_STACK_DIR or
// <root>/.local.
func StackDir(root string) string {
	if dir := os.Getenv("CANARY_STACK_DIR"); dir != "" {
		return dir
	}
	return filepath.Join(root, ".local")
}

// runStack runs stack.sh with the given command; its output goes to stderr so a slow
// cold start shows progress, and the tail comes back in the error.
func runStack(ctx context.Context, root string, args ...string) error {
	script := filepath.Join(root, "internal", "testbed", "localstack", "stack.sh")
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Dir = root
	var tail tailBuffer
	cmd.Stdout = io.MultiWriter(os.Stderr, &tail)
	cmd.Stderr = cmd.Stdout
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("localstack: stack.sh %s: %v\n%s", strings.Join(args, " "), err, tail.String())
	}
	return nil
}

// tailBuffer keeps the last few KiB written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	const keep = 4096
	t.b = append(t.b, p...)
	if len(t.b) > keep {
		t.b = t.b[len(t.b)-keep:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

func loadReady(ctx context.Context, root, envFile string) (*Env, error) {
	env, err := Load(root, envFile)
	if err != nil {
		return nil, err
	}
	if err := processesAlive(filepath.Join(filepath.Dir(envFile), "run")); err != nil {
		return nil, err
	}
	if err := env.Ready(ctx); err != nil {
		return nil, err
	}
	return env, nil
}

// processesAlive checks that every process in the stack's pid files still runs, so a
// component that died (kwok, say, whose nodes would then turn NotReady) gets restarted.
func processesAlive(runDir string) error {
	files, err := filepath.Glob(filepath.Join(runDir, "*.pid"))
	if err != nil {
		return err
	}
	for _, f := range files {
		pid, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		stat, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pid)), "stat"))
		if err != nil {
			return fmt.Errorf("localstack: %s: process %s is gone", filepath.Base(f), strings.TrimSpace(string(pid)))
		}
		// The state follows the command name in parentheses; Z is a zombie.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return fmt.Errorf("localstack: %s: process %s has exited", filepath.Base(f), strings.TrimSpace(string(pid)))
		}
	}
	return nil
}

var exportLine = regexp.MustCompile(`^export ([A-Za-z_][A-Za-z0-9_]*)='([^']*)'$`)

// Load parses an env file written by stack.sh (lines `export NAME='value'`).
func Load(root, envFile string) (*Env, error) {
	f, err := os.Open(envFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	vars := map[string]string{}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if m := exportLine.FindStringSubmatch(scanner.Text()); m != nil {
			vars[m[1]] = m[2]
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	env := &Env{
		Root:           root,
		Kubeconfig:     vars["KUBECONFIG"],
		PrometheusURL:  vars["CANARY_PROMETHEUS_ADDRESS"],
		SimulatorURL:   vars["CANARY_SIMULATOR_ADDRESS"],
		PushgatewayURL: vars["CANARY_PUSHGATEWAY_ADDRESS"],
		ProxyAddress:   vars["CANARY_PROXY_ADDRESS"],
		ProxyAPIURL:    vars["CANARY_PROXY_API_ADDRESS"],
		TerraformPath:  vars["CANARY_TERRAFORM"],
		CLIConfigFile:  vars["TF_CLI_CONFIG_FILE"],
		ProviderDir:    vars["CANARY_PROVIDER_DIR"],
	}
	for name, v := range map[string]string{
		"KUBECONFIG": env.Kubeconfig, "CANARY_PROMETHEUS_ADDRESS": env.PrometheusURL,
		"CANARY_SIMULATOR_ADDRESS": env.SimulatorURL, "CANARY_TERRAFORM": env.TerraformPath,
		"TF_CLI_CONFIG_FILE": env.CLIConfigFile, "CANARY_PROVIDER_DIR": env.ProviderDir,
	} {
		if v == "" {
			return nil, fmt.Errorf("localstack: %s does not set %s", envFile, name)
		}
	}
	return env, nil
}

// Ready checks that the API server (/readyz) and Prometheus (/-/ready) answer.
func (e *Env) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cfg, err := e.RESTConfig()
	if err != nil {
		return err
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	if err := get(ctx, client, strings.TrimSuffix(cfg.Host, "/")+"/readyz"); err != nil {
		return fmt.Errorf("localstack: kube-apiserver: %w", err)
	}
	if err := get(ctx, http.DefaultClient, e.PrometheusURL+"/-/ready"); err != nil {
		return fmt.Errorf("localstack: prometheus: %w", err)
	}
	return nil
}

func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// RESTConfig reads the stack's kubeconfig.
func (e *Env) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("localstack: kubeconfig %s: %w", e.Kubeconfig, err)
	}
	// Tests create many objects quickly; client-go's default 5 QPS would throttle them.
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

// Clients returns a typed and a dynamic client for the stack's API server.
func (e *Env) Clients() (kubernetes.Interface, dynamic.Interface, error) {
	cfg, err := e.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	typed, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return typed, dyn, nil
}

// TerraformEnv lists the variables a terraform subprocess needs to use the stack and the
// locally built provider; append it to os.Environ(). PATH starts with .local/tfbin.
func (e *Env) TerraformEnv() []string {
	return []string{
		"KUBECONFIG=" + e.Kubeconfig,
		"KUBE_CONFIG_PATH=" + e.Kubeconfig,
		"CANARY_PROMETHEUS_ADDRESS=" + e.PrometheusURL,
		"CANARY_SIMULATOR_ADDRESS=" + e.SimulatorURL,
		"TF_CLI_CONFIG_FILE=" + e.CLIConfigFile,
		"PATH=" + filepath.Dir(e.TerraformPath) + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
}

// InvariantViolations returns the simulator's invariant violations recorded for a
// namespace (GET /invariants?namespace=NS), one "Kind/name: message" line each.
func (e *Env) InvariantViolations(ctx context.Context, namespace string) ([]string, error) {
	u := e.SimulatorURL + "/invariants?namespace=" + url.QueryEscape(namespace)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("localstack: simulator: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("localstack: GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(body, &entries); err != nil {
		return nil, fmt.Errorf("localstack: GET %s: %w", u, err)
	}
	out := make([]string, 0, len(entries))
	for _, raw := range entries {
		out = append(out, describeViolation(raw))
	}
	return out, nil
}

// describeViolation renders one /invariants entry (internal/testbed/meshsim's InvariantEntry:
// time, namespace, object, message) as "Kind/name: message"; other shapes are kept as
// text so nothing reported is lost.
func describeViolation(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var entry struct {
		Object  string `json:"object"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &entry) == nil && entry.Message != "" {
		if entry.Object == "" {
			return entry.Message
		}
		return entry.Object + ": " + entry.Message
	}
	return string(raw)
}
