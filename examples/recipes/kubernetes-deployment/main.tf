# A Deployment managed by the kubernetes provider, released by canary_release.
#
# The release scales this Deployment (the canary) to 0 between releases and up for each
# analysis, while podinfo-primary serves. ignore_changes keeps the kubernetes provider from
# scaling it back on the next apply; the pod template stays Terraform's, so a new image is
# still planned here and released by canary_release in the same apply.
resource "kubernetes_deployment_v1" "podinfo" {
  metadata {
    name      = "podinfo"
    namespace = var.namespace
  }
  spec {
    replicas = 2
    selector {
      match_labels = { app = "podinfo" }
    }
    template {
      metadata {
        labels = { app = "podinfo" }
      }
      spec {
        container {
          name  = "podinfo"
          image = var.image
          port {
            container_port = 9898
          }
        }
      }
    }
  }

  lifecycle {
    ignore_changes = [spec[0].replicas]
  }
}

resource "canary_release" "podinfo" {
  name          = "podinfo"
  namespace     = kubernetes_deployment_v1.podinfo.metadata[0].namespace
  mesh_provider = "gatewayapi"
  target_ref    = { name = kubernetes_deployment_v1.podinfo.metadata[0].name }
  # A new image in this apply is released in this apply.
  triggers = { image = var.image }

  service = {
    port         = 9898
    gateway_refs = [{ name = "public" }]
  }
  analysis = {
    interval    = "30s"
    threshold   = 3
    step_weight = 20
    max_weight  = 60
    metrics = [
      { name = "request-success-rate", interval = "1m", threshold_range = { min = 99 } },
    ]
  }
}
