# A release is imported by namespace/name; its configuration comes back from the
# ConfigMap <name>-canary-release that the release keeps in its namespace.
terraform import canary_release.podinfo test/podinfo
