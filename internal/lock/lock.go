// Package lock keeps two terraform runs from changing the same canary_release at once.
//
// A run holds a coordination.k8s.io/v1 Lease named "<release>-canary-release-lock" in the
// release's namespace while it touches the cluster. The Lease names the holder (process, host,
// a random run id, and the PID namespace, boot and start time that let a run on the same host
// prove the process gone); its renewTime moves while the holder is alive.
//
// Liveness is judged from what the acquiring process saw, never from the holder's clock, which
// may be skewed: as in client-go's leaderelection, a held Lease counts as expired only once it
// stayed unchanged for its leaseDurationSeconds, by the local clock, after this process first
// read it. A holder whose process is provably gone (same PID namespace and boot, and no process
// with its pid and start time) is replaced at once. An empty Lease is taken at once.
//
// The holder renews the Lease every RenewInterval until Release. A renewal is one Update of
// the Lease as the holder last wrote it: the resourceVersion it carries makes the API server
// refuse it (Conflict) if anyone else wrote the Lease since, and only then is the Lease read
// again to see who holds it. Taking the lock is one Get and one Create or Update; Release gives
// it back with one Update that empties the holder, keeping the Lease (as client-go's
// leaderelection does): a missing Lease then means that it was never taken (FoundNoLease), or
// that someone deleted it, and the caller knows from its own records which (see FoundNoLease).
// Retire deletes it instead, when what it guarded is gone. So a run's lock costs three requests
// plus one per renewal.
//
// If it cannot renew for LeaseDuration-RenewInterval, or finds the Lease deleted or held by
// someone else, Lost is closed and contexts from Lock.Context are cancelled with ErrLost, so the
// run stops advancing before another run may take over. The holder also watches its Lease, so a
// deletion or another holder is seen at once rather than at the next renewal (a Role without
// the watch right leaves it to the renewals). Another run takes the Lease over a lease duration
// after our last renewal at the earliest; ValidUntil is that moment less a margin, and
// ValidContext ends by it, so even the cleanup after a lost lock never writes past it; once the
// Lease was seen deleted or taken, ValidUntil is zero: nothing more is written.
package lock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/util/retry"
)

const (
	// LeaseDuration is how long a Lease stays valid after its last renewal; a killed run's
	// lock is taken over by a run that watched it unrenewed this long (at once on the same
	// host and PID namespace, see judge). Renewals are most of what a lock costs the API
	// server, so the lease is long: a run of a few minutes renews it a handful of times.
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
	// WaitForExpiry makes Acquire watch a Lease whose holder this host cannot check
	// (another host or PID namespace) instead of failing at once with a *HeldError: it
	// fails as soon as the Lease is renewed, and takes it over once it stayed unchanged for
	// its lease duration.
	WaitForExpiry bool
	// Machine names this process in the Lease and checks holders of its host; nil is this
	// machine. The fault campaign simulates hosts, containers and reused pids with it.
	Machine Machine
}

// validFor is how long after a renewal started the Lease is certainly still ours: a lease
// duration, less a tenth for a write sent just before that reaches the API server late and
// for clocks that run at slightly different rates.
func (o Options) validFor() time.Duration { return o.LeaseDuration - o.LeaseDuration/10 }

func (o Options) withDefaults() (Options, error) {
	if o.LeaseDuration == 0 {
		o.LeaseDuration = LeaseDuration
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = RenewInterval
	}
	if o.Machine == nil {
		o.Machine = localMachine{}
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
	// Since is the holder's acquireTime, by its clock; zero if the Lease has none.
	Since time.Time
	// Running tells that the holder's process runs on this host.
	Running bool
	// Renewed tells that the Lease was written while Acquire watched it: its holder is alive.
	Renewed bool
	// LeaseDuration is how long a run must see the Lease unchanged before it takes it over.
	LeaseDuration time.Duration
	// TakeoverAt is when, by the local clock, Acquire could take the Lease over if it stayed
	// unchanged; zero if Running.
	TakeoverAt time.Time
}

// Error names the holder and since when it holds the lock, and tells what to do.
func (e *HeldError) Error() string {
	since := ""
	if !e.Since.IsZero() {
		since = " since " + e.Since.UTC().Format(time.RFC3339)
	}
	switch {
	case e.Running:
		since += " (its process runs on this host)"
	case e.Renewed:
		since += " (renewed while this run watched)"
	}
	return fmt.Sprintf("canary_release %s/%s is locked by another run: %q holds Lease %s/%s%s; "+
		"wait for that run to finish, or, if it was killed, retry: a run takes the Lease over once it has seen it unrenewed for %s",
		e.Namespace, e.Release, e.Holder, e.Namespace, e.Lease, since, e.LeaseDuration)
}

// watchable tells whether watching the Lease longer may show its holder gone.
func (e *HeldError) watchable() bool { return !e.Running && !e.Renewed }

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
	// foundNoLease: Acquire found no Lease and created it; triedCreate: it sent a Create.
	foundNoLease, triedCreate bool

	// seen is the held Lease as Acquire last found it changed, and seenAt when, by the
	// local clock: its holder counts as gone once it stays so for its lease duration.
	seen   *coordinationv1.Lease
	seenAt time.Time

	// lastRenewed is when the last successful write of our renewTime started, and held the
	// Lease as that write returned it (the API server's copy, with its resourceVersion); only
	// the renew goroutine touches them once Acquire returned, and Release after it stopped.
	lastRenewed time.Time
	held        *coordinationv1.Lease

	stopRenewing context.CancelCauseFunc
	renewDone    chan struct{} // closed when the renew goroutine returned
	lost         chan struct{} // closed, after lostErr is set, when the lock may be lost
	lostErr      error

	mu         sync.Mutex
	validUntil time.Time     // see ValidUntil
	validErr   error         // why validUntil was cut short (Lease taken, deleted, released)
	gone       bool          // the Lease was seen deleted or taken, or released: validUntil stays zero
	validMoved chan struct{} // closed and replaced when validUntil changes

	releaseOnce sync.Once
	releaseErr  error
}

// Acquire takes the lock of the canary_release named release in namespace, or fails with a
// *HeldError if another run holds it that is not provably gone (see Options.WaitForExpiry).
// An empty Lease is taken; TookOver tells whether a gone holder was replaced.
// Renewal does not stop when ctx is cancelled, so a rollback after cancellation still holds
// the lock: always call Release.
func Acquire(ctx context.Context, kube kubernetes.Interface, namespace, release string, opts Options) (*Lock, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Lock{
		leases:     kube.CoordinationV1().Leases(namespace),
		namespace:  namespace,
		release:    release,
		name:       release + leaseNameSuffix,
		identity:   newIdentity(opts.Machine),
		opts:       opts,
		renewDone:  make(chan struct{}),
		lost:       make(chan struct{}),
		validMoved: make(chan struct{}),
	}

	var held *HeldError
	for {
		err = retryOnConflict(ctx, l.tryAcquire)
		if !opts.WaitForExpiry || !errors.As(err, &held) || !held.watchable() {
			break
		}
		// Read again often enough to fail soon after the holder renews.
		timer := time.NewTimer(min(opts.RenewInterval/4, time.Until(held.TakeoverAt)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("%w; gave up waiting for it to expire: %w", held, context.Cause(ctx))
		case <-timer.C:
		}
	}
	if errors.As(err, &held) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("acquire Lease %s/%s for canary_release %s/%s: %w", namespace, l.name, namespace, release, err)
	}

	renewCtx, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	l.stopRenewing = stop
	go l.keepRenewing(renewCtx, l.held.ResourceVersion)
	return l, nil
}

// FoundNoLease reports that Acquire found no Lease and created it. Since Release keeps the
// Lease, a missing one means the release never took its lock, or that someone deleted the Lease,
// perhaps while a run held it: a caller whose records show that the lock was taken before must
// then wait a lease duration (see LeaseDuration), as for a holder that stopped renewing, before it
// writes, since the run that held the deleted Lease may still be writing until it notices.
func (l *Lock) FoundNoLease() bool { return l.foundNoLease }

// LeaseDuration is how long a Lease stays valid after its last renewal.
func (l *Lock) LeaseDuration() time.Duration { return l.opts.LeaseDuration }

// RenewInterval is how often the holder renews its Lease.
func (l *Lock) RenewInterval() time.Duration { return l.opts.RenewInterval }

// Identity is the holder identity this lock writes into the Lease.
func (l *Lock) Identity() string { return l.identity }

// TookOver reports whether Acquire replaced a holder that was gone or stopped renewing (a run
// that was killed), and which one, so the caller can say it is recovering after a killed run.
func (l *Lock) TookOver() (previousHolder string, ok bool) { return l.previousHolder, l.tookOver }

// Lost is closed when the lock may no longer be held: renewal failed for
// LeaseDuration-RenewInterval, or the Lease was deleted or taken by someone else. It is
// never closed after Release.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// ValidUntil is the local time until which the Lease is certainly still ours: another run
// takes it over a lease duration after our last renewal started at the earliest, as it judges
// by its own observation. Renewals move it on; it stops once the lock is lost, and is zero once
// the Lease was seen taken or deleted, or was released.
func (l *Lock) ValidUntil() time.Time {
	until, _, _ := l.validity()
	return until
}

// Context returns a child of parent that is cancelled with a cause wrapping ErrLost when Lost
// fires, or by ValidUntil should renewal stall, so work under it stops advancing. It carries
// the lock for FromContext. Release leaves it alone: stop using it before.
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.boundContext(parent, true)
}

// ValidContext is Context for the work that puts traffic back on a serving side after the
// lock was lost: it ends by ValidUntil only, not when Lost fires, since Lost fires a renew
// interval early to leave that work this time, and no more.
func (l *Lock) ValidContext(parent context.Context) (context.Context, context.CancelFunc) {
	return l.boundContext(parent, false)
}

type lockKey struct{}

// FromContext returns the lock whose Context or ValidContext ctx descends from, or nil, so
// that code far from the lock can keep its own contexts within the lock's validity.
func FromContext(ctx context.Context) *Lock {
	l, _ := ctx.Value(lockKey{}).(*Lock)
	return l
}

func (l *Lock) boundContext(parent context.Context, onLost bool) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.WithValue(parent, lockKey{}, l))
	go l.bound(ctx, cancel, onLost)
	return ctx, func() { cancel(nil) }
}

// bound cancels ctx once ValidUntil passed or, with onLost, when Lost fires. It returns,
// leaving ctx alone, when ctx ends or the lock is released.
func (l *Lock) bound(ctx context.Context, cancel context.CancelCauseFunc, onLost bool) {
	done := l.renewDone
	for {
		// Checked first: Release invalidates the lock after renewDone closed.
		select {
		case <-done:
			select {
			case <-l.lost:
			default:
				return // released
			}
			if onLost {
				cancel(l.lostErr)
				return
			}
			done = nil // ValidUntil no longer moves forward: follow it to its end
		default:
		}
		until, moved, why := l.validity()
		if why == nil {
			why = fmt.Errorf("%w: Lease %s/%s was not renewed within %s, so another run may take it over",
				ErrLost, l.namespace, l.name, l.opts.validFor())
		}
		timer := time.NewTimer(time.Until(until))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
			cancel(why)
			return
		case <-moved:
		case <-done:
		}
		timer.Stop()
	}
}

func (l *Lock) validity() (until time.Time, moved <-chan struct{}, why error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil, l.validMoved, l.validErr
}

// setValidity moves ValidUntil; final cuts it to zero for good (the Lease was seen deleted or
// taken, or was released), so that a renewal whose answer comes back later does not revive it.
func (l *Lock) setValidity(until time.Time, why error, final bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return
	}
	l.validUntil, l.validErr, l.gone = until, why, final
	close(l.validMoved)
	l.validMoved = make(chan struct{})
}

// renewed records a successful write of our renewTime that started at start.
func (l *Lock) renewed(lease *coordinationv1.Lease, start time.Time) {
	l.held, l.lastRenewed = lease, start
	l.setValidity(start.Add(l.opts.validFor()), nil, false)
}

// notOurs cuts ValidUntil short: the Lease was seen taken or deleted.
func (l *Lock) notOurs(err error) error {
	l.setValidity(time.Time{}, err, true)
	return err
}

// Release stops renewing and empties the Lease's holder, if still ours, so the next run can
// start at once; the Lease stays, so that a missing one tells of a deletion (see
// FoundNoLease). Pass a fresh short context: the one given to Acquire may already be
// cancelled. Calling it, or Retire, again returns the first result.
func (l *Lock) Release(ctx context.Context) error { return l.giveBack(ctx, l.emptyIfOurs) }

// Retire is Release for a lock whose release is gone: it deletes the Lease, if still ours.
func (l *Lock) Retire(ctx context.Context) error { return l.giveBack(ctx, l.deleteIfOurs) }

func (l *Lock) giveBack(ctx context.Context, write func(context.Context) error) error {
	l.releaseOnce.Do(func() {
		l.stopRenewing(nil)
		select {
		case <-l.renewDone:
		case <-ctx.Done():
			l.releaseErr = fmt.Errorf("release Lease %s/%s: %w", l.namespace, l.name, context.Cause(ctx))
			return
		}
		if err := retryOnConflict(ctx, write); err != nil {
			l.releaseErr = fmt.Errorf("release Lease %s/%s: %w", l.namespace, l.name, err)
			return
		}
		l.setValidity(time.Time{}, fmt.Errorf("released Lease %s/%s", l.namespace, l.name), true)
	})
	return l.releaseErr
}

// tryAcquire reads the Lease and takes it if it is free or its holder gone (see mayTakeOver),
// or creates it when there is none; Conflict and AlreadyExists mean another run wrote in
// between, and the caller tries again. A released lock leaves an empty Lease, so the common case
// is one Get and one Update.
func (l *Lock) tryAcquire(ctx context.Context) error {
	lease, err := l.leases.Get(ctx, l.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		now := time.Now()
		fresh := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace}}
		l.hold(fresh, now)
		fresh.Spec.LeaseTransitions = new(int32)
		l.triedCreate = true
		created, err := l.leases.Create(ctx, fresh, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		l.foundNoLease = true
		l.renewed(created, now)
		return nil
	}
	if err != nil {
		return err
	}

	holder := holderOf(lease)
	// Our own identity: a write of ours that failed on the way back but was applied.
	if holder != "" && holder != l.identity {
		if err := l.mayTakeOver(lease, time.Now()); err != nil {
			return err
		}
	}

	// Released, or its holder gone: take it over. The Update carries the resourceVersion we
	// read, so if another run wrote it meanwhile we get a Conflict and decide again.
	now := time.Now()
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
	if holder != l.identity {
		l.previousHolder, l.tookOver = holder, holder != ""
	} else {
		// Ours already: our Create whose answer was lost (then there was no Lease), or our
		// takeover's; counted as the first when in doubt, which only makes the caller wait.
		l.foundNoLease = l.triedCreate
	}
	l.renewed(updated, now)
	return nil
}

// mayTakeOver returns nil if lease, read at now, may be taken from its holder: its process is
// provably gone, or the Lease stayed unchanged for its lease duration since this process first
// read it so. Else a *HeldError. The holder's renewTime is only compared with itself: clocks
// of other hosts may be skewed.
func (l *Lock) mayTakeOver(lease *coordinationv1.Lease, now time.Time) error {
	renewed := l.seen != nil && !sameRecord(l.seen, lease)
	if l.seen == nil || renewed {
		l.seen, l.seenAt = lease.DeepCopy(), now
	}
	duration := l.opts.LeaseDuration
	if s := lease.Spec.LeaseDurationSeconds; s != nil {
		duration = time.Duration(*s) * time.Second
	}
	liveness := judgeOn(l.opts.Machine, holderOf(lease))
	if liveness == dead || liveness == unknown && !renewed && now.Sub(l.seenAt) >= duration {
		return nil
	}
	held := &HeldError{
		Namespace: l.namespace, Release: l.release, Lease: l.name, Holder: holderOf(lease),
		Running: liveness == running, Renewed: renewed, LeaseDuration: duration,
	}
	if !held.Running {
		held.TakeoverAt = l.seenAt.Add(duration)
	}
	if lease.Spec.AcquireTime != nil {
		held.Since = lease.Spec.AcquireTime.Time
	}
	return held
}

// sameRecord tells whether nobody wrote the Lease between two reads.
func sameRecord(a, b *coordinationv1.Lease) bool {
	return a.ResourceVersion == b.ResourceVersion && apiequality.Semantic.DeepEqual(a.Spec, b.Spec)
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

// keepRenewing renews every RenewInterval until ctx is cancelled (Release) or the lock is lost,
// while watchForLoss follows the Lease from version, the one our last write returned.
func (l *Lock) keepRenewing(ctx context.Context, version string) {
	defer close(l.renewDone)
	wctx, stopWatching := context.WithCancelCause(ctx)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		l.watchForLoss(wctx, version, stopWatching)
	}()
	err := wait.PollUntilContextCancel(wctx, l.opts.RenewInterval, false, l.renewBeforeDeadline)
	if cause := context.Cause(wctx); errors.Is(cause, ErrLost) {
		err = cause // seen by the watch
	}
	stopWatching(nil)
	<-watching
	if errors.Is(err, ErrLost) {
		l.lostErr = err
		close(l.lost)
	}
}

// watchForLoss follows the Lease from version and, as soon as it is deleted or names another
// holder, cuts ValidUntil to zero and ends ctx with the cause (wrapping ErrLost): a deleted
// Lease lets another run in at once, so the renewal, up to RenewInterval later, would be late.
// It is best effort: a watch the Role does not allow, or that the API server ends with an
// error, leaves it to the renewals.
func (l *Lock) watchForLoss(ctx context.Context, version string, lose context.CancelCauseFunc) {
	selector := fields.OneTermEqualSelector("metadata.name", l.name).String()
	for ctx.Err() == nil {
		w, err := l.leases.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: version, AllowWatchBookmarks: true})
		if err != nil {
			return
		}
		var lost error
		version, lost, err = l.follow(ctx, w, version)
		w.Stop()
		if lost != nil {
			lose(l.notOurs(lost))
			return
		}
		if err != nil {
			return
		}
		// The API server closes watches after a while: follow on from where this one ended,
		// after a pause that keeps a watch closed at once from spinning.
		timer := time.NewTimer(l.opts.RenewInterval / 4)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// follow reads w until it ends, returning the last resourceVersion seen and, if the Lease was
// deleted or taken, why it is lost; err when the watch reported an error.
func (l *Lock) follow(ctx context.Context, w watch.Interface, version string) (last string, lost, err error) {
	for {
		var ev watch.Event
		var open bool
		select {
		case <-ctx.Done():
			return version, nil, nil
		case ev, open = <-w.ResultChan():
		}
		if !open {
			return version, nil, nil
		}
		if ev.Type == watch.Error {
			return version, nil, apierrors.FromObject(ev.Object)
		}
		lease, ok := ev.Object.(*coordinationv1.Lease)
		if !ok || lease.Name != l.name {
			continue
		}
		switch holder := holderOf(lease); {
		case ev.Type == watch.Deleted:
			return version, fmt.Errorf("%w: Lease %s/%s was deleted", ErrLost, l.namespace, l.name), nil
		case ev.Type != watch.Bookmark && holder != l.identity:
			return version, fmt.Errorf("%w: Lease %s/%s is now held by %q", ErrLost, l.namespace, l.name, holder), nil
		}
		version = lease.ResourceVersion
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
			return l.notOurs(fmt.Errorf("%w: Lease %s/%s was deleted", ErrLost, l.namespace, l.name))
		} else if err != nil {
			return err
		}
	}
	if holder := holderOf(lease); holder != l.identity {
		return l.notOurs(fmt.Errorf("%w: Lease %s/%s is now held by %q", ErrLost, l.namespace, l.name, holder))
	}
	lease = lease.DeepCopy()
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
	updated, err := l.leases.Update(ctx, lease, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return l.notOurs(fmt.Errorf("%w: Lease %s/%s was deleted", ErrLost, l.namespace, l.name))
	}
	if err != nil {
		// A Conflict (or any failure) is retried from a fresh read, which tells whether the
		// Lease is still ours.
		l.held = nil
		return err
	}
	l.renewed(updated, now)
	return nil
}

// emptyIfOurs empties the Lease's holder unless it is gone or someone else holds it by now,
// writing onto the Lease as we last wrote it (a Conflict reads it again), like deleteIfOurs.
func (l *Lock) emptyIfOurs(ctx context.Context) error {
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
	lease = lease.DeepCopy()
	lease.Spec.HolderIdentity, lease.Spec.AcquireTime, lease.Spec.RenewTime = nil, nil, nil
	_, err := l.leases.Update(ctx, lease, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		l.held = nil
	}
	return err
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

func holderOf(lease *coordinationv1.Lease) string {
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}
