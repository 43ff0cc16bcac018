package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ambientKubeconfig writes a kubeconfig with a token and a CA and makes it the ambient one.
func ambientKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config")
	const cfg = `apiVersion: v1
kind: Config
clusters:
- name: ambient
  cluster:
    server: https://ambient.example:6443
    certificate-authority-data: YW1iaWVudC1jYQ==
users:
- name: ambient
  user:
    token: ambient-token
contexts:
- name: ambient
  context: {cluster: ambient, user: ambient}
current-context: ambient
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range Env {
		t.Setenv(k, "")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", path)
	return path
}

func TestExplicitHostBorrowsNothingFromTheAmbientKubeconfig(t *testing.T) {
	ambientKubeconfig(t)
	cfg, err := Config{Host: "https://explicit.example:6443", Token: "explicit-token"}.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://explicit.example:6443" || cfg.BearerToken != "explicit-token" || len(cfg.CAData) != 0 {
		t.Errorf("host %s, token %q, CA %q: want only the explicit settings", cfg.Host, cfg.BearerToken, cfg.CAData)
	}
	cfg, err = Config{Host: "https://explicit.example:6443"}.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BearerToken != "" || len(cfg.CAData) != 0 {
		t.Errorf("an explicit host without credentials borrowed the ambient token %q or CA %q", cfg.BearerToken, cfg.CAData)
	}
}

func TestConfigPathIsMergedWithExplicitAttributes(t *testing.T) {
	path := ambientKubeconfig(t)
	cfg, err := Config{ConfigPath: path, Host: "https://override.example:6443"}.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://override.example:6443" || cfg.BearerToken != "ambient-token" {
		t.Errorf("host %s, token %q: want the override's host with the named kubeconfig's token", cfg.Host, cfg.BearerToken)
	}
}

// As in the kubernetes provider, a kubeconfig is read only when it is named: KUBECONFIG (and
// ~/.kube/config) would be whatever cluster the last kubectl command pointed at.
func TestNoKubeconfigIsReadUnlessNamed(t *testing.T) {
	path := ambientKubeconfig(t)
	if cfg, err := (Config{}).RESTConfig(); err == nil {
		t.Fatalf("nothing configured, KUBECONFIG=%s: got the cluster %s, want an error", path, cfg.Host)
	} else if !strings.Contains(err.Error(), "KUBE_CONFIG_PATH") || !strings.Contains(err.Error(), "neither KUBECONFIG nor ~/.kube/config") {
		t.Errorf("error %q: want it to name the settings and say that KUBECONFIG is not read", err)
	}
	t.Setenv("KUBE_CONFIG_PATH", path)
	cfg, err := (Config{}).RESTConfig()
	if err != nil || cfg.Host != "https://ambient.example:6443" {
		t.Fatalf("KUBE_CONFIG_PATH names the kubeconfig: got %v, %v", cfg, err)
	}
}

// The six settings of the kubernetes provider that were missing, from attributes and from
// their variables.
func TestTheKubernetesProvidersSettings(t *testing.T) {
	path := ambientKubeconfig(t)
	second := filepath.Join(t.TempDir(), "second")
	const cfg2 = `apiVersion: v1
kind: Config
clusters:
- name: second
  cluster: {server: "https://second.example:6443"}
users:
- name: second-user
  user: {token: second-token}
contexts: []
`
	if err := os.WriteFile(second, []byte(cfg2), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Config{ConfigPaths: []string{path, second}, ConfigContextCluster: "second", ConfigContextAuthInfo: "second-user",
		TLSServerName: "api.internal", ProxyURL: "http://proxy.example:3128"}.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://second.example:6443" || cfg.BearerToken != "second-token" || cfg.ServerName != "api.internal" || cfg.Proxy == nil {
		t.Errorf("host %s, token %q, server name %q, proxy set %v: want the merged kubeconfigs' second cluster and user, the server name and the proxy",
			cfg.Host, cfg.BearerToken, cfg.ServerName, cfg.Proxy != nil)
	}
	cfg, err = Config{Host: "https://basic.example:6443", Username: "admin", Password: "secret"}.RESTConfig()
	if err != nil || cfg.Username != "admin" || cfg.Password != "secret" {
		t.Errorf("username and password: got %v, %v", cfg, err)
	}
	t.Setenv("KUBE_CONFIG_PATHS", path+string(os.PathListSeparator)+second)
	t.Setenv("KUBE_CTX_CLUSTER", "second")
	t.Setenv("KUBE_CTX_AUTH_INFO", "second-user")
	t.Setenv("KUBE_TLS_SERVER_NAME", "api.internal")
	cfg, err = (Config{}).RESTConfig()
	if err != nil || cfg.Host != "https://second.example:6443" || cfg.BearerToken != "second-token" || cfg.ServerName != "api.internal" {
		t.Errorf("from the KUBE_* variables: got %v, %v", cfg, err)
	}
	if _, err := (Config{ConfigPath: path, ConfigPaths: []string{second}}).RESTConfig(); err == nil || !strings.Contains(err.Error(), "config_path and config_paths") {
		t.Errorf("config_path with config_paths: got %v, want an error naming both", err)
	}
}

// A kubeconfig with several contexts needs config_context: Terraform drops a misspelled one
// inside the kubernetes object without a word, and the current context may be another cluster.
func TestSeveralContextsNeedConfigContext(t *testing.T) {
	ambientKubeconfig(t)
	path := filepath.Join(t.TempDir(), "two")
	const two = `apiVersion: v1
kind: Config
clusters:
- {name: staging, cluster: {server: "https://staging.example:6443"}}
- {name: prod, cluster: {server: "https://prod.example:6443"}}
users:
- {name: me, user: {token: t}}
contexts:
- {name: staging, context: {cluster: staging, user: me}}
- {name: prod, context: {cluster: prod, user: me}}
current-context: staging
`
	if err := os.WriteFile(path, []byte(two), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Config{ConfigPath: path}.RESTConfig()
	if err == nil || !strings.Contains(err.Error(), "2 contexts (prod, staging): set kubernetes.config_context") {
		t.Fatalf("two contexts, none chosen: got %v, want an error naming both and config_context", err)
	}
	cfg, err := Config{ConfigPath: path, ConfigContext: "prod"}.RESTConfig()
	if err != nil || cfg.Host != "https://prod.example:6443" {
		t.Fatalf("config_context prod: got %v, %v", cfg, err)
	}
	t.Setenv("KUBE_CTX", "prod")
	if cfg, err := (Config{ConfigPath: path}).RESTConfig(); err != nil || cfg.Host != "https://prod.example:6443" {
		t.Fatalf("KUBE_CTX prod: got %v, %v", cfg, err)
	}
}
