package istio_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/istio"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

// New is the istio router, as the registry would build it (this package cannot import the registry).
func New(provider string, c router.Clients, s router.Spec) (router.Router, error) {
	if provider != "istio" {
		return nil, fmt.Errorf("the istio driver's tests cannot build a %s router", provider)
	}
	return istio.Driver{}.NewRouter(c, s), nil
}
func newIstioRouter(t *testing.T, s router.Spec) (router.Clients, router.Router) {
	t.Helper()
	c := routertest.FakeClients(t, nil)
	r, err := New("istio", c, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, r
}
