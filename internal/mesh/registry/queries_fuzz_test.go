package registry

import (
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/gatewayapi"
	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// FuzzRenderBuiltins renders every built-in query with arbitrary variable values. Rendering
// must never fail, and the result must be exactly the query rendered with plain placeholders,
// each placeholder replaced by its value: every action is rendered, and values go in verbatim
// (a value that itself looks like a template is data, never re-parsed).
func FuzzRenderBuiltins(f *testing.F) {
	f.Add("podinfo", "test", "podinfo", "1m")
	f.Add("a-b", "ns-1", "web", "1m30s")
	f.Add("{{ name }}", "}}{{", "x\"y", "")
	f.Add("}{", "ns", "{_}-0", "") // values that join into "{{" next to each other
	f.Fuzz(func(t *testing.T, name, namespace, target, interval string) {
		if strings.Contains(name+namespace+target+interval, "\x00") {
			t.Skip("NUL marks the placeholders")
		}
		actual := metrics.Vars{Name: name, Namespace: namespace, Target: target, Service: target, Ingress: target, Route: name, Interval: interval}
		// Placeholders hold no braces, so any "{{" left beside them is an unrendered action.
		placeholders := metrics.Vars{Name: "\x00N\x00", Namespace: "\x00S\x00", Target: "\x00T\x00", Service: "\x00T\x00", Ingress: "\x00T\x00", Route: "\x00N\x00", Interval: "\x00I\x00"}
		for provider, queries := range allQueries() {
			// Skipper's route ids, and so its queries, hold names with "-" and "." as "_".
			enc := func(s string) string { return s }
			if provider == "skipper" {
				enc = strings.NewReplacer("-", "_", ".", "_").Replace
			}
			fill := strings.NewReplacer("\x00N\x00", name, "\x00S\x00", enc(namespace), "\x00T\x00", enc(target), "\x00I\x00", interval)
			for metric, q := range queries {
				out, err := metrics.Render(q, actual)
				if err != nil {
					t.Fatalf("%s %s: %v", provider, metric, err)
				}
				shape, err := metrics.Render(q, placeholders)
				if err != nil {
					t.Fatalf("%s %s with placeholders: %v", provider, metric, err)
				}
				if strings.Contains(shape, "{{") {
					t.Fatalf("%s %s left a template action: %s", provider, metric, shape)
				}
				if !strings.Contains(shape, placeholders.Namespace) {
					t.Fatalf("%s %s does not filter on the namespace: %s", provider, metric, shape)
				}
				if want := fill.Replace(shape); out != want {
					t.Fatalf("%s %s rendered %q, want the values verbatim: %q", provider, metric, out, want)
				}
			}
		}
	})
}

// allQueries are every driver's built-in queries and the Gateway API's other sources.
func allQueries() map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, d := range drivers {
		out[d.Describe().Name] = d.Describe().Queries
	}
	for _, source := range gatewayapi.MetricsSources {
		out["gatewayapi:"+source] = gatewayapi.QueriesFrom(source)
	}
	return out
}
