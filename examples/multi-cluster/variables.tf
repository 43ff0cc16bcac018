variable "first_cluster" {
  description = <<-EOT
    The cluster of the first wave: its kubeconfig and context (named, never guessed), the
    Prometheus the analysis queries, the namespace of the services, and annotations added to
    their pod templates there (a mesh's sidecar settings, say).
  EOT
  type = object({
    config_path        = string
    config_context     = string
    prometheus_address = string
    namespace          = optional(string, "default")
    pod_annotations    = optional(map(string), {})
  })
}

variable "second_cluster" {
  description = "The cluster of the second wave, described as first_cluster."
  type = object({
    config_path        = string
    config_context     = string
    prometheus_address = string
    namespace          = optional(string, "default")
    pod_annotations    = optional(map(string), {})
  })
}

variable "services" {
  description = "The services released in both clusters, by name: `image` is the repository and `version` its tag."
  type = map(object({
    image   = string
    version = string
  }))
  default = {
    frontend = { image = "ghcr.io/example/frontend", version = "1.0.0" }
  }
}

variable "mesh_provider" {
  description = "The mesh that routes the services in both clusters."
  type        = string
  default     = "osm"
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
