terraform {
  required_version = ">= 1.5"
  required_providers {
    canary = {
      source = "canary-release/canary"
    }
  }
}
