// Package kubernetes is the driver of plain Kubernetes Services: no mesh, blue/green by the
// apex Service's selector.
package kubernetes

import (
	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Driver is the kubernetes mesh_provider.
type Driver struct{}

func (Driver) Describe() mesh.Description {
	return mesh.Description{
		Name:         "kubernetes",
		Capabilities: router.Capabilities{SelectorOnly: true},
		// No mesh: the pods' own metrics are all there is.
		Queries:     mesh.AppQueries,
		RBACExample: "role-kubernetes.yaml",
		Guide:       "kubernetes",
		Summary:     "no mesh: blue/green by switching the apex Service's selector, or a weighted canary by replica ratio behind it",
	}
}

func (d Driver) NewRouter(c router.Clients, s router.Spec) router.Router {
	return newRouter(c, s, d.Describe().Capabilities)
}
