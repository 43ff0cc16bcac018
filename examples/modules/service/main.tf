# One service: a Deployment that the release owns, behind Open Service Mesh, released with
# Flagger's built-in checks. A root module calls it once per service.
resource "canary_release" "this" {
  name          = var.name
  namespace     = var.namespace
  mesh_provider = "osm"

  manifest = yamlencode({
    apiVersion = "apps/v1"
    kind       = "Deployment"
    metadata   = { name = var.name }
    spec = {
      replicas = var.replicas
      selector = { matchLabels = { app = var.name } }
      template = {
        metadata = { labels = { app = var.name } }
        spec = {
          containers = [{
            name  = var.name
            image = var.image
            ports = [{ name = "http", containerPort = var.port }]
          }]
        }
      }
    }
  })

  service = {
    port        = var.port
    target_port = "http"
  }

  analysis = {
    interval     = var.interval
    threshold    = 2
    step_weights = var.step_weights
    metrics = [
      { name = "request-success-rate", interval = var.metric_interval, threshold_range = { min = var.min_success_rate } },
    ]
  }
}
