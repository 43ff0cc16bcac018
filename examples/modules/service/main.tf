# One service: a Deployment that the release owns, behind a service mesh (Open Service Mesh by
# default), released with Flagger's built-in checks. A root module calls it once per service,
# usually with for_each.
resource "canary_release" "this" {
  name          = var.name
  namespace     = var.namespace
  mesh_provider = var.mesh_provider

  manifest = yamlencode({
    apiVersion = "apps/v1"
    kind       = "Deployment"
    metadata   = { name = var.name }
    spec = {
      replicas = var.replicas
      selector = { matchLabels = { app = var.name } }
      template = {
        # No annotations key at all when there are none, so that the manifest stays as before.
        metadata = merge(
          { labels = { app = var.name } },
          { for key, value in { annotations = var.pod_annotations } : key => value if length(value) > 0 },
        )
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
