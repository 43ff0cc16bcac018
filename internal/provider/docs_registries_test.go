package provider

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
)

// The pages a user reads first list what the provider does; each must name every router,
// metric backend and workload kind the registries hold, so that adding one without its docs
// fails make docs-check (which runs this test), and a page cannot call something "not yet"
// that has landed.
func TestDocsNameEveryRouterBackendAndKind(t *testing.T) {
	for _, page := range []string{"README.md", "docs/guides/migrating-from-flagger.md", "docs/resources/release.md", "docs/index.md"} {
		body, err := os.ReadFile(filepath.Join("..", "..", page))
		if err != nil {
			t.Fatal(err)
		}
		text := string(body)
		var missing []string
		if page != "docs/index.md" { // the provider page documents backends, not routers
			for _, name := range registry.Names() {
				if !strings.Contains(text, "`"+name+"`") {
					missing = append(missing, "router `"+name+"`")
				}
			}
			for _, kind := range targetKinds() {
				if !strings.Contains(text, kind) {
					missing = append(missing, "workload kind "+kind)
				}
			}
		}
		if page != "docs/resources/release.md" { // the resource page names templates, not backends
			for _, name := range metricBackendNames() {
				if !strings.Contains(text, "`"+name+"`") && !strings.Contains(text, "."+name+"`") {
					missing = append(missing, "metric backend `"+name+"`")
				}
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s does not name %s (the registries have them; make generate renders docs/ from templates/)", page, strings.Join(missing, ", "))
		}
	}
}
