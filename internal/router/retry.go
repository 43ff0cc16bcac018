package router

import (
	"context"

	"github.com/canary-release/terraform-provider-canary/internal/kube"
)

// WithRetry is the retry policy of every router read and write: kube.Retry, shared with the
// engine's own writes.
func WithRetry(ctx context.Context, attempt func() error) error { return kube.Retry(ctx, attempt) }
