// Package kube builds Kubernetes client configuration the way the helm and kubernetes
// providers do, and reaches cluster Services through the API server.
package kube

import (
	"fmt"
	"os"
	"path/filepath"

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

// Config is the provider's `kubernetes` block. Empty fields fall back to the kubernetes
// provider's environment variables, then to KUBECONFIG, then to in-cluster configuration.
type Config struct {
	ConfigPath           string
	ConfigContext        string
	Host                 string
	Token                string
	ClusterCACertificate string
	ClientCertificate    string
	ClientKey            string
	Insecure             bool
	Exec                 *Exec
	QPS                  float32
	Burst                int
}

// envFallbacks fills empty fields from the kubernetes provider's variables.
func (c Config) withEnv(getenv func(string) string) Config {
	pick := func(v *string, key string) {
		if *v == "" {
			*v = getenv(key)
		}
	}
	pick(&c.Host, "KUBE_HOST")
	pick(&c.Token, "KUBE_TOKEN")
	pick(&c.ConfigPath, "KUBE_CONFIG_PATH")
	pick(&c.ConfigContext, "KUBE_CTX")
	pick(&c.ClusterCACertificate, "KUBE_CLUSTER_CA_CERT_DATA")
	pick(&c.ClientCertificate, "KUBE_CLIENT_CERT_DATA")
	pick(&c.ClientKey, "KUBE_CLIENT_KEY_DATA")
	if !c.Insecure && getenv("KUBE_INSECURE") == "true" {
		c.Insecure = true
	}
	return c
}

// RESTConfig resolves the configuration: explicit attributes, then KUBE_* variables, then
// KUBECONFIG (or ~/.kube/config), then in-cluster.
func (c Config) RESTConfig() (*rest.Config, error) {
	c = c.withEnv(os.Getenv)
	cfg, err := c.base()
	if err != nil {
		return nil, err
	}
	if c.QPS > 0 {
		cfg.QPS = c.QPS
	}
	if c.Burst > 0 {
		cfg.Burst = c.Burst
	}
	cfg.UserAgent = "terraform-provider-canary"
	return cfg, nil
}

func (c Config) base() (*rest.Config, error) {
	overrides := &clientcmd.ConfigOverrides{CurrentContext: c.ConfigContext}
	if c.Host != "" {
		overrides.ClusterInfo.Server = c.Host
	}
	if c.ClusterCACertificate != "" {
		overrides.ClusterInfo.CertificateAuthorityData = []byte(c.ClusterCACertificate)
	}
	overrides.ClusterInfo.InsecureSkipTLSVerify = c.Insecure
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
	case c.Host != "":
		// As in the kubernetes provider: an explicit host without a config path is the whole
		// configuration; an ambient kubeconfig must not lend it credentials or a CA.
	case os.Getenv("KUBECONFIG") != "":
		rules.Precedence = filepath.SplitList(os.Getenv("KUBECONFIG"))
	default:
		if home, err := os.UserHomeDir(); err == nil {
			if p := filepath.Join(home, ".kube", "config"); fileExists(p) {
				rules.Precedence = []string{p}
			}
		}
	}

	if c.Host == "" && rules.ExplicitPath == "" && len(rules.Precedence) == 0 {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no Kubernetes configuration found: set kubernetes.config_path or kubernetes.host, KUBE_CONFIG_PATH or KUBECONFIG, or run inside a cluster (%v)", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("invalid Kubernetes configuration: %w", err)
	}
	return cfg, nil
}

func expandHome(p string) string {
	if len(p) > 1 && p[:2] == "~/" {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[2:])
		}
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
