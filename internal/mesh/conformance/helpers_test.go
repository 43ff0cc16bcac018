package conformance

import (
	"context"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

func TestValidateWeights(t *testing.T) {
	for _, w := range []router.Weights{{Primary: 0, Canary: 0}, {Primary: 50, Canary: 40}, {Primary: 101, Canary: -1}, {Primary: -10, Canary: 110}, {Primary: 60, Canary: 60}} {
		if err := router.ValidateWeights(w); err == nil {
			t.Errorf("%+v accepted", w)
		}
	}
	for _, w := range []router.Weights{{Primary: 100, Canary: 0}, {Primary: 0, Canary: 100}, {Primary: 90, Canary: 10}} {
		if err := router.ValidateWeights(w); err != nil {
			t.Errorf("%+v: %v", w, err)
		}
	}
}

// New is the router of provider, as the mesh registry builds it.
func New(provider string, c router.Clients, s router.Spec) (router.Router, error) {
	return registry.NewRouter(provider, c, s)
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
