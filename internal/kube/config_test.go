package kube

import (
	"os"
	"path/filepath"
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
	for _, k := range []string{"KUBE_HOST", "KUBE_TOKEN", "KUBE_CONFIG_PATH", "KUBE_CTX", "KUBE_CLUSTER_CA_CERT_DATA", "KUBE_CLIENT_CERT_DATA", "KUBE_CLIENT_KEY_DATA", "KUBE_INSECURE"} {
		t.Setenv(k, "")
	}
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
	cfg, err = Config{}.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://ambient.example:6443" || cfg.BearerToken != "ambient-token" {
		t.Errorf("host %s, token %q: want the ambient kubeconfig when nothing is explicit", cfg.Host, cfg.BearerToken)
	}
}
