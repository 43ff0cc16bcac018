package kube

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// WriteBackoff paces the retries of one API call: about 6 s in all, so a restarting API
// server or a burst of 429s is ridden out, while a cancelled apply still stops at once.
var WriteBackoff = wait.Backoff{Steps: 6, Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1}

// Transient reports whether an API error is worth retrying: a conflict (the caller re-reads
// the object first), throttling, a server-side failure or a dropped connection.
func Transient(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case apierrors.IsConflict(err), apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsTimeout(err),
		apierrors.IsUnexpectedServerError(err):
		return true
	case utilnet.IsConnectionReset(err), utilnet.IsConnectionRefused(err), utilnet.IsProbableEOF(err):
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code >= 500 {
		return true
	}
	return false
}

// Retry runs fn until it succeeds, fails with a non-transient error, the backoff runs out, or
// ctx ends. fn must read the object it changes afresh on every call, so that a conflict never
// overwrites someone else's change with a stale copy.
func Retry(ctx context.Context, fn func() error) error {
	return retry.OnError(WriteBackoff, func(err error) bool { return ctx.Err() == nil && Transient(err) }, fn)
}
