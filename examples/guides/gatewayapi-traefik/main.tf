# Traefik as the Gateway API implementation: its own service metrics, as metric templates. Traefik names
# the Service an HTTPRoute rule sends to <namespace>-<service>-<scheme or port name>-<port>@kubernetesgateway;
# {{ side }} is canary, or primary when a judge reads the primary. Traefik creates a series at the first
# request with its status code, so a side that failed every request has no non-5xx series: "or on() vector(0)"
# reads it as 0%.
provider "canary" {
  metric_templates = {
    "traefik-success-rate" = {
      query = <<-EOT
        (sum(rate(traefik_service_requests_total{service=~"{{ namespace }}-{{ service }}-{{ side }}-[0-9a-zA-Z-]+@kubernetesgateway",code!~"5.."}[{{ interval }}])) or on() vector(0))
          / sum(rate(traefik_service_requests_total{service=~"{{ namespace }}-{{ service }}-{{ side }}-[0-9a-zA-Z-]+@kubernetesgateway"}[{{ interval }}])) * 100
      EOT
    }
    "traefik-duration" = {
      query = <<-EOT
        histogram_quantile(0.99, sum(rate(traefik_service_request_duration_seconds_bucket{service=~"{{ namespace }}-{{ service }}-{{ side }}-[0-9a-zA-Z-]+@kubernetesgateway"}[{{ interval }}])) by (le)) * 1000
      EOT
    }
  }
}
