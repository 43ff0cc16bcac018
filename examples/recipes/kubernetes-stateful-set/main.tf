# A StatefulSet managed by the kubernetes provider, released in place by canary_release.
#
# Between releases the release holds the set's RollingUpdate partition above its replicas, so
# that a new template starts no pod until the analysis lets it; a rollout lowers it step by
# step. ignore_changes keeps the kubernetes provider from writing the partition back to 0
# (which would update every pod at once, unanalysed). wait_for_rollout = false: with the
# partition held, the set's update completes only when the release promotes it, after this
# resource, so waiting here would wait until the timeout.
resource "kubernetes_stateful_set_v1" "cache" {
  metadata {
    name      = "cache"
    namespace = var.namespace
  }
  spec {
    replicas     = 4
    service_name = "cache-headless"
    selector {
      match_labels = { app = "cache" }
    }
    update_strategy {
      type = "RollingUpdate"
      rolling_update {
        partition = 0
      }
    }
    template {
      metadata {
        labels = { app = "cache" }
      }
      spec {
        container {
          name  = "cache"
          image = var.image
          port {
            container_port = 9898
          }
        }
      }
    }
  }
  wait_for_rollout = false

  lifecycle {
    ignore_changes = [spec[0].update_strategy[0].rolling_update[0].partition]
  }
}

resource "canary_release" "cache" {
  name          = "cache"
  namespace     = kubernetes_stateful_set_v1.cache.metadata[0].namespace
  mesh_provider = "gatewayapi"
  target_ref = {
    kind = "StatefulSet"
    name = kubernetes_stateful_set_v1.cache.metadata[0].name
  }
  triggers = { image = var.image }

  service = {
    port         = 9898
    gateway_refs = [{ name = "public" }]
  }
  analysis = {
    interval    = "30s"
    threshold   = 3
    step_weight = 25
    max_weight  = 75
    metrics = [
      { name = "request-success-rate", interval = "1m", threshold_range = { min = 99 } },
    ]
  }
}
