package router

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

// apiBackoff paces the attempts of one router API call: 8 attempts over about 5s, longer than
// retry.DefaultBackoff (0.3s) so that an API server restart or a burst of 429s is ridden out.
var apiBackoff = wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 8, Cap: 2 * time.Second}

// withRetry is the retry policy of every router read and write. It runs attempt until it
// succeeds, fails with an error that is not transient, apiBackoff is spent or ctx ends, and
// returns the last attempt's error. An attempt must read the object afresh and re-apply its
// change, so that a retried conflict never writes back a stale copy.
//
// It is retry.OnError's loop, but on wait.ExponentialBackoffWithContext: OnError sleeps
// without looking at the context, and no wait may outlast the caller's deadline.
func withRetry(ctx context.Context, attempt func() error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, apiBackoff, func(context.Context) (bool, error) {
		last = attempt()
		switch {
		case last == nil:
			return true, nil
		case ctx.Err() == nil && transient(last):
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

// transient reports failures that another attempt may not meet: 409 conflicts, 429, 5xx and
// a connection that failed or dropped.
func transient(err error) bool {
	var status apierrors.APIStatus
	switch {
	case apierrors.IsConflict(err), apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsTimeout(err):
		return true
	case errors.As(err, &status) && status.Status().Code >= 500: // 502 and other gateway answers
		return true
	}
	return utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) || utilnet.IsProbableEOF(err) ||
		utilnet.IsHTTP2ConnectionLost(err) || utilnet.IsTimeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
