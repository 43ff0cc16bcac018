variable "name" {
  description = "The service's name: its Deployment, its Services and its release."
  type        = string
}

variable "namespace" {
  description = "The namespace the service runs in."
  type        = string
}

variable "mesh_provider" {
  description = "The mesh that routes the service: one that needs no router options beyond the Service this module creates."
  type        = string
  default     = "osm"
  nullable    = false

  validation {
    condition     = contains(["osm", "linkerd", "istio"], var.mesh_provider)
    error_message = "The service module's mesh_provider must be one of \"osm\", \"linkerd\" or \"istio\": the meshes that route its Service without further options. Call canary_release directly for the others."
  }
}

variable "image" {
  description = "The container image; a change is released progressively."
  type        = string
}

variable "port" {
  description = "The container's HTTP port, also the Services' port."
  type        = number
  default     = 8080
}

variable "replicas" {
  description = "Replicas of the primary."
  type        = number
  default     = 2
}

variable "interval" {
  description = "The analysis interval."
  type        = string
  default     = "30s"
}

variable "metric_interval" {
  description = "The window over which the success rate is measured."
  type        = string
  default     = "1m"
}

variable "step_weights" {
  description = "The canary's traffic weights, one per analysis step."
  type        = list(number)
  default     = [10, 25, 50]
  nullable    = false
}

variable "min_success_rate" {
  description = "The lowest request success rate, in percent, that passes a check."
  type        = number
  default     = 99
}

variable "pod_annotations" {
  description = "Annotations added to the pod template, for a mesh's sidecar settings for example; a change is released like an image change."
  type        = map(string)
  default     = {}
  nullable    = false
}
