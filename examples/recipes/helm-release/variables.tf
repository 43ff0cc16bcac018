variable "namespace" {
  description = "Namespace of the chart and its release."
  type        = string
}

variable "image_tag" {
  description = "podinfo's image tag to release."
  type        = string
}
