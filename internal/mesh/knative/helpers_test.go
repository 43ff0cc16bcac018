package knative

import (
	"fmt"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// New is the knative router, as the registry would build it (this package cannot import the
// registry).
func New(provider string, c router.Clients, s router.Spec) (router.Router, error) {
	if provider != "knative" {
		return nil, fmt.Errorf("the knative driver's tests cannot build a %s router", provider)
	}
	return Driver{}.NewRouter(c, s), nil
}

// spec is a knative release of the Knative Service podinfo.
var spec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 80}
