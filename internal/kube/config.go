// Package kube builds Kubernetes client configuration the way the helm and kubernetes
// providers do, and reaches cluster Services through the API server.
package kube

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Exec is a client-go credential plugin (kubeconfig `exec`).
type Exec struct {
	APIVersion string
	Command    string
	Args       []string
	Env        map[string]string
}

// Config is the provider's `kubernetes` block, with the kubernetes provider's attribute names.
// Empty fields fall back to that provider's environment variables (KUBE_*). As in the
// kubernetes and helm providers, no kubeconfig is read unless one is named (config_path,
// config_paths or their variables): an implicit ~/.kube/config or KUBECONFIG would move
// production traffic on whatever cluster the last kubectl command pointed at. With nothing
// configured, only the in-cluster service account is used, and InCluster says so.
type Config struct {
	ConfigPath            string
	ConfigPaths           []string
	ConfigContext         string
	ConfigContextAuthInfo string
	ConfigContextCluster  string
	Host                  string
	Username              string
	Password              string
	Token                 string
	ClusterCACertificate  string
	ClientCertificate     string
	ClientKey             string
	TLSServerName         string
	ProxyURL              string
	Insecure              bool
	Exec                  *Exec
	QPS                   float32
	Burst                 int
}

// Env lists the kubernetes provider's variables that Config falls back to, by field name in
// its documentation.
var Env = map[string]string{
	"host": "KUBE_HOST", "username": "KUBE_USER", "password": "KUBE_PASSWORD", "token": "KUBE_TOKEN",
	"config_path": "KUBE_CONFIG_PATH", "config_paths": "KUBE_CONFIG_PATHS", "config_context": "KUBE_CTX",
	"config_context_auth_info": "KUBE_CTX_AUTH_INFO", "config_context_cluster": "KUBE_CTX_CLUSTER",
	"cluster_ca_certificate": "KUBE_CLUSTER_CA_CERT_DATA", "client_certificate": "KUBE_CLIENT_CERT_DATA",
	"client_key": "KUBE_CLIENT_KEY_DATA", "tls_server_name": "KUBE_TLS_SERVER_NAME", "proxy_url": "KUBE_PROXY_URL",
	"insecure": "KUBE_INSECURE",
}

// withEnv fills empty fields from the kubernetes provider's variables.
func (c Config) withEnv(getenv func(string) string) Config {
	pick := func(v *string, attr string) {
		if *v == "" {
			*v = getenv(Env[attr])
		}
	}
	pick(&c.Host, "host")
	pick(&c.Username, "username")
	pick(&c.Password, "password")
	pick(&c.Token, "token")
	pick(&c.ConfigPath, "config_path")
	pick(&c.ConfigContext, "config_context")
	pick(&c.ConfigContextAuthInfo, "config_context_auth_info")
	pick(&c.ConfigContextCluster, "config_context_cluster")
	pick(&c.ClusterCACertificate, "cluster_ca_certificate")
	pick(&c.ClientCertificate, "client_certificate")
	pick(&c.ClientKey, "client_key")
	pick(&c.TLSServerName, "tls_server_name")
	pick(&c.ProxyURL, "proxy_url")
	if len(c.ConfigPaths) == 0 && c.ConfigPath == "" {
		if v := getenv(Env["config_paths"]); v != "" {
			c.ConfigPaths = filepath.SplitList(v)
		}
	}
	if !c.Insecure && getenv(Env["insecure"]) == "true" {
		c.Insecure = true
	}
	return c
}

// RESTConfig resolves the configuration: explicit attributes, then KUBE_* variables, then the
// in-cluster service account when nothing at all is configured.
func (c Config) RESTConfig() (*rest.Config, error) {
	cfg, _, err := c.Resolve()
	return cfg, err
}

// Resolve is RESTConfig, and reports whether the in-cluster service account was used because
// nothing was configured.
func (c Config) Resolve() (cfg *rest.Config, inCluster bool, err error) {
	c = c.withEnv(os.Getenv)
	cfg, inCluster, err = c.base()
	if err != nil {
		return nil, false, err
	}
	if c.QPS > 0 {
		cfg.QPS = c.QPS
	}
	if c.Burst > 0 {
		cfg.Burst = c.Burst
	}
	cfg.UserAgent = "terraform-provider-canary"
	return cfg, inCluster, nil
}

func (c Config) base() (*rest.Config, bool, error) {
	if c.ConfigPath != "" && len(c.ConfigPaths) > 0 {
		return nil, false, fmt.Errorf("config_path and config_paths name kubeconfigs both; set one of them")
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: c.ConfigContext}
	overrides.Context.AuthInfo = c.ConfigContextAuthInfo
	overrides.Context.Cluster = c.ConfigContextCluster
	if c.Host != "" {
		overrides.ClusterInfo.Server = c.Host
	}
	if c.ClusterCACertificate != "" {
		overrides.ClusterInfo.CertificateAuthorityData = []byte(c.ClusterCACertificate)
	}
	overrides.ClusterInfo.InsecureSkipTLSVerify = c.Insecure
	overrides.ClusterInfo.TLSServerName = c.TLSServerName
	overrides.ClusterInfo.ProxyURL = c.ProxyURL
	overrides.AuthInfo.Username = c.Username
	overrides.AuthInfo.Password = c.Password
	if c.Token != "" {
		overrides.AuthInfo.Token = c.Token
	}
	if c.ClientCertificate != "" {
		overrides.AuthInfo.ClientCertificateData = []byte(c.ClientCertificate)
	}
	if c.ClientKey != "" {
		overrides.AuthInfo.ClientKeyData = []byte(c.ClientKey)
	}
	if c.Exec != nil {
		exec := &clientcmdapi.ExecConfig{
			APIVersion:      c.Exec.APIVersion,
			Command:         c.Exec.Command,
			Args:            c.Exec.Args,
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		}
		for k, v := range c.Exec.Env {
			exec.Env = append(exec.Env, clientcmdapi.ExecEnvVar{Name: k, Value: v})
		}
		overrides.AuthInfo.Exec = exec
	}

	rules := &clientcmd.ClientConfigLoadingRules{}
	switch {
	case c.ConfigPath != "":
		rules.ExplicitPath = expandHome(c.ConfigPath)
	case len(c.ConfigPaths) > 0:
		for _, p := range c.ConfigPaths {
			rules.Precedence = append(rules.Precedence, expandHome(p))
		}
	}

	if c.Host == "" && rules.ExplicitPath == "" && len(rules.Precedence) == 0 {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, false, fmt.Errorf("no Kubernetes configuration: set kubernetes.config_path (or config_paths, or host with credentials), "+
				"or their variables KUBE_CONFIG_PATH, KUBE_CONFIG_PATHS or KUBE_HOST, or run inside a cluster. "+
				"As in the kubernetes provider, neither KUBECONFIG nor ~/.kube/config is read unless named (%v)", err)
		}
		return cfg, true, nil
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	if c.ConfigContext == "" && rules.ExplicitPath+strings.Join(rules.Precedence, "") != "" {
		// Terraform drops a misspelled key inside the kubernetes object without a word, so a
		// config_context typed wrongly would silently pick the kubeconfig's current context:
		// with several contexts, that may be another cluster.
		if raw, err := loader.RawConfig(); err == nil && len(raw.Contexts) > 1 {
			names := make([]string, 0, len(raw.Contexts))
			for name := range raw.Contexts {
				names = append(names, name)
			}
			sort.Strings(names)
			return nil, false, fmt.Errorf("the kubeconfig has %d contexts (%s): set kubernetes.config_context (or KUBE_CTX) to the one to use. "+
				"The current context is never taken implicitly, since a misspelled config_context is dropped by Terraform without an error",
				len(names), strings.Join(names, ", "))
		}
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, false, fmt.Errorf("invalid Kubernetes configuration: %w", err)
	}
	return cfg, false, nil
}

func expandHome(p string) string {
	if len(p) > 1 && p[:2] == "~/" {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[2:])
		}
	}
	return p
}
