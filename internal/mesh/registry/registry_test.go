package registry

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

func TestNewRouterUnknownProvider(t *testing.T) {
	_, err := NewRouter("kuma", router.Clients{}, router.Spec{})
	if err == nil || !strings.Contains(err.Error(), `unknown mesh_provider "kuma"`) {
		t.Fatalf("error %v", err)
	}
}

// Every driver is described completely, once: a name of its own, a split it can do, both
// built-in metrics (alb none), an RBAC example and a guide.
func TestDriversDescribeThemselves(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range drivers {
		desc := d.Describe()
		if desc.Name == "" || seen[desc.Name] {
			t.Errorf("driver name %q empty or repeated", desc.Name)
		}
		seen[desc.Name] = true
		if desc.Summary == "" {
			t.Errorf("%s: no Summary: the mesh_provider description would show it as \"%s ()\"", desc.Name, desc.Name)
		}
		if desc.Capabilities.Weighted == desc.Capabilities.SelectorOnly {
			t.Errorf("%s: a router splits by weight or by selector, exactly one of them", desc.Name)
		}
		// Both built-in metrics, or none for a data plane that reports where no metric
		// provider reads yet (alb: CloudWatch).
		if len(desc.Queries) > 0 {
			for _, m := range []string{"request-success-rate", "request-duration"} {
				if _, ok := Builtin(desc.Name, m); !ok {
					t.Errorf("%s: no built-in %s", desc.Name, m)
				}
			}
		} else if desc.Name != "alb" {
			t.Errorf("%s: no built-in metrics; only alb may have none", desc.Name)
		}
		if !strings.HasPrefix(desc.RBACExample, "role-") || desc.Guide == "" {
			t.Errorf("%s: RBAC example %q, guide %q", desc.Name, desc.RBACExample, desc.Guide)
		}
	}
}

// The routers' refusals name the drivers that can do what was asked.
func TestRouterRefusalsNameTheAlternatives(t *testing.T) {
	got := strings.Join(router.Offering(func(c router.Capabilities) bool { return c.Mirror }), " and ")
	if got != "istio and gatewayapi and traefik" {
		t.Errorf("mirror offered by %q", got)
	}
}

// The RBAC example and guide a driver names exist, with the guide's template beside it.
func TestDriversPointAtTheirDocs(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	for _, d := range drivers {
		desc := d.Describe()
		for _, f := range []string{
			filepath.Join(root, "examples", "rbac", desc.RBACExample),
			filepath.Join(root, "docs", "guides", desc.Guide+".md"),
			filepath.Join(root, "templates", "guides", desc.Guide+".md.tmpl"),
		} {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("%s: %v", desc.Name, err)
			}
		}
	}
}
