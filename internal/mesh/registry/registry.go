// Package registry lists the mesh drivers and answers questions about them by mesh_provider
// name, so that the provider and the engine never name a mesh.
package registry

import (
	"fmt"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

func init() {
	// The routers' refusals name the alternatives; router cannot import this package.
	router.Offering = Offering
}

// Names lists the mesh_provider values.
func Names() []string {
	out := make([]string, 0, len(drivers))
	for _, d := range drivers {
		out = append(out, d.Describe().Name)
	}
	return out
}

// Get returns the driver of a mesh_provider.
func Get(name string) (mesh.Driver, bool) {
	for _, d := range drivers {
		if d.Describe().Name == name {
			return d, true
		}
	}
	return nil, false
}

// Capabilities are those of a mesh_provider; an unknown one has none.
func Capabilities(name string) router.Capabilities {
	if d, ok := Get(name); ok {
		return d.Describe().Capabilities
	}
	return router.Capabilities{}
}

// Offering names the mesh_provider values whose capabilities satisfy has.
func Offering(has func(router.Capabilities) bool) []string {
	var out []string
	for _, d := range drivers {
		if desc := d.Describe(); has(desc.Capabilities) {
			out = append(out, desc.Name)
		}
	}
	return out
}

// NewRouter returns the router of a mesh_provider for one release.
func NewRouter(name string, c router.Clients, s router.Spec) (router.Router, error) {
	d, ok := Get(name)
	if !ok {
		return nil, fmt.Errorf("unknown mesh_provider %q: allowed values are %v", name, Names())
	}
	return d.NewRouter(c, s), nil
}

// Builtin returns the built-in query template of a mesh_provider's metric
// ("request-success-rate" or "request-duration").
func Builtin(name, metric string) (query string, ok bool) {
	d, found := Get(name)
	if !found {
		return "", false
	}
	query, ok = d.Describe().Queries[metric]
	return query, ok
}
