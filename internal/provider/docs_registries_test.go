package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/lock"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// The pages a user reads first list what the provider does; each must name every router,
// metric backend and workload kind the registries hold, so that adding one without its docs
// fails make docs-check (which runs this test), and a page cannot call something "not yet"
// that has landed.
func TestDocsNameEveryRouterBackendAndKind(t *testing.T) {
	for _, page := range docsListingPages {
		if missing := docsMissing(page, readDocsPage(t, page), registry.Names(), targetKinds(), metricBackendNames()); len(missing) > 0 {
			t.Errorf("%s does not name %s (the registries have them; make generate renders docs/ from templates/)", page, strings.Join(missing, ", "))
		}
	}
}

// The check above fails when a registry gains a router, a workload kind or a metric backend
// that the pages do not name: each page, as committed, is checked against the registries'
// names with one more of each.
func TestDocsCheckFailsForAnUndocumentedDriver(t *testing.T) {
	routers := append(registry.Names(), "newrouter")
	kinds := append(targetKinds(), "NewKind")
	backends := append(metricBackendNames(), "newbackend")
	for _, page := range docsListingPages {
		missing := docsMissing(page, readDocsPage(t, page), routers, kinds, backends)
		want := []string{"router `newrouter`", "workload kind NewKind", "metric backend `newbackend`"}
		switch page {
		case "docs/index.md":
			want = []string{"metric backend `newbackend`"}
		case "docs/resources/release.md":
			want = want[:2]
		}
		if strings.Join(missing, ", ") != strings.Join(want, ", ") {
			t.Errorf("%s: the check finds %q missing, want %q", page, missing, want)
		}
	}
}

// docsListingPages are the pages that list the routers, metric backends and workload kinds.
var docsListingPages = []string{"README.md", "docs/guides/migrating-from-flagger.md", "docs/resources/release.md", "docs/index.md"}

func readDocsPage(t *testing.T, page string) string {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("..", "..", page))
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// docsMissing are the routers, workload kinds and metric backends that a page should name and
// does not.
func docsMissing(page, text string, routers, kinds, backends []string) []string {
	var missing []string
	if page != "docs/index.md" { // the provider page documents backends, not routers
		for _, name := range routers {
			if !strings.Contains(text, "`"+name+"`") {
				missing = append(missing, "router `"+name+"`")
			}
		}
		for _, kind := range kinds {
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(kind) + `s?\b`).MatchString(text) {
				missing = append(missing, "workload kind "+kind)
			}
		}
	}
	if page != "docs/resources/release.md" { // the resource page names templates, not backends
		for _, name := range backends {
			if !strings.Contains(text, "`"+name+"`") && !strings.Contains(text, "."+name+"`") {
				missing = append(missing, "metric backend `"+name+"`")
			}
		}
	}
	return missing
}

// The page for runners without a terminal states the lock's timings and the story's bounds as
// the code has them, names the attribute that carries the story, and watches and steers a run
// by the names the code gives the state ConfigMap, its labels, the controls and the Lease.
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
		// what to watch and steer by: the state ConfigMap, its labels and the controls
		"cm " + rollout.StateConfigMapName("podinfo"), "annotate configmap " + rollout.StateConfigMapName("podinfo"),
		"-l " + router.LabelManagedBy + "=" + router.ManagedByValue,
		"-L " + strings.Join([]string{rollout.LabelPhase, rollout.LabelWeight, rollout.LabelLastCheck}, ","),
		controls.Pause + "=true", controls.Pause + "-", controls.Abort + "=true", controls.PromoteNow + "=true",
		controls.ApprovalKey(rollout.HookConfirmPromotion) + "=approved",
		// the lock, and where the dashboard's series come from
		"get lease podinfo-canary-release-lock", "`pushgateway`",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("docs/guides/running-in-ci.md does not say %q", want)
		}
	}
}
