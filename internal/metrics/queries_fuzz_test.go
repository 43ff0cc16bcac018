package metrics

import (
	"strings"
	"testing"
)

// FuzzRenderBuiltins renders every built-in query with arbitrary variable values: it must
// never fail, leave one of its own template actions behind, or drop the namespace it filters on.
func FuzzRenderBuiltins(f *testing.F) {
	f.Add("podinfo", "test", "podinfo", "1m")
	f.Add("a-b", "ns-1", "web", "1m30s")
	f.Add("{{ name }}", "}}{{", "x\"y", "")
	f.Fuzz(func(t *testing.T, name, namespace, target, interval string) {
		vars := Vars{Name: name, Namespace: namespace, Target: target, Service: target, Ingress: target, Route: name, Interval: interval}
		for provider, queries := range builtins {
			for metric, q := range queries {
				out, err := Render(q, vars)
				if err != nil {
					t.Fatalf("%s %s: %v", provider, metric, err)
				}
				rest := out
				for _, v := range []string{name, namespace, target, interval} {
					if v != "" {
						rest = strings.ReplaceAll(rest, v, "")
					}
				}
				// What is left besides the values themselves must be fully rendered.
				if strings.Contains(rest, "{{") {
					t.Fatalf("%s %s left a template action: %s", provider, metric, out)
				}
				if !strings.Contains(out, namespace) {
					t.Fatalf("%s %s lost the namespace %q: %s", provider, metric, namespace, out)
				}
			}
		}
	})
}
