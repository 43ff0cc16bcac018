# Waves across two clusters: each cluster has its own provider configuration (an alias), and
# the second wave depends on the first. Terraform applies the second wave only once every
# release of the first has promoted: a failed analysis in the first cluster fails its release,
# and the second cluster is left on the version it runs.
provider "canary" {
  alias = "first"
  kubernetes = {
    config_path    = var.first_cluster.config_path
    config_context = var.first_cluster.config_context
  }
  prometheus = { address = var.first_cluster.prometheus_address }
}

provider "canary" {
  alias = "second"
  kubernetes = {
    config_path    = var.second_cluster.config_path
    config_context = var.second_cluster.config_context
  }
  prometheus = { address = var.second_cluster.prometheus_address }
}

module "first_wave" {
  source    = "../modules/service"
  providers = { canary = canary.first }
  for_each  = var.services

  name            = each.key
  namespace       = var.first_cluster.namespace
  mesh_provider   = var.mesh_provider
  image           = "${each.value.image}:${each.value.version}"
  interval        = var.interval
  metric_interval = var.metric_interval
  pod_annotations = var.first_cluster.pod_annotations
}

module "second_wave" {
  source    = "../modules/service"
  providers = { canary = canary.second }
  for_each  = var.services
  # Every release of the first wave, not only the same service's: the second cluster waits
  # for the whole first wave to promote.
  depends_on = [module.first_wave]

  name            = each.key
  namespace       = var.second_cluster.namespace
  mesh_provider   = var.mesh_provider
  image           = "${each.value.image}:${each.value.version}"
  interval        = var.interval
  metric_interval = var.metric_interval
  pod_annotations = var.second_cluster.pod_annotations
}

output "phases" {
  description = "Each release's phase, by wave and service."
  value = {
    first  = { for name, service in module.first_wave : name => service.phase }
    second = { for name, service in module.second_wave : name => service.phase }
  }
}
