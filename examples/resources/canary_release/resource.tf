# A Deployment managed elsewhere (by the kubernetes provider, Helm or kubectl), released like Flagger does,
# through a Gateway API HTTPRoute `podinfo` attached to the Gateway `public`.
resource "canary_release" "podinfo" {
  name          = "podinfo"
  namespace     = "test"
  mesh_provider = "gatewayapi"

  target_ref = {
    name = "podinfo"
  }
  # Look at the target again whenever its image changes in the same apply. With the kubernetes
  # provider: kubernetes_deployment_v1.podinfo.spec[0].template[0].spec[0].container[0].image
  triggers = {
    image = var.podinfo_image
  }

  service = {
    port         = 9898
    target_port  = "9898"
    hosts        = ["podinfo.example.com"]
    gateway_refs = [{ name = "public", namespace = "gateways", section_name = "http" }]
  }

  analysis = {
    interval    = "15s"
    threshold   = 5
    max_weight  = 50
    step_weight = 10
    metrics = [
      {
        name            = "request-success-rate"
        interval        = "1m"
        threshold_range = { min = 99 }
      },
      {
        name            = "request-duration"
        interval        = "30s"
        threshold_range = { max = 500 }
      },
    ]
    webhooks = [
      {
        name     = "load-test"
        url      = "http://flagger-loadtester.test/"
        timeout  = "5s"
        metadata = { cmd = "hey -z 1m -q 10 -c 2 http://podinfo-canary.test:9898/" }
      },
    ]
  }

  timeouts = {
    update = "30m"
  }
}
