# Terraform 1.12 or later; not a .tf file, so that older CLIs validate this folder.
import {
  to = canary_release.podinfo
  identity = {
    namespace = "test"
    name      = "podinfo"
  }
}
