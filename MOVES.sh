#!/bin/sh
# Rewrites the test machinery's old paths (internal/localstack, meshsim, bench, faultproxy, timeline, cmd)
# to their home under internal/testbed. Usage: ./MOVES.sh FILE... (for example the campaign_*_test.go and
# chaos_*_test.go files of internal/provider written before the move). Idempotent: a path already under
# internal/testbed does not match.
sed -i -E 's#internal/(localstack|meshsim|bench|faultproxy|timeline|cmd)([^[:alnum:]_]|$)#internal/testbed/\1\2#g' "$@"
# The new import paths sort differently: let gofmt reorder the import blocks of the Go files among them.
for f in "$@"; do case $f in *.go) gofmt -w "$f" ;; esac; done
