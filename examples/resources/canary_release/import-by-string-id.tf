import {
  to = canary_release.podinfo
  id = "test/podinfo"
}
