package conformance

import (
	"context"
	"errors"
	"io"
	"net/url"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/kube"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

var splitGR = router.TrafficSplitResource.GroupResource()

// API faults as client-go reports them.
var (
	errConflict    = apierrors.NewConflict(splitGR, "podinfo", errors.New("the object has been modified"))
	errInternal    = apierrors.NewInternalError(errors.New("etcdserver: leader changed"))
	errThrottled   = apierrors.NewTooManyRequests("too many requests", 1)
	errUnavailable = apierrors.NewServiceUnavailable("the server is shutting down")
	errBadGateway  = apierrors.NewGenericServerResponse(502, "get", splitGR, "podinfo", "", 0, false)
	errReset       = &url.Error{Op: "Put", URL: "https://127.0.0.1:16443/apis", Err: &netOpError{syscall.ECONNRESET}}
	errRefused     = &url.Error{Op: "Get", URL: "https://127.0.0.1:16443/apis", Err: &netOpError{syscall.ECONNREFUSED}}
	errEOF         = &url.Error{Op: "Get", URL: "https://127.0.0.1:16443/apis", Err: io.EOF}
	errForbidden   = apierrors.NewForbidden(splitGR, "podinfo", errors.New("RBAC: access denied"))
)

// netOpError wraps an errno the way *net.OpError does.
type netOpError struct{ errno syscall.Errno }

func (e *netOpError) Error() string { return "dial tcp: " + e.errno.Error() }
func (e *netOpError) Unwrap() error { return e.errno }

// storeDirectly changes a stored object behind the router's back, as another writer would.
func storeDirectly(t *testing.T, c router.Clients, gvr schema.GroupVersionResource, ns, name string, change func(*unstructured.Unstructured)) {
	t.Helper()
	obj, err := routertest.FakeDynamic(c).Tracker().Get(gvr, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	u := obj.(*unstructured.Unstructured).DeepCopy()
	change(u)
	if err := routertest.FakeDynamic(c).Tracker().Update(gvr, u, ns); err != nil {
		t.Fatal(err)
	}
}

func newOSMRouter(t *testing.T) (router.Clients, router.Router) {
	t.Helper()
	c := routertest.FakeClients(t, nil)
	r, _ := New("osm", c, routertest.OSMSpec)
	if err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, r
}

func TestTransient(t *testing.T) {
	for _, err := range []error{errConflict, errInternal, errThrottled, errUnavailable, errBadGateway, errReset, errRefused, errEOF,
		apierrors.NewTimeoutError("request timed out", 1), apierrors.NewServerTimeout(splitGR, "update", 1)} {
		if !kube.Transient(err) {
			t.Errorf("%v: not transient", err)
		}
	}
	for _, err := range []error{errForbidden, apierrors.NewNotFound(splitGR, "podinfo"), apierrors.NewBadRequest("bad"), errors.New("invalid weights")} {
		if kube.Transient(err) {
			t.Errorf("%v: transient", err)
		}
	}
}

func TestSetRoutesRetriesAPIFaults(t *testing.T) {
	c, r := newOSMRouter(t)
	updates := routertest.FailFirst(c, "update", "trafficsplits", errConflict, errInternal, errThrottled, errUnavailable, errReset)
	if err := r.SetRoutes(context.Background(), router.Weights{Primary: 70, Canary: 30}); err != nil {
		t.Fatal(err)
	}
	if got := updates(); got != 6 {
		t.Fatalf("%d updates, want 5 failed and 1 accepted", got)
	}
	want := `{"backends":[{"service":"podinfo-canary","weight":30},{"service":"podinfo-primary","weight":70}],"service":"podinfo"}`
	if got := routertest.SpecJSON(t, routertest.Get(t, c, router.TrafficSplitResource, "test", "podinfo")); got != want {
		t.Fatalf("stored spec %s\nwant %s", got, want)
	}
}

// A conflict means someone else wrote the object: the retry must start from their version.
func TestConflictRereadsBeforeWriting(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{routertest.APISIXUserRoute})
	r, _ := New("apisix", c, routertest.APISIXSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	conflicts := 0
	routertest.FakeDynamic(c).PrependReactor("update", "apisixroutes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 2 {
			return false, nil, nil
		}
		conflicts++
		storeDirectly(t, c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary", func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{"edited-by": "someone-else", router.LabelRelease: "podinfo-release"})
			rule := u.Object["spec"].(map[string]any)["http"].([]any)[0].(map[string]any)
			rule["timeout"] = map[string]any{"read": "30s"}
		})
		return true, nil, errConflict
	})
	if err := r.SetRoutes(ctx, router.Weights{Primary: 40, Canary: 60}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 40, Canary: 60})
	route := routertest.Get(t, c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary")
	if route.GetLabels()["edited-by"] != "someone-else" {
		t.Fatalf("labels %v: the other writer's change was overwritten", route.GetLabels())
	}
	if v, _, _ := unstructured.NestedString(route.Object["spec"].(map[string]any)["http"].([]any)[0].(map[string]any), "timeout", "read"); v != "30s" {
		t.Fatalf("timeout.read %q: the other writer's change was overwritten", v)
	}
}

func TestReadsRetryNetworkFaults(t *testing.T) {
	c, r := newOSMRouter(t)
	gets := routertest.FailFirst(c, "get", "trafficsplits", errReset, errEOF, errRefused, errBadGateway)
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	if got := gets(); got != 5 {
		t.Fatalf("%d reads, want 4 failed and 1 answered", got)
	}
	routertest.MustDrift(t, r)
}

func TestCreateAndDeleteRetry(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil, routertest.GlooServices()...)
	creates := routertest.FailFirst(c, "create", "routetables", errThrottled, errInternal)
	r, _ := New("gloo", c, routertest.GlooSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if creates() != 3 {
		t.Fatalf("%d creates, want 2 failed and 1 accepted", creates())
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})

	deletes := routertest.FailFirst(c, "delete", "upstreams", errUnavailable, errReset)
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if deletes() != 4 {
		t.Fatalf("%d deletes, want 2 failed and 2 accepted", deletes())
	}
	for _, name := range []string{"test-podinfo-primaryupstream-80", "test-podinfo-canaryupstream-80"} {
		if routertest.Exists(t, c, router.UpstreamResource, "test", name) {
			t.Errorf("Upstream %s still exists", name)
		}
	}
}

func TestPermanentErrorsAreNotRetried(t *testing.T) {
	c, r := newOSMRouter(t)
	updates := routertest.FailFirst(c, "update", "trafficsplits", errForbidden, errForbidden)
	err := r.SetRoutes(context.Background(), router.Weights{Primary: 90, Canary: 10})
	if !apierrors.IsForbidden(err) || updates() != 1 {
		t.Fatalf("error %v after %d updates, want Forbidden after 1", err, updates())
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
}

func TestRetryNeverOutlivesTheContext(t *testing.T) {
	c, r := newOSMRouter(t)
	routertest.FailFirst(c, "update", "trafficsplits", errUnavailable, errUnavailable, errUnavailable, errUnavailable,
		errUnavailable, errUnavailable, errUnavailable, errUnavailable)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := r.SetRoutes(ctx, router.Weights{Primary: 90, Canary: 10})
	if took := time.Since(start); took > time.Second {
		t.Fatalf("SetRoutes took %v with a 150ms deadline", took)
	}
	if !apierrors.IsServiceUnavailable(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the last API error and the deadline", err)
	}
}

func TestRetryGivesUpWhenTheBackoffIsSpent(t *testing.T) {
	saved := kube.WriteBackoff
	kube.WriteBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 3}
	t.Cleanup(func() { kube.WriteBackoff = saved })
	c, r := newOSMRouter(t)
	updates := routertest.FailFirst(c, "update", "trafficsplits", errInternal, errInternal, errInternal, errInternal)
	err := r.SetRoutes(context.Background(), router.Weights{Primary: 90, Canary: 10})
	if !apierrors.IsInternalError(err) || updates() != 3 {
		t.Fatalf("error %v after %d updates, want InternalError after 3", err, updates())
	}
	routertest.WantErr(t, err, "updating TrafficSplit test/podinfo: Internal error occurred: etcdserver: leader changed")
}
