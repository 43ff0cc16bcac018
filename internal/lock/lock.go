// Package lock keeps two terraform runs from changing the same canary_release at once.
//
// A run holds a coordination.k8s.io/v1 Lease named "<release>-canary-release-lock" in the
// release's namespace while it touches the cluster. The Lease names the holder (process, host
// and a random run id); its acquireTime tells since when, its renewTime when the holder last
// proved it is alive. A Lease that is held and not expired (renewTime + leaseDurationSeconds
// in the future) makes Acquire fail at once with a *HeldError. A Lease whose holder is empty,
// or that expired because its run was killed, is taken over. Expiry compares the holder's
// renewTime with the local clock, so it assumes clocks roughly in sync.
//
// The holder renews the Lease every RenewInterval until Release. A renewal is one Update of
// the Lease as the holder last wrote it: the resourceVersion it carries makes the API server
// refuse it (Conflict) if anyone else wrote the Lease since, and only then is the Lease read
// again to see who holds it. Taking a free lock is one Create and giving it back one Delete
// with the same preconditions, so a run's lock costs two requests plus one per renewal.
//
// If it cannot renew for
// LeaseDuration-RenewInterval, or finds the Lease deleted or held by someone else, Lost is
// closed and contexts from Lock.Context are cancelled with ErrLost, so the run stops
// advancing before another run may take over.
package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/util/retry"
)

const (
	// LeaseDuration is how long a Lease stays valid after its last renewal; a killed run's
	// lock is free again at most this long after it died (at once for a run on the same
	// host, see deadOnThisHost). Renewals are most of what a lock costs the API server, so
	// the lease is long: a run of a few minutes renews it a handful of times.
	LeaseDuration = 60 * time.Second
	// RenewInterval is how often the holder renews its Lease.
	RenewInterval = 20 * time.Second
)

const (
	leaseNameSuffix = "-canary-release-lock"
	managedByLabel  = "app.kubernetes.io/managed-by"
	managedByValue  = "terraform-provider-canary"
	releaseLabel    = "canary-release.dev/release"
)

// ErrLost is the cause of contexts from Lock.Context once the lock may no longer be held.
// The actual cause wraps it with the details; test with errors.Is.
var ErrLost = errors.New("lost the release lock")

// Options tune a Lock; the zero value uses LeaseDuration and RenewInterval.
type Options struct {
	// LeaseDuration overrides LeaseDuration (tests use milliseconds). The Lease records it
	// rounded up to whole seconds.
	LeaseDuration time.Duration
	// RenewInterval overrides RenewInterval; it must be less than half of LeaseDuration so
	// a failed renewal can be retried before the lock counts as lost.
	RenewInterval time.Duration
	// WaitForExpiry makes Acquire wait for a Lease that looks abandoned (not renewed for
	// more than two renew intervals, expiring within one lease duration) instead of
	// failing with a *HeldError.
	WaitForExpiry bool
}

func (o Options) withDefaults() (Options, error) {
	if o.LeaseDuration == 0 {
		o.LeaseDuration = LeaseDuration
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = RenewInterval
	}
	if o.RenewInterval < 0 || 2*o.RenewInterval >= o.LeaseDuration {
		return o, fmt.Errorf("release lock: renew interval %s must be positive and less than half of the lease duration %s", o.RenewInterval, o.LeaseDuration)
	}
	return o, nil
}

// HeldError is returned by Acquire when another run holds the release's Lease.
type HeldError struct {
	// Namespace and Release name the canary_release.
	Namespace, Release string
	// Lease is the name of the Lease, in Namespace.
	Lease string
	// Holder is the holder identity recorded in the Lease.
	Holder string
	// Since is the holder's acquireTime; zero if the Lease has none.
	Since time.Time
	// RenewedAt is the holder's last renewal.
	RenewedAt time.Time
	// ExpiresAt is when the Lease expires unless renewed again.
	ExpiresAt time.Time
	// ObservedAt is when the Lease was read; the message's relative times count from it.
	ObservedAt time.Time
}

// Error names the holder and since when it holds the lock, and tells what to do.
func (e *HeldError) Error() string {
	since := ""
	if !e.Since.IsZero() {
		since = " since " + e.Since.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("canary_release %s/%s is locked by another run: %q holds Lease %s/%s%s (renewed %s ago); "+
		"wait for that run to finish, or, if it was killed, retry after %s when the lease expires",
		e.Namespace, e.Release, e.Holder, e.Namespace, e.Lease, since,
		humanAgo(e.ObservedAt.Sub(e.RenewedAt)), ceilSeconds(e.ExpiresAt.Sub(e.ObservedAt)))
}

// Lock is a held release lock. It renews itself until Release.
type Lock struct {
	leases    coordinationv1client.LeaseInterface
	namespace string
	release   string
	name      string
	identity  string
	opts      Options

	previousHolder string
	tookOver       bool

	// lastRenewed is when the last successful write of our renewTime started, and held the
	// Lease as that write returned it (the API server's copy, with its resourceVersion); only
	// the renew goroutine touches them once Acquire returned, and Release after it stopped.
	lastRenewed time.Time
	held        *coordinationv1.Lease

	stopRenewing context.CancelFunc
	renewDone    chan struct{} // closed when the renew goroutine returned
	lost         chan struct{} // closed, after lostErr is set, when the lock may be lost
	lostErr      error

	releaseOnce sync.Once
	releaseErr  error
}

// Acquire takes the lock of the canary_release named release in namespace, or fails at once
// with a *HeldError if another live run holds it (see Options.WaitForExpiry). An empty or
// expired Lease is taken over; TookOver tells whether an expired holder was replaced.
// Renewal does not stop when ctx is cancelled, so a rollback after cancellation still holds
// the lock: always call Release.
func Acquire(ctx context.Context, kube kubernetes.Interface, namespace, release string, opts Options) (*Lock, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Lock{
		leases:    kube.CoordinationV1().Leases(namespace),
		namespace: namespace,
		release:   release,
		name:      release + leaseNameSuffix,
		identity:  newIdentity(),
		opts:      opts,
		renewDone: make(chan struct{}),
		lost:      make(chan struct{}),
	}

	err = retryOnConflict(ctx, l.tryAcquire)
	var held *HeldError
	if opts.WaitForExpiry && errors.As(err, &held) && l.looksAbandoned(held) {
		timer := time.NewTimer(held.ExpiresAt.Sub(held.ObservedAt))
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w; gave up waiting for it to expire: %w", held, context.Cause(ctx))
		case <-timer.C:
		}
		err = retryOnConflict(ctx, l.tryAcquire)
	}
	if errors.As(err, &held) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("acquire Lease %s/%s for canary_release %s/%s: %w", namespace, l.name, namespace, release, err)
	}

	renewCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	l.stopRenewing = stop
	go l.keepRenewing(renewCtx)
	return l, nil
}

// Identity is the holder identity this lock writes into the Lease.
func (l *Lock) Identity() string { return l.identity }

// TookOver reports whether Acquire replaced an expired holder (a run that was killed), and
// which one, so the caller can say it is recovering after a killed run.
func (l *Lock) TookOver() (previousHolder string, ok bool) { return l.previousHolder, l.tookOver }

// Lost is closed when the lock may no longer be held: renewal failed for
// LeaseDuration-RenewInterval, or the Lease was deleted or taken by someone else. It is
// never closed after Release.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Context returns a child of parent that is cancelled with a cause wrapping ErrLost when
// Lost fires, so work under it stops advancing.
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-ctx.Done():
		case <-l.renewDone: // lost, or released
			select {
			case <-l.lost:
				cancel(l.lostErr)
			default:
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

// Release stops renewing and deletes the Lease, if still ours, so the next run can start at
// once. Pass a fresh short context: the one given to Acquire may already be cancelled.
// Calling it again returns the first result.
func (l *Lock) Release(ctx context.Context) error {
	l.releaseOnce.Do(func() {
		l.stopRenewing()
		select {
		case <-l.renewDone:
		case <-ctx.Done():
			l.releaseErr = fmt.Errorf("release Lease %s/%s: %w", l.namespace, l.name, context.Cause(ctx))
			return
		}
		if err := retryOnConflict(ctx, l.deleteIfOurs); err != nil {
			l.releaseErr = fmt.Errorf("release Lease %s/%s: %w", l.namespace, l.name, err)
		}
	})
	return l.releaseErr
}

// tryAcquire creates the Lease, or, when one exists, reads it and takes it over if it is free
// or expired; Conflict and AlreadyExists mean another run wrote in between, and the caller
// tries again. A released lock has no Lease, so the common case is the Create alone.
func (l *Lock) tryAcquire(ctx context.Context) error {
	now := time.Now()
	fresh := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace}}
	l.hold(fresh, now)
	fresh.Spec.LeaseTransitions = new(int32)
	created, err := l.leases.Create(ctx, fresh, metav1.CreateOptions{})
	if err == nil {
		l.held, l.lastRenewed = created, now
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	lease, err := l.leases.Get(ctx, l.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Released between our Create and our Get: create it again.
		return apierrors.NewAlreadyExists(coordinationv1.Resource("leases"), l.name)
	}
	if err != nil {
		return err
	}

	holder := holderOf(lease)
	renewedAt, expiresAt := l.expiry(lease)
	if holder != "" && now.Before(expiresAt) && !deadOnThisHost(holder) {
		held := &HeldError{
			Namespace: l.namespace, Release: l.release, Lease: l.name, Holder: holder,
			RenewedAt: renewedAt, ExpiresAt: expiresAt, ObservedAt: now,
		}
		if lease.Spec.AcquireTime != nil {
			held.Since = lease.Spec.AcquireTime.Time
		}
		return held
	}

	// Released or expired: take it over. The Update carries the resourceVersion we read,
	// so if another run took it meanwhile we get a Conflict and decide again.
	l.hold(lease, now)
	transitions := int32(1)
	if lease.Spec.LeaseTransitions != nil {
		transitions = *lease.Spec.LeaseTransitions + 1
	}
	lease.Spec.LeaseTransitions = &transitions
	updated, err := l.leases.Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	l.previousHolder, l.tookOver = holder, holder != ""
	l.held, l.lastRenewed = updated, now
	return nil
}

// hold writes us into lease as a fresh holder.
func (l *Lock) hold(lease *coordinationv1.Lease, now time.Time) {
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	lease.Labels[managedByLabel] = managedByValue
	lease.Labels[releaseLabel] = l.release

	identity := l.identity
	seconds := int32(math.Ceil(l.opts.LeaseDuration.Seconds()))
	lease.Spec.HolderIdentity = &identity
	lease.Spec.LeaseDurationSeconds = &seconds
	lease.Spec.AcquireTime = &metav1.MicroTime{Time: now}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
}

// expiry tells when the holder of lease last renewed it and when it expires.
func (l *Lock) expiry(lease *coordinationv1.Lease) (renewedAt, expiresAt time.Time) {
	switch {
	case lease.Spec.RenewTime != nil:
		renewedAt = lease.Spec.RenewTime.Time
	case lease.Spec.AcquireTime != nil:
		renewedAt = lease.Spec.AcquireTime.Time
	}
	duration := l.opts.LeaseDuration
	if lease.Spec.LeaseDurationSeconds != nil {
		duration = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	return renewedAt, renewedAt.Add(duration)
}

// looksAbandoned tells whether the holder stopped renewing and the Lease expires soon, so
// waiting for it (Options.WaitForExpiry) is worthwhile.
func (l *Lock) looksAbandoned(held *HeldError) bool {
	return held.ExpiresAt.Sub(held.ObservedAt) <= l.opts.LeaseDuration &&
		held.ObservedAt.Sub(held.RenewedAt) > 2*l.opts.RenewInterval
}

// keepRenewing renews every RenewInterval until ctx is cancelled (Release) or the lock is lost.
func (l *Lock) keepRenewing(ctx context.Context) {
	defer close(l.renewDone)
	err := wait.PollUntilContextCancel(ctx, l.opts.RenewInterval, false, l.renewBeforeDeadline)
	if errors.Is(err, ErrLost) {
		l.lostErr = err
		close(l.lost)
	}
}

// renewBeforeDeadline renews once, retrying failures until LeaseDuration-RenewInterval after
// the last renewal; past that, another run may soon see the Lease expired, so the lock counts
// as lost while the Lease is still valid for one more RenewInterval.
func (l *Lock) renewBeforeDeadline(ctx context.Context) (done bool, err error) {
	window := l.opts.LeaseDuration - l.opts.RenewInterval
	attemptCtx, cancel := context.WithDeadline(ctx, l.lastRenewed.Add(window))
	defer cancel()

	backoff := wait.Backoff{Duration: l.opts.RenewInterval / 5, Factor: 1, Jitter: 0.2, Steps: math.MaxInt32}
	var lastErr error
	err = wait.ExponentialBackoffWithContext(attemptCtx, backoff, func(ctx context.Context) (bool, error) {
		lastErr = l.renew(ctx)
		if errors.Is(lastErr, ErrLost) {
			return false, lastErr
		}
		return lastErr == nil, nil
	})
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, ErrLost), ctx.Err() != nil:
		return false, err
	}
	if lastErr == nil {
		lastErr = err
	}
	return false, fmt.Errorf("%w: could not renew Lease %s/%s within %s (it expires %s after the last renewal): %w",
		ErrLost, l.namespace, l.name, window, l.opts.LeaseDuration, lastErr)
}

// renew moves our renewTime forward; an error wrapping ErrLost means the Lease is no longer ours.
// It updates the Lease as we last wrote it, without reading it first: the resourceVersion makes
// the write fail with a Conflict if anyone else wrote it since, and then it is read again.
func (l *Lock) renew(ctx context.Context) error {
	now := time.Now()
	lease := l.held
	if lease == nil {
		var err error
		if lease, err = l.leases.Get(ctx, l.name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: Lease %s/%s was deleted", ErrLost, l.namespace, l.name)
		} else if err != nil {
			return err
		}
	}
	if holder := holderOf(lease); holder != l.identity {
		return fmt.Errorf("%w: Lease %s/%s is now held by %q", ErrLost, l.namespace, l.name, holder)
	}
	lease = lease.DeepCopy()
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
	updated, err := l.leases.Update(ctx, lease, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: Lease %s/%s was deleted", ErrLost, l.namespace, l.name)
	}
	if err != nil {
		// A Conflict (or any failure) is retried from a fresh read, which tells whether the
		// Lease is still ours.
		l.held = nil
		return err
	}
	l.held, l.lastRenewed = updated, now
	return nil
}

// deleteIfOurs deletes the Lease unless it is gone or someone else holds it by now. It
// deletes the Lease as we last wrote it, without reading it first: the preconditions make the
// delete fail with a Conflict if anyone wrote it since; then we read it again.
func (l *Lock) deleteIfOurs(ctx context.Context) error {
	lease := l.held
	if lease == nil {
		var err error
		if lease, err = l.leases.Get(ctx, l.name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
	}
	if holderOf(lease) != l.identity {
		return nil
	}
	err := l.leases.Delete(ctx, l.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{
		UID: &lease.UID, ResourceVersion: &lease.ResourceVersion,
	}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		l.held = nil
	}
	return err
}

// retryOnConflict runs fn until it succeeds, retrying after a Conflict or AlreadyExists like
// retry.RetryOnConflict, but stopping as soon as ctx is done.
func retryOnConflict(ctx context.Context, fn func(context.Context) error) error {
	var lastErr error
	err := wait.ExponentialBackoffWithContext(ctx, retry.DefaultRetry, func(ctx context.Context) (bool, error) {
		lastErr = fn(ctx)
		switch {
		case lastErr == nil:
			return true, nil
		case apierrors.IsConflict(lastErr), apierrors.IsAlreadyExists(lastErr):
			return false, nil
		default:
			return false, lastErr
		}
	})
	if wait.Interrupted(err) && ctx.Err() == nil && lastErr != nil {
		return lastErr // out of retries: report the last conflict
	}
	return err
}

// holderPattern reads the process and host out of an identity made by newIdentity.
var holderPattern = regexp.MustCompile(`^terraform-provider-canary pid (\d+) on host (\S+) \(run `)

// deadOnThisHost reports whether holder names a process on this host that no longer exists:
// a run that was killed (SIGKILL leaves its Lease behind). Its Lease need not be waited out.
func deadOnThisHost(holder string) bool {
	m := holderPattern.FindStringSubmatch(holder)
	if m == nil {
		return false
	}
	pid, err := strconv.Atoi(m[1])
	if err != nil || pid <= 0 {
		return false
	}
	host := m[2]
	self, err := os.Hostname()
	if err != nil || host != self || pid == os.Getpid() {
		return false
	}
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	// A killed process whose parent died too stays a zombie until init reaps it.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && (fields[0] == "Z" || fields[0] == "X")
}

func holderOf(lease *coordinationv1.Lease) string {
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// newIdentity names this run for whoever finds the Lease held: process, host, and a random
// id that tells apart two runs of one process.
func newIdentity() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	runID := make([]byte, 4)
	_, _ = rand.Read(runID) // crypto/rand.Read never fails
	return fmt.Sprintf("terraform-provider-canary pid %d on host %s (run %s)", os.Getpid(), host, hex.EncodeToString(runID))
}

func humanAgo(d time.Duration) time.Duration {
	if d < time.Second {
		return max(d, 0).Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

func ceilSeconds(d time.Duration) time.Duration {
	return max(time.Duration(math.Ceil(d.Seconds()))*time.Second, time.Second)
}
