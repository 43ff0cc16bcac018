package rollout

import (
	"go/ast"
	"go/token"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"
)

// knownKindNames are the places where the engine still names a workload kind, as file and
// identifier or string ("*": the whole file). None is left (issue 32): every kind is a driver.
// The list only shrinks: a name that is gone fails the test until it is removed here, and any
// other name of a kind or a mesh fails it at once.
var knownKindNames = map[string][]string{}

// engineNames are the kind and mesh names the engine's code must not hold: every kind
// besides the Deployment shape, every kind released in place, and every mesh driver's name.
func engineNames() []string {
	names := append(kinds.InPlaceKinds(), kinds.Others()...)
	for _, m := range registry.Names() {
		if m != "kubernetes" { // also the name of the API the engine talks to
			names = append(names, m)
		}
	}
	return names
}

// TestEngineNamesNoKindOrMesh guards the engine's independence of kinds and meshes (make lint
// runs it): its code (comments aside) names no workload kind but the Deployment it is shaped
// like, and no mesh. A kind is a driver under internal/workload, a mesh one under internal/mesh.
func TestEngineNamesNoKindOrMesh(t *testing.T) {
	names := engineNames()
	found := map[string][]string{}
	for f, file := range engineFiles(t) {
		ast.Inspect(file, func(n ast.Node) bool {
			var text string
			switch n := n.(type) {
			case *ast.Ident:
				text = n.Name
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					text = n.Value
				}
			}
			for _, name := range names {
				if text != "" && strings.Contains(strings.ToLower(text), strings.ToLower(name)) {
					if !slices.Contains(found[f], text) {
						found[f] = append(found[f], text)
					}
				}
			}
			return true
		})
	}
	for f, texts := range found {
		allowed := knownKindNames[f]
		if slices.Contains(allowed, "*") {
			continue
		}
		for _, text := range texts {
			if !slices.Contains(allowed, text) {
				t.Errorf("%s names a workload kind or a mesh: %s; put what is the kind's or the mesh's in its driver (internal/workload, internal/mesh)", f, text)
			}
		}
	}
	for f, allowed := range knownKindNames {
		if slices.Contains(allowed, "*") {
			continue
		}
		for _, text := range allowed {
			if !slices.Contains(found[f], text) {
				t.Errorf("%s no longer names %s: remove it from knownKindNames", f, text)
			}
		}
	}
	var debt []string
	for f := range found {
		debt = append(debt, f)
	}
	sort.Strings(debt)
	t.Logf("engine files that still name a workload kind: %d (%s)", len(debt), strings.Join(debt, ", "))
}
