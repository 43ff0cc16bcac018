# What is live for the release "podinfo", for example for another stack's outputs.
data "canary_release" "podinfo" {
  name      = "podinfo"
  namespace = "test"
}

output "podinfo_live" {
  value = {
    phase         = data.canary_release.podinfo.phase
    canary_weight = data.canary_release.podinfo.canary_weight
    primary_image = data.canary_release.podinfo.primary_image
    canary_image  = data.canary_release.podinfo.canary_image
  }
}
