package router

import (
	"fmt"
	"slices"
	"strings"
)

// Taking over a hand-written route (Managed.TakeOver). Flagger overwrites the routing object
// named after the apex whoever wrote it. Here the overwrite happens only where it keeps every
// request answered as before: once the primary has Ready pods (the initialisation reconciles
// the route then), in one update, and only when the release's route serves everything the
// hand-written one serves (its hosts, its gateways) and sends nothing elsewhere than the apex
// or its -primary and -canary Services did.

// Backends lists the Service names a takeover may find a route sending to: the apex and its
// two sides.
func (s Spec) Backends() []string { return []string{s.Apex, s.Apex + "-primary", s.Apex + "-canary"} }

// ServiceName reduces a host naming a Service of namespace ns (short, <name>.<ns>,
// <name>.<ns>.svc or the cluster FQDN) to its name; other hosts come back unchanged.
func ServiceName(host, ns string) string {
	for _, suffix := range []string{"." + ns + ".svc.cluster.local", "." + ns + ".svc", "." + ns} {
		if name, ok := strings.CutSuffix(host, suffix); ok && name != "" && !strings.Contains(name, ".") {
			return name
		}
	}
	return host
}

// Missing lists the entries of have that want lacks, as keyed by key.
func Missing(have, want []any, key func(any) string) []string {
	keys := make([]string, 0, len(want))
	for _, w := range want {
		keys = append(keys, key(w))
	}
	var out []string
	for _, h := range have {
		if k := key(h); !slices.Contains(keys, k) && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// Foreign lists the names that are not among allowed.
func Foreign(names, allowed []string) []string {
	var out []string
	for _, n := range names {
		if !slices.Contains(allowed, n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// TakeOverProblems joins what a takeover would drop, for Managed.TakeOver; nil when nothing.
func TakeOverProblems(problems map[string][]string, order ...string) error {
	var parts []string
	for _, what := range order {
		if list := problems[what]; len(list) > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", what, strings.Join(list, ", ")))
		}
	}
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("would no longer serve what it serves now: %s", strings.Join(parts, "; "))
}
