package contour

import (
	"fmt"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// New is the contour router, as the registry would build it (this package cannot import the
// registry).
func New(provider string, c router.Clients, s router.Spec) (router.Router, error) {
	if provider != "contour" {
		return nil, fmt.Errorf("the contour driver's tests cannot build a %s router", provider)
	}
	return Driver{}.NewRouter(c, s), nil
}

// spec is a contour release of podinfo on port 9898.
var spec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 9898}
