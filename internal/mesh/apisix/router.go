package apisix

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// canaryRoutePriority makes the generated route win over the user's route for the same match;
// abRulePriority makes an A/B rule win over the weighted rule beside it.
const (
	canaryRoutePriority = 10000
	abRulePriority      = canaryRoutePriority + 1
)

// annotations not copied from the user's route: they describe that object, not ours.
var skipAnnotations = map[string]bool{"kubectl.kubernetes.io/last-applied-configuration": true}

// apisixRouter leaves the user's ApisixRoute (route_ref) untouched and writes a second
// ApisixRoute, <route>-<apex>-canary, holding a copy of the rule that points at the apex
// Service, split between <apex>-primary and <apex>-canary at a higher priority.
type apisixRouter struct {
	c                router.Clients
	s                router.Spec
	primary, canary  string
	routeNS, routeNm string
	can              router.Capabilities
	// last is the generated route as the API server last returned it (see router.HeldCache).
	last *router.HeldCache
}

func newRouter(c router.Clients, s router.Spec, can router.Capabilities) router.Router {
	r := &apisixRouter{c: c, s: s, can: can, primary: s.Apex + "-primary", canary: s.Apex + "-canary", routeNS: s.Namespace, last: &router.HeldCache{}}
	if o, ok := s.Options.(Options); ok && o.RouteRef != nil {
		r.routeNm = o.RouteRef.Name
		if o.RouteRef.Namespace != "" {
			r.routeNS = o.RouteRef.Namespace
		}
	}
	return r
}

func (r *apisixRouter) userRef() string {
	return "route_ref: ApisixRoute " + r.routeNS + "/" + r.routeNm
}

// canaryRouteName is the generated ApisixRoute's name.
func (r *apisixRouter) canaryRouteName() string { return r.routeNm + "-" + r.s.Apex + "-canary" }

// userRule reads the user's route and returns it with the rule that routes to the apex.
func (r *apisixRouter) userRule(ctx context.Context) (*unstructured.Unstructured, map[string]any, error) {
	if r.routeNm == "" {
		return nil, nil, router.ConfigErrorf("route_ref is required for mesh_provider apisix: it names the ApisixRoute whose rule sends traffic to Service %s", r.s.Apex)
	}
	if r.routeNS != r.s.Namespace {
		return nil, nil, router.ConfigErrorf("%s: the ApisixRoute must be in the release namespace %s, where its backends resolve", r.userRef(), r.s.Namespace)
	}
	route, err := router.Fetch(ctx, r.c.Dynamic, router.ApisixRouteResource, r.routeNS, r.routeNm)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", r.userRef(), err)
	}
	if route == nil {
		return nil, nil, router.ConfigErrorf("%s not found", r.userRef())
	}
	rules, _, _ := unstructured.NestedSlice(route.Object, "spec", "http")
	for _, item := range rules {
		rule, _ := item.(map[string]any)
		backends, _ := rule["backends"].([]any)
		for _, b := range backends {
			if bm, _ := b.(map[string]any); bm != nil && bm["serviceName"] == r.s.Apex {
				if len(backends) > 1 {
					return nil, nil, router.ConfigErrorf("%s: http rule %q has %d backends; only one http backend is supported (serviceName %s)",
						r.userRef(), rule["name"], len(backends), r.s.Apex)
				}
				return route, rule, nil
			}
		}
	}
	return nil, nil, router.ConfigErrorf("%s has no http rule with a backend serviceName %s (the apex Service)", r.userRef(), r.s.Apex)
}

// canaryRoute describes the generated route for the user's route and matched rule.
func (r *apisixRouter) canaryRoute(route *unstructured.Unstructured, rule map[string]any) router.Managed {
	annotations := map[string]string{}
	for k, v := range route.GetAnnotations() {
		if !skipAnnotations[k] {
			annotations[k] = v
		}
	}
	userSpec, _ := route.Object["spec"].(map[string]any)
	// The rule was found by its backend (userRule), so it has one.
	backends, _ := rule["backends"].([]any)
	origBackend := map[string]any{}
	if len(backends) > 0 {
		if b, ok := backends[0].(map[string]any); ok {
			origBackend = b
		}
	}
	return router.Managed{
		Dynamic: r.c.Dynamic, Spec: r.s, GVR: router.ApisixRouteResource, Kind: "ApisixRoute",
		Name: r.canaryRouteName(), Namespace: r.s.Namespace,
		Labels: route.GetLabels(), Annotations: annotations, Provider: "apisix", Can: r.can, Last: r.last,
		Render: func(w router.Weights) map[string]any {
			canaryRule := router.DeepCopyMap(rule)
			canaryRule["priority"] = int64(canaryRoutePriority)
			primary := router.DeepCopyMap(origBackend)
			primary["serviceName"] = r.primary
			primary["weight"] = int64(w.Primary)
			canary := map[string]any{"serviceName": r.canary, "weight": int64(w.Canary)}
			for _, k := range []string{"servicePort", "resolveGranularity", "subset"} {
				if v, ok := origBackend[k]; ok {
					canary[k] = router.DeepCopy(v)
				}
			}
			canaryRule["backends"] = []any{primary, canary}
			spec := map[string]any{"http": append([]any{canaryRule}, r.abRules(canaryRule, w)...)}
			// stream rules are carried over as Flagger does; the ingress class keeps the
			// canary route with the controller that serves the user's route.
			for _, k := range []string{"stream", "ingressClassName"} {
				if v, ok := userSpec[k]; ok {
					spec[k] = router.DeepCopy(v)
				}
			}
			return spec
		},
		ReadWeights: r.weights,
	}
}

func (r *apisixRouter) object(ctx context.Context) (router.Managed, error) {
	route, rule, err := r.userRule(ctx)
	if err != nil {
		return router.Managed{}, err
	}
	return r.canaryRoute(route, rule), nil
}

func (r *apisixRouter) Reconcile(ctx context.Context) error {
	m, err := r.object(ctx)
	if err != nil {
		return err
	}
	return m.Reconcile(ctx)
}

// SetRoutes rewrites the two backend weights of the generated route in place, without
// reading the user's route, so that a rollback still works if that route changed or went away.
func (r *apisixRouter) SetRoutes(ctx context.Context, w router.Weights) error {
	return r.generated().SetRoutes(ctx, w)
}

// setBackendWeights puts w onto the backends of every rule of the generated route that has
// the primary backend, and replaces the A/B rules with those w.Matched asks for, derived from
// the first such rule.
func (r *apisixRouter) setBackendWeights(live *unstructured.Unstructured, w router.Weights) (bool, error) {
	all, _, _ := unstructured.NestedSlice(live.Object, "spec", "http")
	var rules, ab []any
	for _, item := range all {
		if rule, _ := item.(map[string]any); !r.isABRule(rule) {
			rules = append(rules, item)
		}
	}
	found := false
	for _, item := range rules {
		rule, _ := item.(map[string]any)
		backends, _ := rule["backends"].([]any)
		if _, ok := router.BackendWeight(backends, "serviceName", r.primary); !ok {
			continue
		}
		if !found {
			ab = r.abRules(rule, w)
		}
		found = true
		for _, b := range backends {
			bm, _ := b.(map[string]any)
			switch bm["serviceName"] {
			case r.primary:
				bm["weight"] = int64(w.Primary)
			case r.canary:
				bm["weight"] = int64(w.Canary)
			}
		}
	}
	if !found {
		return false, fmt.Errorf("%s: no http backend %s with an integer weight; apply again to regenerate it", r.generated().Ref(), r.primary)
	}
	return true, unstructured.SetNestedSlice(live.Object, append(rules, ab...), "spec", "http")
}

// abRules are the rules that send the requests matching Spec.Match to the canary (A/B
// testing), one per condition since APISIX ANDs the exprs of a rule: copies of the weighted
// rule, whose own match (hosts, paths, exprs) they narrow, at a higher priority and with the
// canary backend alone. Nil unless w.Matched.
func (r *apisixRouter) abRules(weighted map[string]any, w router.Weights) []any {
	if !w.Matched {
		return nil
	}
	var canary map[string]any
	backends, _ := weighted["backends"].([]any)
	for _, b := range backends {
		if bm, _ := b.(map[string]any); bm != nil && bm["serviceName"] == r.canary {
			canary = router.DeepCopyMap(bm)
		}
	}
	if canary == nil {
		return nil
	}
	canary["weight"] = int64(100)
	out := make([]any, 0, len(r.s.Match))
	for i, m := range r.s.Match {
		rule := router.DeepCopyMap(weighted)
		rule["name"] = fmt.Sprintf("%v-ab-%d", weighted["name"], i)
		rule["priority"] = int64(abRulePriority)
		rule["backends"] = []any{router.DeepCopyMap(canary)}
		match, _ := rule["match"].(map[string]any)
		if match == nil {
			// The CRD requires paths in a match; "/*" is what no match at all means.
			match = map[string]any{"paths": []any{"/*"}}
		}
		exprs, _ := match["exprs"].([]any)
		match["exprs"] = append(exprs, router.APISIXExprs(m)...)
		rule["match"] = match
		out = append(out, rule)
	}
	return out
}

// isABRule recognises a rule abRules writes: match.exprs and the canary backend alone.
func (r *apisixRouter) isABRule(rule map[string]any) bool {
	exprs, _, _ := unstructured.NestedSlice(rule, "match", "exprs")
	backends, _ := rule["backends"].([]any)
	if len(exprs) == 0 || len(backends) != 1 {
		return false
	}
	b, _ := backends[0].(map[string]any)
	return b != nil && b["serviceName"] == r.canary
}

func (r *apisixRouter) GetRoutes(ctx context.Context) (router.Weights, error) {
	return r.generated().GetRoutes(ctx)
}

// generated addresses the generated route for reading and writing weights only.
func (r *apisixRouter) generated() router.Managed {
	return router.Managed{
		Dynamic: r.c.Dynamic, Spec: r.s, GVR: router.ApisixRouteResource, Kind: "ApisixRoute",
		Name: r.canaryRouteName(), Namespace: r.s.Namespace, ReadWeights: r.weights, SetWeights: r.setBackendWeights,
		Provider: "apisix", Can: r.can, Last: r.last,
	}
}

// weights reads the primary backend's weight; like Flagger, canary is the rest. Matched is
// the presence of an A/B rule.
func (r *apisixRouter) weights(obj *unstructured.Unstructured) (router.Weights, error) {
	rules, _, _ := unstructured.NestedSlice(obj.Object, "spec", "http")
	matched := false
	for _, item := range rules {
		if rule, _ := item.(map[string]any); r.isABRule(rule) {
			matched = true
		}
	}
	for _, item := range rules {
		rule, _ := item.(map[string]any)
		backends, _ := rule["backends"].([]any)
		if p, ok := router.BackendWeight(backends, "serviceName", r.primary); ok {
			if p < 0 || p > 100 {
				return router.Weights{}, fmt.Errorf("backend %s has weight %d", r.primary, p)
			}
			return router.Weights{Primary: p, Canary: 100 - p, Matched: matched}, nil
		}
	}
	return router.Weights{}, fmt.Errorf("no http backend %s with an integer weight", r.primary)
}

func (r *apisixRouter) Drift(ctx context.Context) ([]string, error) {
	m, err := r.object(ctx)
	var cfg *router.ConfigError
	if errors.As(err, &cfg) {
		return []string{cfg.Error()}, nil
	}
	if err != nil {
		return nil, err
	}
	source := r.routeNS + "/" + r.routeNm
	return m.Drift(ctx, func(want, live map[string]any) []string {
		var out []string
		wantRule, liveRule := firstRule(want), firstRule(live)
		for _, key := range router.DifferingKeys(wantRule, liveRule) {
			out = append(out, fmt.Sprintf("%s %s from route_ref %s", key, verb(key), source))
		}
		for _, key := range router.DifferingKeys(router.Without(want, "http"), router.Without(live, "http")) {
			out = append(out, fmt.Sprintf("spec.%s %s from route_ref %s", key, verb(key), source))
		}
		wantAB, liveAB := rulesOf(want)[1:], rulesOf(live)
		if len(liveAB) > 0 {
			liveAB = liveAB[1:]
		}
		switch {
		case len(liveAB) > len(wantAB):
			out = append(out, "it holds more http rules than the generated ones")
		case !router.JSONEqual(wantAB, liveAB):
			out = append(out, "its A/B testing rules differ from analysis.match")
		}
		return out
	})
}

func firstRule(spec map[string]any) map[string]any {
	rules := rulesOf(spec)
	if len(rules) == 0 {
		return map[string]any{}
	}
	rule, _ := rules[0].(map[string]any)
	return rule
}

func rulesOf(spec map[string]any) []any {
	rules, _ := spec["http"].([]any)
	return rules
}

func verb(key string) string {
	if strings.HasSuffix(key, "s") {
		return "differ"
	}
	return "differs"
}

func (r *apisixRouter) Finalize(ctx context.Context) error {
	if r.routeNm == "" {
		return nil
	}
	return router.DeleteOwned(ctx, r.c.Dynamic, router.ApisixRouteResource, r.s.Namespace, r.canaryRouteName(), r.s)
}

// Warnings points out a user rule without the prometheus plugin in prefer_name mode: APISIX
// then labels metrics with route ids, so the built-in queries find nothing.
func (r *apisixRouter) Warnings(ctx context.Context) []string {
	_, rule, err := r.userRule(ctx)
	if err != nil {
		return nil
	}
	plugins, _ := rule["plugins"].([]any)
	for _, p := range plugins {
		pm, _ := p.(map[string]any)
		if pm == nil || pm["name"] != "prometheus" || pm["enable"] == false {
			continue
		}
		if preferName, _, _ := unstructured.NestedBool(pm, "config", "prefer_name"); preferName {
			return nil
		}
	}
	return []string{fmt.Sprintf("%s: http rule %q has no enabled prometheus plugin with config.prefer_name: true; "+
		"the built-in request-success-rate and request-duration metrics will find no data", r.userRef(), rule["name"])}
}
