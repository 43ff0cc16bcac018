terraform {
  required_providers {
    canary = {
      source  = "canary-release/canary"
      version = ">= 0.1.0"
    }
  }
}
