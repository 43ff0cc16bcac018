terraform {
  # optional() attribute defaults in var.services.
  required_version = ">= 1.3"

  required_providers {
    canary = {
      source  = "canary-release/canary"
      version = ">= 0.1.0"
    }
  }
}
