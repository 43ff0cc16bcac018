package registry

import (
	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// The target kinds besides a Deployment, each owned by a driver (mesh.TargetOwner).

// TargetKind is the kind of target a mesh_provider releases; ok is false for a Deployment.
func TargetKind(name string) (kind mesh.TargetKind, ok bool) {
	d, found := Get(name)
	if !found {
		return mesh.TargetKind{}, false
	}
	owner, ok := d.(mesh.TargetOwner)
	if !ok {
		return mesh.TargetKind{}, false
	}
	return owner.TargetKind(), true
}

// TargetKinds are the driver-owned target kinds, with the mesh_provider owning each.
func TargetKinds() map[string]mesh.TargetKind {
	out := map[string]mesh.TargetKind{}
	for _, name := range Names() {
		if k, ok := TargetKind(name); ok {
			out[name] = k
		}
	}
	return out
}

// NewTarget is the release's driver-owned target, nil when the mesh_provider releases a
// Deployment.
func NewTarget(name string, c router.Clients, s router.Spec) mesh.Target {
	d, _ := Get(name)
	if owner, ok := d.(mesh.TargetOwner); ok {
		return owner.NewTarget(c, s)
	}
	return nil
}
