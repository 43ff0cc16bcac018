# Reads ~/.kube/config (or KUBECONFIG / KUBE_CONFIG_PATH) and CANARY_PROMETHEUS_ADDRESS.
provider "canary" {}

# Or explicitly, as in the helm provider:
provider "canary" {
  alias = "explicit"
  kubernetes = {
    config_path    = "~/.kube/config"
    config_context = "prod"
  }
  prometheus = {
    # A cluster Service address is reached through the API server's service proxy.
    address = "http://prometheus.monitoring:9090"
  }
}
