# Several services, one module instance each: the way most teams wrap canary_release. Each
# service is released on its own; one failing analysis fails the apply without holding the others.
provider "canary" {}

module "service" {
  source   = "../modules/service"
  for_each = var.services

  name          = each.key
  namespace     = var.namespace
  mesh_provider = var.mesh_provider
  image         = "${each.value.image}:${each.value.version}"
  interval      = var.interval
  step_weights  = each.value.step_weights

  metric_interval = var.metric_interval
  pod_annotations = each.value.pod_annotations
}

output "phases" {
  description = "Each service's release phase, by service name."
  value       = { for name, service in module.service : name => service.phase }
}
