package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
)

// WriteBackoff paces the attempts of one API call: 6 attempts over about 3 s, longer than
// retry.DefaultBackoff (0.3 s) so that an API server restart or a burst of 429s is ridden out,
// short enough that a persistent fault fails the step while its interval still runs.
var WriteBackoff = wait.Backoff{Steps: 6, Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1}

// Transient reports failures that another attempt may not meet: 409 conflicts (the caller
// re-reads the object first), 429, 5xx and a connection that failed or dropped.
func Transient(err error) bool {
	var status apierrors.APIStatus
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case apierrors.IsConflict(err), apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsTimeout(err),
		apierrors.IsUnexpectedServerError(err):
		return true
	case errors.As(err, &status) && status.Status().Code >= 500: // 502 and other gateway answers
		return true
	}
	return utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) || utilnet.IsProbableEOF(err) ||
		utilnet.IsHTTP2ConnectionLost(err) || utilnet.IsTimeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Retry runs attempt until it succeeds, fails with an error that is not transient,
// WriteBackoff is spent or ctx ends, and returns the last attempt's error. An attempt must
// read the object afresh and re-apply its change, so that a retried conflict never writes back
// a stale copy.
//
// It is retry.OnError's loop on wait.ExponentialBackoffWithContext: OnError sleeps without
// looking at the context, and no wait may outlast the caller's deadline.
func Retry(ctx context.Context, attempt func() error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, WriteBackoff, func(context.Context) (bool, error) {
		last = attempt()
		switch {
		case last == nil:
			return true, nil
		case ctx.Err() == nil && Transient(last):
			return false, nil
		}
		return false, last
	})
	switch {
	case err == nil || last == nil:
		return err
	case ctx.Err() != nil && !errors.Is(last, ctx.Err()):
		return fmt.Errorf("%w (stopped retrying: %w)", last, ctx.Err())
	}
	return last
}
