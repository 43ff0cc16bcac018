# The demo release: a manifest-owned Deployment behind Open Service Mesh, on the local stack.
# `make demo` applies it three times: v1 initialises, v2 is promoted, v3 (failing) rolls back.
terraform {
  required_providers {
    canary = {
      source = "canary-release/canary"
    }
  }
}

variable "image_tag" {
  description = "podinfo version to release."
  type        = string
  default     = "6.0.0"
}

variable "error_rate" {
  description = "Fraction of 5xx answers of this version in the simulated mesh (0 to 1)."
  type        = string
  default     = "0"
}

provider "canary" {}

resource "canary_release" "podinfo" {
  name          = "podinfo"
  namespace     = "default"
  mesh_provider = "osm"

  manifest = yamlencode({
    apiVersion = "apps/v1"
    kind       = "Deployment"
    metadata   = { name = "podinfo" }
    spec = {
      replicas = 2
      selector = { matchLabels = { app = "podinfo" } }
      template = {
        metadata = {
          labels = { app = "podinfo" }
          annotations = {
            "sim.canary-release.dev/error-rate" = var.error_rate
            "sim.canary-release.dev/latency-ms" = "40"
          }
        }
        spec = {
          containers = [{
            name  = "podinfo"
            image = "ghcr.io/stefanprodan/podinfo:${var.image_tag}"
            ports = [{ name = "http", containerPort = 9898 }]
          }]
        }
      }
    }
  })

  service = {
    port        = 9898
    target_port = "9898"
  }

  analysis = {
    interval    = "5s"
    threshold   = 2
    max_weight  = 50
    step_weight = 10
    metrics = [
      {
        name            = "request-success-rate"
        interval        = "10s"
        threshold_range = { min = 99 }
      },
      {
        name            = "request-duration"
        interval        = "10s"
        threshold_range = { max = 500 }
      },
    ]
  }

  progress_deadline_seconds = 60
}

output "status" {
  value = canary_release.podinfo.status
}
