output "phase" {
  description = "The release's phase after the apply."
  value       = canary_release.this.status.phase
}

output "last_promoted_spec" {
  description = "The template hash the primary runs."
  value       = canary_release.this.status.last_promoted_spec
}
