package apisix_test

import (
	"fmt"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/apisix"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// New is the apisix router, as the registry would build it (this package cannot import the registry).
func New(provider string, c router.Clients, s router.Spec) (router.Router, error) {
	if provider != "apisix" {
		return nil, fmt.Errorf("the apisix driver's tests cannot build a %s router", provider)
	}
	return apisix.Driver{}.NewRouter(c, s), nil
}
