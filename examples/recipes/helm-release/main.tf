# A Deployment rendered by a Helm chart (podinfo's), released by canary_release.
#
# helm_release never reads the live Deployment, so no ignore_changes on it can stop the fight:
# on each upgrade Helm's three-way merge writes the chart's replicas back over the release's.
# The setting that stops it is a chart that renders no replicas: podinfo's chart leaves them
# out when its HorizontalPodAutoscaler is on, and the release then scales the Deployment
# through its own copy of that autoscaler (autoscaler_ref). The chart's Service is off: the
# release makes the podinfo, podinfo-primary and podinfo-canary Services.
resource "helm_release" "podinfo" {
  name       = "podinfo"
  namespace  = var.namespace
  repository = "https://stefanprodan.github.io/podinfo"
  chart      = "podinfo"
  version    = "6.7.1"

  values = [yamlencode({
    image   = { tag = var.image_tag }
    hpa     = { enabled = true, minReplicas = 2, maxReplicas = 4 }
    service = { enabled = false }
  })]
}

resource "canary_release" "podinfo" {
  name          = "podinfo"
  namespace     = helm_release.podinfo.namespace
  mesh_provider = "gatewayapi"
  # The chart names its Deployment and its autoscaler after the release.
  target_ref     = { name = helm_release.podinfo.name }
  autoscaler_ref = { name = helm_release.podinfo.name }
  triggers       = { image_tag = var.image_tag }

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
