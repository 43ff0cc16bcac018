package lock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	testNamespace = "shop"
	testRelease   = "web"
	testLeaseName = "web-canary-release-lock"
)

// testOptions keep every test well under a second per lease cycle; the Lease records 1s.
var testOptions = Options{LeaseDuration: 800 * time.Millisecond, RenewInterval: 100 * time.Millisecond}

var leasesResource = coordinationv1.SchemeGroupVersion.WithResource("leases")

// newKube is a fake clientset whose Leases keep the API server's optimistic concurrency: every
// write gets a new resourceVersion, and an Update or a Delete with preconditions that carries
// an older one fails with a Conflict. The lock relies on that to renew and release without
// reading the Lease first; the plain fake would let a stale copy overwrite another holder.
func newKube(objs ...kruntime.Object) *fake.Clientset {
	kube := fake.NewClientset(objs...)
	var mu sync.Mutex
	version := 100
	bump := func(lease *coordinationv1.Lease) {
		version++
		lease.ResourceVersion = strconv.Itoa(version)
	}
	live := func(ns, name string) (*coordinationv1.Lease, error) {
		obj, err := kube.Tracker().Get(leasesResource, ns, name)
		if err != nil {
			return nil, err
		}
		return obj.(*coordinationv1.Lease), nil
	}
	conflict := func(name string) error {
		return apierrors.NewConflict(leasesResource.GroupResource(), name, errors.New("the object has been modified"))
	}
	kube.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		lease := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		bump(lease)
		if lease.UID == "" {
			lease.UID = types.UID("uid-" + lease.ResourceVersion)
		}
		if err := kube.Tracker().Create(leasesResource, lease, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, lease, nil
	})
	kube.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		lease := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		old, err := live(a.GetNamespace(), lease.Name)
		if err != nil {
			return true, nil, err
		}
		if lease.ResourceVersion != "" && lease.ResourceVersion != old.ResourceVersion {
			return true, nil, conflict(lease.Name)
		}
		bump(lease)
		if err := kube.Tracker().Update(leasesResource, lease, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, lease, nil
	})
	kube.PrependReactor("delete", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		d := a.(k8stesting.DeleteAction)
		old, err := live(a.GetNamespace(), d.GetName())
		if err != nil {
			return true, nil, err
		}
		if p := d.GetDeleteOptions().Preconditions; p != nil &&
			((p.ResourceVersion != nil && *p.ResourceVersion != old.ResourceVersion) || (p.UID != nil && *p.UID != old.UID)) {
			return true, nil, conflict(d.GetName())
		}
		return true, nil, kube.Tracker().Delete(leasesResource, a.GetNamespace(), d.GetName())
	})
	return kube
}

func acquire(t *testing.T, kube *fake.Clientset, opts Options) *Lock {
	t.Helper()
	l, err := Acquire(context.Background(), kube, testNamespace, testRelease, opts)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

func getLease(t *testing.T, kube *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	lease, err := kube.CoordinationV1().Leases(testNamespace).Get(context.Background(), testLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Lease: %v", err)
	}
	return lease
}

// leaseHeldBy is a Lease as another run would have left it.
func leaseHeldBy(holder string, renewedAt time.Time, durationSeconds int32) *coordinationv1.Lease {
	transitions := int32(3)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: testLeaseName, Namespace: testNamespace},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &holder,
			LeaseDurationSeconds: &durationSeconds,
			AcquireTime:          &metav1.MicroTime{Time: renewedAt.Add(-time.Minute)},
			RenewTime:            &metav1.MicroTime{Time: renewedAt},
			LeaseTransitions:     &transitions,
		},
	}
}

// thisHost is the hostname and process that identities made here carry.
func thisHost(t *testing.T) (string, Process) {
	t.Helper()
	host, err := os.Hostname()
	me, ok := self()
	if err != nil || !ok {
		t.Skipf("this host cannot identify its processes (hostname error %v)", err)
	}
	return host, me
}

// identity is the holder identity newIdentity would write for pid on host in p's PID
// namespace and boot, with p's start time.
func identity(pid int, host string, p Process) string {
	return fmt.Sprintf("terraform-provider-canary pid %d on host %s (run 0badcafe, pidns %s, boot %s, start %d)",
		pid, host, p.PIDNamespace, p.BootID, p.Start)
}

// judge is what this machine can prove about holder's process.
func judge(holder string) liveness { return judgeOn(localMachine{}, holder) }

// exitedPid is the pid of a process of this PID namespace that has exited.
func exitedPid(t *testing.T) int {
	t.Helper()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip(err)
	}
	return dead.Process.Pid
}

// deadHolder is the identity of a killed run in this PID namespace.
func deadHolder(t *testing.T) string {
	host, me := thisHost(t)
	return identity(exitedPid(t), host, me)
}

// renewAs renews the Lease as its holder would, every interval, writing renewTime by a clock
// skew off ours, until the test ends.
func renewAs(t *testing.T, kube *fake.Clientset, every, skew time.Duration) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		ticker := time.NewTicker(every)
		defer ticker.Stop()
		leases := kube.CoordinationV1().Leases(testNamespace)
		for {
			select {
			case <-stop:
				return
			case <-ticker.C:
			}
			lease, err := leases.Get(context.Background(), testLeaseName, metav1.GetOptions{})
			if err != nil {
				continue
			}
			lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(skew)}
			_, _ = leases.Update(context.Background(), lease, metav1.UpdateOptions{})
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

func waitClosed(t *testing.T, ch <-chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("%s did not happen within %s", what, within)
	}
}

func TestAcquireCreatesLeaseHeldByUs(t *testing.T) {
	kube := newKube()
	l := acquire(t, kube, testOptions)

	want := regexp.MustCompile(`^terraform-provider-canary pid \d+ on host \S+ \(run [0-9a-f]{8}, pidns \d+, boot [0-9a-f-]{36}, start \d+\)$`)
	if _, ok := self(); !ok {
		want = regexp.MustCompile(`^terraform-provider-canary pid \d+ on host \S+ \(run [0-9a-f]{8}\)$`)
	}
	if !want.MatchString(l.Identity()) {
		t.Errorf("Identity() = %q, want process, host, run id, and PID namespace, boot and start time", l.Identity())
	}
	if got := judge(l.Identity()); got != running {
		t.Errorf("judge(our own identity) = %d, want running", got)
	}
	lease := getLease(t, kube)
	if got := holderOf(lease); got != l.Identity() {
		t.Errorf("holder = %q, want %q", got, l.Identity())
	}
	if got := lease.Labels[managedByLabel]; got != "terraform-provider-canary" {
		t.Errorf("label %s = %q", managedByLabel, got)
	}
	if got := lease.Labels[releaseLabel]; got != testRelease {
		t.Errorf("label %s = %q", releaseLabel, got)
	}
	if d := lease.Spec.LeaseDurationSeconds; d == nil || *d != 1 {
		t.Errorf("leaseDurationSeconds = %v, want 800ms rounded up to 1", d)
	}
	if a := lease.Spec.AcquireTime; a == nil || time.Since(a.Time) > time.Minute {
		t.Errorf("acquireTime = %v, want about now", a)
	}
	if prev, ok := l.TookOver(); ok || prev != "" {
		t.Errorf("TookOver() = %q, %v on a new Lease", prev, ok)
	}
}

func TestAcquireWhileHeldFailsAtOnceNamingHolder(t *testing.T) {
	kube := newKube()
	first := acquire(t, kube, testOptions)
	since := getLease(t, kube).Spec.AcquireTime.Time

	start := time.Now()
	second, err := Acquire(context.Background(), kube, testNamespace, testRelease, testOptions)
	if elapsed := time.Since(start); elapsed > testOptions.LeaseDuration/2 {
		t.Errorf("second Acquire took %s, want it to fail at once", elapsed)
	}
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second Acquire = %v, %v; want a *HeldError", second, err)
	}
	if held.Holder != first.Identity() || !held.Since.Equal(since) || held.Lease != testLeaseName || !held.Running {
		t.Errorf("HeldError = %+v, want holder %q since %s, running here", held, first.Identity(), since)
	}
	for _, want := range []string{
		"canary_release shop/web is locked by another run: ",
		fmt.Sprintf("%q holds Lease shop/web-canary-release-lock since %s (its process runs on this host)", first.Identity(), since.UTC().Format(time.RFC3339)),
		"if it was killed, retry: a run takes the Lease over once it has seen it unrenewed for 1s",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nlacks %q", err, want)
		}
	}
	if got := holderOf(getLease(t, kube)); got != first.Identity() {
		t.Errorf("holder after the failed Acquire = %q, want still %q", got, first.Identity())
	}
}

func TestHeldErrorMessage(t *testing.T) {
	err := &HeldError{
		Namespace: "ns", Release: "name", Lease: "name-canary-release-lock",
		Holder:        "terraform-provider-canary pid 42 on host ci-7 (run ab12)",
		Since:         time.Date(2026, 12, 2, 19, 0, 0, 0, time.UTC),
		Renewed:       true,
		LeaseDuration: time.Minute,
	}
	want := `canary_release ns/name is locked by another run: "terraform-provider-canary pid 42 on host ci-7 (run ab12)" ` +
		`holds Lease ns/name-canary-release-lock since 2026-12-02T19:00:00Z (renewed while this run watched); ` +
		`wait for that run to finish, or, if it was killed, retry: a run takes the Lease over once it has seen it unrenewed for 1m0s`
	if err.Error() != want {
		t.Errorf("message\n got %s\nwant %s", err.Error(), want)
	}
}

func TestReleaseLetsNextAcquireSucceedAtOnce(t *testing.T) {
	kube := newKube()
	acquireCtx, cancelAcquire := context.WithCancel(context.Background())
	first, err := Acquire(acquireCtx, kube, testNamespace, testRelease, testOptions)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	cancelAcquire() // as when terraform is interrupted: Release must still work

	releaseCtx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := first.Release(releaseCtx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if holder := holderOf(getLease(t, kube)); holder != "" {
		t.Errorf("Lease after Release held by %q, want no holder", holder)
	}
	if err := first.Release(releaseCtx); err != nil {
		t.Errorf("second Release: %v", err)
	}

	start := time.Now()
	second := acquire(t, kube, testOptions)
	if elapsed := time.Since(start); elapsed > testOptions.LeaseDuration/2 {
		t.Errorf("Acquire after Release took %s", elapsed)
	}
	if prev, ok := second.TookOver(); ok {
		t.Errorf("TookOver() = %q, true after a clean Release", prev)
	}
	if first.FoundNoLease() != true || second.FoundNoLease() {
		t.Errorf("FoundNoLease() = %v, then %v; want true for the first lock, false after a Release", first.FoundNoLease(), second.FoundNoLease())
	}
	if got := holderOf(getLease(t, kube)); got != second.Identity() {
		t.Errorf("holder = %q, want %q", got, second.Identity())
	}
}

// A Lease left by a killed process of this PID namespace is taken over at once, not waited out.
func TestAcquireTakesOverLeaseOfDeadProcessAtOnce(t *testing.T) {
	killed := deadHolder(t)
	kube := newKube(leaseHeldBy(killed, time.Now(), 15))

	start := time.Now()
	l := acquire(t, kube, testOptions)
	if elapsed := time.Since(start); elapsed > testOptions.LeaseDuration/2 {
		t.Errorf("Acquire took %s, want the dead holder replaced at once", elapsed)
	}
	if prev, ok := l.TookOver(); !ok || prev != killed {
		t.Errorf("TookOver() = %q, %v; want %q, true", prev, ok, killed)
	}
	lease := getLease(t, kube)
	if got := holderOf(lease); got != l.Identity() {
		t.Errorf("holder = %q, want %q", got, l.Identity())
	}
	if got := *lease.Spec.LeaseTransitions; got != 4 {
		t.Errorf("leaseTransitions = %d, want 4", got)
	}
	if time.Since(lease.Spec.AcquireTime.Time) > time.Minute {
		t.Errorf("acquireTime = %s, want ours", lease.Spec.AcquireTime)
	}
	if got := lease.Labels[releaseLabel]; got != testRelease {
		t.Errorf("label %s = %q after takeover", releaseLabel, got)
	}
}

func TestAcquireTakesReleasedLeaseWithoutReportingTakeover(t *testing.T) {
	kube := newKube(leaseHeldBy("", time.Now(), 15))
	l := acquire(t, kube, testOptions)
	if prev, ok := l.TookOver(); ok {
		t.Errorf("TookOver() = %q, true for a Lease without holder", prev)
	}
	if got := holderOf(getLease(t, kube)); got != l.Identity() {
		t.Errorf("holder = %q, want %q", got, l.Identity())
	}
}

func TestAcquireConflictWonByAnotherRunIsHeldError(t *testing.T) {
	kube := newKube(leaseHeldBy(deadHolder(t), time.Now(), 15))
	var raced atomic.Bool
	kube.PrependReactor("update", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if raced.Swap(true) {
			return false, nil, nil
		}
		// Another run takes the expired Lease between our Get and our Update.
		if err := kube.Tracker().Update(leasesResource, leaseHeldBy("racer", time.Now(), 15), testNamespace); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewConflict(leasesResource.GroupResource(), testLeaseName, errors.New("the object has been modified"))
	})

	_, err := Acquire(context.Background(), kube, testNamespace, testRelease, testOptions)
	var held *HeldError
	if !errors.As(err, &held) || held.Holder != "racer" || !held.Renewed {
		t.Fatalf("Acquire = %v, want a HeldError naming racer, seen writing", err)
	}
}

// A holder this host cannot check that stops renewing is taken over once this process saw its
// Lease unchanged for the lease duration, whatever its renewTime says: here the holder's clock
// ran an hour ahead, so by renewTime the Lease would not expire for an hour.
func TestAcquireTakesOverLeaseUnchangedForOneLeaseDuration(t *testing.T) {
	ghost := "terraform-provider-canary pid 7 on host gone (run 0000)"
	kube := newKube(leaseHeldBy(ghost, time.Now().Add(time.Hour), 1))

	if _, err := Acquire(context.Background(), kube, testNamespace, testRelease, testOptions); !errors.As(err, new(*HeldError)) {
		t.Fatalf("Acquire without WaitForExpiry = %v, want a HeldError", err)
	}

	opts := testOptions
	opts.WaitForExpiry = true
	start := time.Now()
	l := acquire(t, kube, opts)
	if elapsed := time.Since(start); elapsed < time.Second || elapsed > 3*time.Second {
		t.Errorf("took the Lease over after %s of watching, want its leaseDurationSeconds, 1s", elapsed)
	}
	if prev, ok := l.TookOver(); !ok || prev != ghost {
		t.Errorf("TookOver() = %q, %v; want %q, true", prev, ok, ghost)
	}
}

// A run whose clock is a minute behind ours keeps its Lease while it renews: its renewTime
// is a minute in the past by our clock, which says nothing about its liveness.
func TestSkewedHolderThatRenewsIsNotTakenOver(t *testing.T) {
	host, me := thisHost(t)
	other := identity(7, "other-"+host, me)
	kube := newKube(leaseHeldBy(other, time.Now().Add(-time.Minute), 1))
	renewAs(t, kube, testOptions.RenewInterval, -time.Minute)

	if _, err := Acquire(context.Background(), kube, testNamespace, testRelease, testOptions); !errors.As(err, new(*HeldError)) {
		t.Fatalf("Acquire = %v, want a HeldError", err)
	}
	opts := testOptions
	opts.WaitForExpiry = true
	start := time.Now()
	_, err := Acquire(context.Background(), kube, testNamespace, testRelease, opts)
	var held *HeldError
	if !errors.As(err, &held) || !held.Renewed {
		t.Fatalf("Acquire with WaitForExpiry = %v, want a HeldError seeing it renewed", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("failed after %s, want as soon as a renewal was seen", elapsed)
	}
	if got := holderOf(getLease(t, kube)); got != other {
		t.Errorf("holder = %q, want still %q", got, other)
	}
}

// Two containers that share a hostname but not a PID namespace (host network, a fixed
// --hostname): the holder's pid means nothing here, so it not existing here proves nothing.
func TestHolderInAnotherPIDNamespaceOnThisHostIsNotTakenOver(t *testing.T) {
	host, me := thisHost(t)
	foreign := me
	foreign.PIDNamespace = "1"
	other := identity(exitedPid(t), host, foreign)
	kube := newKube(leaseHeldBy(other, time.Now(), 1))
	renewAs(t, kube, testOptions.RenewInterval, 0)

	if _, err := Acquire(context.Background(), kube, testNamespace, testRelease, testOptions); !errors.As(err, new(*HeldError)) {
		t.Fatalf("Acquire = %v, want a HeldError", err)
	}
	opts := testOptions
	opts.WaitForExpiry = true
	_, err := Acquire(context.Background(), kube, testNamespace, testRelease, opts)
	var held *HeldError
	if !errors.As(err, &held) || !held.Renewed || held.Running {
		t.Fatalf("Acquire with WaitForExpiry = %v, want a HeldError seeing it renewed", err)
	}
	if got := holderOf(getLease(t, kube)); got != other {
		t.Errorf("holder = %q, want still %q", got, other)
	}
}

// A pid reused by a later process does not keep a killed run's Lease.
func TestHolderWhosePidWasReusedIsTakenOverAtOnce(t *testing.T) {
	host, me := thisHost(t)
	_, start, err := procStat(os.Getppid())
	if err != nil {
		t.Skip(err)
	}
	parent := me
	parent.Start = start + 1 // the run that held the Lease started before our parent got its pid
	reused := identity(os.Getppid(), host, parent)
	kube := newKube(leaseHeldBy(reused, time.Now(), 15))

	l := acquire(t, kube, testOptions)
	if prev, ok := l.TookOver(); !ok || prev != reused {
		t.Errorf("TookOver() = %q, %v; want %q, true", prev, ok, reused)
	}
}

func TestRenewalKeepsRenewTimeMoving(t *testing.T) {
	kube := newKube()
	l := acquire(t, kube, testOptions)
	first := getLease(t, kube)

	previous := first.Spec.RenewTime.Time
	for range 2 {
		deadline := time.Now().Add(10 * testOptions.RenewInterval)
		for !getLease(t, kube).Spec.RenewTime.After(previous) {
			if time.Now().After(deadline) {
				t.Fatalf("renewTime stayed at %s", previous)
			}
			time.Sleep(testOptions.RenewInterval / 4)
		}
		previous = getLease(t, kube).Spec.RenewTime.Time
	}

	lease := getLease(t, kube)
	if holderOf(lease) != l.Identity() || !lease.Spec.AcquireTime.Equal(first.Spec.AcquireTime) {
		t.Errorf("after renewals holder = %q acquireTime = %s; want %q, %s",
			holderOf(lease), lease.Spec.AcquireTime, l.Identity(), first.Spec.AcquireTime)
	}
	select {
	case <-l.Lost():
		t.Errorf("Lost() closed while renewals succeed: %v", l.lostErr)
	default:
	}
}

func TestLostWhenRenewalsKeepFailing(t *testing.T) {
	kube := newKube()
	var failing atomic.Bool
	kube.PrependReactor("update", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	// A longer renew interval than elsewhere leaves the loaded test machine a wide margin:
	// the lock counts as lost 750ms after the last renewal, the Lease expires after 1s.
	opts := Options{LeaseDuration: time.Second, RenewInterval: 250 * time.Millisecond}
	l := acquire(t, kube, opts)
	ctx, cancel := l.Context(context.Background())
	defer cancel()

	failing.Store(true)
	start := time.Now()
	waitClosed(t, l.Lost(), opts.LeaseDuration, "Lost()")
	if elapsed := time.Since(start); elapsed < opts.LeaseDuration/2 {
		t.Errorf("lock lost after %s of failures; a failed renewal should be retried first", elapsed)
	}
	waitClosed(t, ctx.Done(), time.Second, "cancelling the lock's context")
	cause := context.Cause(ctx)
	if !errors.Is(cause, ErrLost) {
		t.Fatalf("context cause = %v, want ErrLost", cause)
	}
	for _, want := range []string{"lost the release lock: could not renew Lease shop/web-canary-release-lock within 750ms", "apiserver unavailable"} {
		if !strings.Contains(cause.Error(), want) {
			t.Errorf("cause %q lacks %q", cause, want)
		}
	}
}

func TestLostWhenSomeoneElseTakesTheLease(t *testing.T) {
	kube := newKube()
	l := acquire(t, kube, testOptions)
	ctx, cancel := l.Context(context.Background())
	defer cancel()

	lease := getLease(t, kube)
	intruder := "intruder"
	lease.Spec.HolderIdentity = &intruder
	if _, err := kube.CoordinationV1().Leases(testNamespace).Update(context.Background(), lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	waitClosed(t, l.Lost(), testOptions.LeaseDuration, "Lost()")
	waitClosed(t, ctx.Done(), time.Second, "cancelling the lock's context")
	if cause := context.Cause(ctx); !errors.Is(cause, ErrLost) || !strings.Contains(cause.Error(), `now held by "intruder"`) {
		t.Errorf("context cause = %v, want ErrLost naming the intruder", cause)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := holderOf(getLease(t, kube)); got != intruder {
		t.Errorf("Release changed someone else's Lease: holder = %q", got)
	}
}

func TestLostWhenLeaseDeleted(t *testing.T) {
	kube := newKube()
	l := acquire(t, kube, testOptions)
	if err := kube.CoordinationV1().Leases(testNamespace).Delete(context.Background(), testLeaseName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, l.Lost(), testOptions.LeaseDuration, "Lost()")
	if !strings.Contains(l.lostErr.Error(), "was deleted") {
		t.Errorf("lost because %v, want deleted", l.lostErr)
	}
}

func TestReleaseStopsAllGoroutines(t *testing.T) {
	kube := newKube()
	baseline := runtime.NumGoroutine()

	l, err := Acquire(context.Background(), kube, testNamespace, testRelease, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel1 := l.Context(context.Background())
	defer cancel1()
	ctx2, cancel2 := l.Context(context.Background())
	defer cancel2()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.renewDone:
	default:
		t.Fatal("Release returned while the renew goroutine still runs")
	}

	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Release, %d before Acquire:\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ctx1.Err() != nil || ctx2.Err() != nil {
		t.Errorf("Release cancelled the lock's contexts: %v, %v", context.Cause(ctx1), context.Cause(ctx2))
	}
}

func TestAcquireRejectsRenewIntervalTooCloseToDuration(t *testing.T) {
	_, err := Acquire(context.Background(), newKube(), testNamespace, testRelease,
		Options{LeaseDuration: time.Second, RenewInterval: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "less than half") {
		t.Errorf("Acquire = %v, want an error about the renew interval", err)
	}
}

// A holder is judged dead only in its own PID namespace and boot, on its own host.
func TestJudge(t *testing.T) {
	host, me := thisHost(t)
	pid := exitedPid(t)
	_, parentStart, err := procStat(os.Getppid())
	if err != nil {
		t.Skip(err)
	}
	parent := me
	parent.Start = parentStart
	foreignNS, otherBoot, restarted := me, me, parent
	foreignNS.PIDNamespace = "1"
	otherBoot.BootID = "00000000-0000-0000-0000-000000000000"
	restarted.Start++
	for _, tc := range []struct {
		name, holder string
		want         liveness
	}{
		{"exited", identity(pid, host, me), dead},
		{"running", identity(os.Getppid(), host, parent), running},
		{"pid reused", identity(os.Getppid(), host, restarted), dead},
		{"another host", identity(pid, "other-"+host, me), unknown},
		{"another PID namespace", identity(pid, host, foreignNS), unknown},
		{"another boot", identity(pid, host, otherBoot), unknown},
		{"old identity", fmt.Sprintf("terraform-provider-canary pid %d on host %s (run deadbeef)", pid, host), unknown},
		{"not ours", "kube-controller-manager", unknown},
	} {
		if got := judge(tc.holder); got != tc.want {
			t.Errorf("%s: judge(%q) = %d, want %d", tc.name, tc.holder, got, tc.want)
		}
	}
}

// ValidUntil follows the renewals, and once renewal stalls the lock's contexts end by it
// even before Lost fires: another run could take the Lease over soon after.
func TestValidUntilMovesWithRenewalsAndBoundsContexts(t *testing.T) {
	kube := newKube()
	var stall atomic.Bool
	unstall := make(chan struct{})
	kube.PrependReactor("update", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if stall.Load() {
			<-unstall // a request that hangs: the fake ignores its context
		}
		return false, nil, nil
	})
	before := time.Now()
	l := acquire(t, kube, testOptions)
	t.Cleanup(func() { close(unstall) }) // runs before acquire's Release
	first := l.ValidUntil()
	if first.Before(before.Add(testOptions.LeaseDuration/2)) || first.After(time.Now().Add(testOptions.LeaseDuration)) {
		t.Fatalf("ValidUntil() = %s after acquiring at %s, want most of a lease duration later", first, before)
	}
	deadline := time.Now().Add(10 * testOptions.RenewInterval)
	for !l.ValidUntil().After(first) {
		if time.Now().After(deadline) {
			t.Fatalf("ValidUntil stayed at %s", first)
		}
		time.Sleep(testOptions.RenewInterval / 4)
	}

	stall.Store(true)
	ctx, cancel := l.Context(context.Background())
	defer cancel()
	vctx, vcancel := l.ValidContext(context.Background())
	defer vcancel()
	waitClosed(t, ctx.Done(), 2*testOptions.LeaseDuration, "the lock's context ending")
	until := l.ValidUntil()
	if now := time.Now(); now.Before(until) || now.After(until.Add(testOptions.LeaseDuration/2)) {
		t.Errorf("context ended at %s, want at ValidUntil %s", now, until)
	}
	waitClosed(t, vctx.Done(), time.Second, "the lock's ValidContext ending")
	for _, c := range []context.Context{ctx, vctx} {
		if cause := context.Cause(c); !errors.Is(cause, ErrLost) || !strings.Contains(cause.Error(), "was not renewed within 720ms") {
			t.Errorf("context cause = %v, want ErrLost saying it was not renewed", cause)
		}
	}
	select {
	case <-l.Lost():
		t.Error("Lost() closed: want the contexts ended by ValidUntil while the renewal hangs")
	default:
	}
}

// After renewal failed, Lost fires while the Lease is still ours for a moment: the cleanup,
// under ValidContext, may use that moment and no more.
func TestValidContextOutlivesLostUntilValidUntil(t *testing.T) {
	kube := newKube()
	var failing atomic.Bool
	kube.PrependReactor("update", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	opts := Options{LeaseDuration: time.Second, RenewInterval: 250 * time.Millisecond}
	l := acquire(t, kube, opts)
	failing.Store(true)
	waitClosed(t, l.Lost(), 2*opts.LeaseDuration, "Lost()")
	ctx, cancel := l.Context(context.Background())
	defer cancel()
	vctx, vcancel := l.ValidContext(context.Background())
	defer vcancel()
	until := l.ValidUntil()
	if time.Now().Before(until) && vctx.Err() != nil {
		t.Errorf("ValidContext ended at Lost, %s before ValidUntil", time.Until(until))
	}
	waitClosed(t, ctx.Done(), time.Second, "Context ending at once after Lost")
	waitClosed(t, vctx.Done(), opts.LeaseDuration, "ValidContext ending")
	if now := time.Now(); now.Before(until) || now.After(until.Add(opts.LeaseDuration/2)) {
		t.Errorf("ValidContext ended at %s, want at ValidUntil %s", now, until)
	}
	if !errors.Is(context.Cause(vctx), ErrLost) {
		t.Errorf("ValidContext cause = %v, want ErrLost", context.Cause(vctx))
	}
}

// Once the Lease is seen held by someone else, nothing may be written under the lock.
func TestValidContextEndsAtOnceWhenLeaseTaken(t *testing.T) {
	kube := newKube()
	l := acquire(t, kube, testOptions)
	vctx, vcancel := l.ValidContext(context.Background())
	defer vcancel()
	if FromContext(vctx) != l || FromContext(context.WithoutCancel(vctx)) != l || FromContext(context.Background()) != nil {
		t.Error("FromContext does not find the lock a context descends from")
	}

	lease := getLease(t, kube)
	intruder := "intruder"
	lease.Spec.HolderIdentity = &intruder
	if _, err := kube.CoordinationV1().Leases(testNamespace).Update(context.Background(), lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, vctx.Done(), 2*testOptions.RenewInterval+testOptions.LeaseDuration/4, "ValidContext ending")
	if cause := context.Cause(vctx); !errors.Is(cause, ErrLost) || !strings.Contains(cause.Error(), `now held by "intruder"`) {
		t.Errorf("cause = %v, want ErrLost naming the intruder", cause)
	}
	if !l.ValidUntil().IsZero() {
		t.Errorf("ValidUntil() = %s after the Lease was taken, want zero", l.ValidUntil())
	}
}

// A lock costs the API server one Create, one Update per renewal and one Delete: nothing is
// read while nobody else writes the Lease (issue #15's API footprint).
func TestLockWritesWithoutReading(t *testing.T) {
	kube := newKube()
	l, err := Acquire(context.Background(), kube, testNamespace, testRelease, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * testOptions.RenewInterval)
	for renewals := 0; renewals < 2; {
		if time.Now().After(deadline) {
			t.Fatal("no renewals")
		}
		time.Sleep(testOptions.RenewInterval / 4)
		renewals = 0
		for _, a := range kube.Actions() {
			if a.GetVerb() == "update" {
				renewals++
			}
		}
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	var verbs []string
	for _, a := range kube.Actions() {
		if a.GetResource() == leasesResource {
			verbs = append(verbs, a.GetVerb())
		}
	}
	var writes []string
	for _, v := range verbs {
		if v != "watch" {
			writes = append(writes, v)
		}
	}
	if writes[0] != "get" || writes[1] != "create" || writes[len(writes)-1] != "update" || slices.Contains(writes[1:], "get") {
		t.Errorf("requests %v, want a get, a create, updates (renewals, then the release), no other get", verbs)
	}
	if holder := holderOf(getLease(t, kube)); holder != "" {
		t.Errorf("Lease after Release held by %q, want no holder", holder)
	}
}

// Retire deletes the Lease: what it guarded is gone.
func TestRetireDeletesLease(t *testing.T) {
	kube := newKube()
	l, err := Acquire(context.Background(), kube, testNamespace, testRelease, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Retire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoordinationV1().Leases(testNamespace).Get(context.Background(), testLeaseName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Lease after Retire: %v, want NotFound", err)
	}
}

// A Lease deleted by hand lets another run in at once, so its holder must stop at once too, not
// at its next renewal: the watch cuts ValidUntil to zero and cancels the lock's contexts.
func TestLostAtOnceWhenLeaseDeleted(t *testing.T) {
	kube := newKube()
	slow := Options{LeaseDuration: 60 * time.Second, RenewInterval: 20 * time.Second}
	l := acquire(t, kube, slow)
	ctx, cancel := l.Context(context.Background())
	defer cancel()
	vctx, vcancel := l.ValidContext(context.Background())
	defer vcancel()
	// Let the watch start, as a run's first requests would.
	deadline := time.Now().Add(5 * time.Second)
	for !slices.ContainsFunc(kube.Actions(), func(a k8stesting.Action) bool { return a.GetVerb() == "watch" }) {
		if time.Now().After(deadline) {
			t.Fatal("the lock does not watch its Lease")
		}
		time.Sleep(time.Millisecond)
	}
	if err := kube.CoordinationV1().Leases(testNamespace).Delete(context.Background(), testLeaseName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, ctx.Done(), 2*time.Second, "the lock's context ending")
	waitClosed(t, vctx.Done(), time.Second, "the lock's cleanup context ending")
	if cause := context.Cause(ctx); !errors.Is(cause, ErrLost) || !strings.Contains(cause.Error(), "was deleted") {
		t.Errorf("context ended because %v, want the Lease deleted", cause)
	}
	if !l.ValidUntil().IsZero() {
		t.Errorf("ValidUntil() = %s after the Lease was deleted, want zero", l.ValidUntil())
	}
	waitClosed(t, l.Lost(), time.Second, "Lost()")

	// The next run finds no Lease, and says so: its caller decides whether to wait.
	next := acquire(t, kube, slow)
	if !next.FoundNoLease() {
		t.Error("FoundNoLease() = false after the Lease was deleted")
	}
}
