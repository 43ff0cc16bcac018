# Reads the kubernetes provider's variables (KUBE_CONFIG_PATH, KUBE_CTX, ...) and
# CANARY_PROMETHEUS_ADDRESS. As in the kubernetes provider, no kubeconfig is read unless named.
provider "canary" {}

# Or explicitly, with the kubernetes provider's attribute names:
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
  # Flagger's MetricTemplates. A metric of canary_release uses one with
  # template_ref = "error-rate" and template_variables = { failure = "5.*" }.
  metric_templates = {
    "error-rate" = {
      # The application's own histogram (podinfo's), as the charts' pod scraping labels it.
      query = <<-EOT
        100 - sum(rate(http_request_duration_seconds_count{namespace="{{ namespace }}",pod=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)",status!~"{{ variables.failure }}"}[{{ interval }}]))
          / sum(rate(http_request_duration_seconds_count{namespace="{{ namespace }}",pod=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"}[{{ interval }}])) * 100
      EOT
      # Optional: the template's own Prometheus (Flagger's spec.provider). Unset, the one above.
      prometheus = {
        address = "https://thanos.example.com"
        headers = { "X-Scope-OrgID" = "team-a" }
      }
    }
  }
}
