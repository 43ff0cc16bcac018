package meshsim

import (
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
)

// Every mesh driver has a simulated data plane, found by the driver's name.
func TestEveryDriverHasAModel(t *testing.T) {
	have := map[Mesh]bool{}
	for _, m := range models {
		have[m.mesh] = true
	}
	for _, name := range registry.Names() {
		if !have[Mesh(name)] {
			t.Errorf("mesh driver %s has no simulator model in models.go", name)
		}
	}
}
