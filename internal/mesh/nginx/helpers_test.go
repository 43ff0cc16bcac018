package nginx_test

import (
	"fmt"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/nginx"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// New is the nginx router, as the registry would build it (this package cannot import the registry).
func New(provider string, c router.Clients, s router.Spec) (router.Router, error) {
	if provider != "nginx" {
		return nil, fmt.Errorf("the nginx driver's tests cannot build a %s router", provider)
	}
	return nginx.Driver{}.NewRouter(c, s), nil
}
