terraform {
  required_providers {
    canary = {
      source = "canary-release/canary"
    }
  }
}
