# The release owns the Deployment: a change to the manifest is the rollout.
resource "canary_release" "api" {
  name          = "api"
  namespace     = "test"
  mesh_provider = "gatewayapi"

  manifest = yamlencode({
    apiVersion = "apps/v1"
    kind       = "Deployment"
    metadata   = { name = "api" }
    spec = {
      replicas = 3
      selector = { matchLabels = { app = "api" } }
      template = {
        metadata = { labels = { app = "api" } }
        spec = {
          containers = [{
            name  = "api"
            image = "ghcr.io/example/api:${var.api_version}"
            ports = [{ name = "http", containerPort = 8080 }]
          }]
        }
      }
    }
  })

  service = {
    port         = 80
    target_port  = "http"
    hosts        = ["api.example.com"]
    gateway_refs = [{ name = "public", namespace = "gateways", section_name = "http" }]
  }

  analysis = {
    interval     = "30s"
    threshold    = 3
    step_weights = [5, 10, 25, 50]
    metrics = [
      { name = "request-success-rate", threshold_range = { min = 99 } },
    ]
  }
}
