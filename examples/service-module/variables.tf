variable "namespace" {
  description = "The namespace the services run in."
  type        = string
  default     = "default"
}

variable "mesh_provider" {
  description = "The mesh that routes every service; the service module lists the ones it supports."
  type        = string
  default     = "osm"
}

variable "services" {
  description = <<-EOT
    The services, by name. `image` is the repository and `version` its tag: a new version is
    released progressively. `step_weights` overrides the module's traffic steps and
    `pod_annotations` is added to the pod template.
  EOT
  type = map(object({
    image           = string
    version         = string
    step_weights    = optional(list(number))
    pod_annotations = optional(map(string), {})
  }))
  default = {
    frontend = { image = "ghcr.io/example/frontend", version = "1.0.0" }
    backend  = { image = "ghcr.io/example/backend", version = "1.0.0", step_weights = [20, 50] }
  }
}

variable "interval" {
  description = "The analysis interval of every release."
  type        = string
  default     = "30s"
}

variable "metric_interval" {
  description = "The window over which every release measures the success rate."
  type        = string
  default     = "1m"
}
