package osm

import (
	"fmt"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// New is the osm router, as the registry would build it (this package cannot import the registry).
func New(provider string, c router.Clients, s router.Spec) (router.Router, error) {
	if provider != "osm" {
		return nil, fmt.Errorf("the osm driver's tests cannot build a %s router", provider)
	}
	return Driver{}.NewRouter(c, s), nil
}
