package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/lock"
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

// The page for runners without a terminal states the lock's timings and the story's bounds as
// the code has them, and names the attribute that carries the story.
func TestDocsRunningInCIMatchesTheCode(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("..", "..", "docs", "guides", "running-in-ci.md"))
	if err != nil {
		t.Fatalf("the page Running in CI, HCP Terraform and Atlantis: %v", err)
	}
	text := strings.Join(strings.Fields(string(body)), " ")
	for _, want := range []string{
		fmt.Sprintf("renews it every %d s", int(lock.RenewInterval.Seconds())),
		fmt.Sprintf("unrenewed for %d s", int(lock.LeaseDuration.Seconds())),
		fmt.Sprintf("at most %d lines: the first %d and the last %d", storyHeadLines+storyTailLines, storyHeadLines, storyTailLines),
		"`last_run`", "Force-cancel", "timeouts.update", "kubectl -n test annotate configmap",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("docs/guides/running-in-ci.md does not say %q", want)
		}
	}
}
