# The kubeconfig and its context are named explicitly: the provider never guesses a cluster.
provider "canary" {
  kubernetes = {
    config_path    = "~/.kube/config"
    config_context = "my-cluster"
  }
  prometheus = {
    # A cluster Service: the provider reaches it through the API server's service proxy.
    address = "http://prometheus-server.monitoring:80"
  }
}

resource "canary_release" "podinfo" {
  name          = "podinfo"
  namespace     = "demo"
  mesh_provider = "gatewayapi"
  target_ref    = { name = "podinfo" }
  # The image is set with kubectl in this guide; a change here releases it in the same apply.
  triggers = { image = var.image }

  service = {
    port         = 9898
    hosts        = ["app.example.com"]
    gateway_refs = [{ name = "public", section_name = "http" }]
  }

  analysis = {
    interval    = "30s"
    threshold   = 3
    step_weight = 20
    max_weight  = 60
    metrics = [
      # Built in: podinfo's own http_request_duration_seconds, for the canary's pods.
      { name = "request-success-rate", interval = "1m", threshold_range = { min = 99 } },
      { name = "request-duration", interval = "1m", threshold_range = { max = 500 } },
    ]
    webhooks = [{
      name = "load-test"
      url  = "http://flagger-loadtester.demo/"
      metadata = {
        cmd = "hey -z 1m -q 10 -c 2 -host app.example.com http://${var.gateway_address}/"
      }
    }]
  }
}

output "phase" {
  description = "The release's phase after the apply: Initialized, Succeeded or Failed."
  value       = canary_release.podinfo.status.phase
}
