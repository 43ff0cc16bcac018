# Two services, one module each: the way most teams wrap canary_release.
provider "canary" {}

module "frontend" {
  source    = "../modules/service"
  name      = "frontend"
  namespace = var.namespace
  image     = "ghcr.io/example/frontend:${var.frontend_version}"
  interval  = var.interval

  metric_interval = var.metric_interval
}

module "backend" {
  source       = "../modules/service"
  name         = "backend"
  namespace    = var.namespace
  image        = "ghcr.io/example/backend:${var.backend_version}"
  interval     = var.interval
  step_weights = [20, 50]

  metric_interval = var.metric_interval
}

output "phases" {
  description = "Each service's release phase."
  value       = { frontend = module.frontend.phase, backend = module.backend.phase }
}
