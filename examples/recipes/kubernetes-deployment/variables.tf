variable "namespace" {
  description = "Namespace of the workload and its release."
  type        = string
}

variable "image" {
  description = "The image to release."
  type        = string
}
