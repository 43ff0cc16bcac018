variable "namespace" {
  description = "The namespace both services run in."
  type        = string
  default     = "default"
}

variable "frontend_version" {
  description = "The frontend's image tag."
  type        = string
  default     = "1.0.0"
}

variable "backend_version" {
  description = "The backend's image tag."
  type        = string
  default     = "1.0.0"
}

variable "interval" {
  description = "The analysis interval of both releases."
  type        = string
  default     = "30s"
}

variable "metric_interval" {
  description = "The window over which both releases measure the success rate."
  type        = string
  default     = "1m"
}
