variable "name" {
  description = "The service's name: its Deployment, its Services and its release."
  type        = string
}

variable "namespace" {
  description = "The namespace the service runs in."
  type        = string
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
}

variable "min_success_rate" {
  description = "The lowest request success rate, in percent, that passes a check."
  type        = number
  default     = 99
}
