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

// deploymentTexts are the engine's string literals that may still say "Deployment": the
// Deployment-shaped view's own kind and the kind an autoscaler must scale. Every message a user
// reads names the release's kind (Release.WorkloadKind), so that a DaemonSet's error does not
// speak of a Deployment. The list only shrinks, as knownKindNames does.
var deploymentTexts = map[string][]string{
	"autoscaler/hpa.go":  {`"Deployment"`},
	"autoscaler/keda.go": {`"Deployment"`},
	"imported.go":        {`"release %s/%s owns no Deployment besides its primary, so its manifest cannot be rebuilt; import a release of target_ref, or apply the manifest first"`},
	"in_place.go":        {`"manifest: a %s is released through target_ref with kind = %q; manifest takes a Deployment only"`},
	"readiness.go":       {`"Deployment not found"`},
	"recover.go":         {`"Deployment"`},
	"workload.go":        {`"Deployment"`},
}

// TestEngineMessagesNameTheReleasesKind guards what deploymentTexts says (make lint runs it).
func TestEngineMessagesNameTheReleasesKind(t *testing.T) {
	found := map[string][]string{}
	for f, file := range engineFiles(t) {
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && strings.Contains(lit.Value, "Deployment") {
				if !slices.Contains(found[f], lit.Value) {
					found[f] = append(found[f], lit.Value)
				}
				if !slices.Contains(deploymentTexts[f], lit.Value) {
					t.Errorf("%s: %s says Deployment; name the release's kind (rel.WorkloadKind()), as every other message does", f, lit.Value)
				}
			}
			return true
		})
	}
	for f, allowed := range deploymentTexts {
		for _, text := range allowed {
			if !slices.Contains(found[f], text) {
				t.Errorf("%s no longer says %s: remove it from deploymentTexts", f, text)
			}
		}
	}
}
