package rollout

import (
	"context"

	"github.com/canary-release/terraform-provider-canary/internal/kube"
)

// onAPIError retries fn on conflicts, throttling, server errors and dropped connections.
func onAPIError(ctx context.Context, fn func() error) error { return kube.Retry(ctx, fn) }
