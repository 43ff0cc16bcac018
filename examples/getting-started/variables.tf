variable "image" {
  description = "podinfo's image: change it to release a new version."
  type        = string
  default     = "ghcr.io/stefanprodan/podinfo:6.0.0"
}

variable "gateway_address" {
  description = "The address of the Gateway public (kubectl get gateway public -n demo -o jsonpath='{.status.addresses[0].value}'), which the load tester sends requests to."
  type        = string
  default     = "127.0.0.1"
}
