variable "podinfo_image" {
  description = "The image the podinfo Deployment runs; a change releases it."
  type        = string
  default     = "ghcr.io/stefanprodan/podinfo:6.0.0"
}

variable "api_version" {
  description = "The version of the api image to release."
  type        = string
  default     = "1.0.0"
}
