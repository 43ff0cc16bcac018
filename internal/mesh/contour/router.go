package contour

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// contourRouter writes the HTTPProxy <apex> as Flagger's contour router does: no virtualhost
// (the user's root HTTPProxy includes it), one route on prefix "/" whose services are
// <apex>-primary and <apex>-canary with their weights and Linkerd's l5d-dst-override header.
// A/B testing puts one route per analysis.match entry ahead of it, whose conditions add the
// entry's headers and query parameters, with the canary at weight 100: Contour prefers a route
// with more conditions over the same prefix, so the matching requests take it.
type contourRouter struct {
	obj router.Managed
}

func newRouter(c router.Clients, s router.Spec, can router.Capabilities) router.Router {
	primary, canary := s.Apex+"-primary", s.Apex+"-canary"
	service := func(name string, weight int) map[string]any {
		return map[string]any{
			"name": name, "port": int64(s.Port), "weight": int64(weight),
			"requestHeadersPolicy": map[string]any{"set": []any{map[string]any{
				"name": "l5d-dst-override", "value": fmt.Sprintf("%s.%s.svc.cluster.local:%d", name, s.Namespace, s.Port),
			}}},
		}
	}
	r := &contourRouter{}
	r.obj = router.Managed{
		Dynamic: c.Dynamic, Spec: s, GVR: HTTPProxyResource, Kind: "HTTPProxy",
		Name: s.Apex, Namespace: s.Namespace, Provider: "contour", Can: can, Last: &router.HeldCache{}, StampApex: true,
		Render: func(w router.Weights) map[string]any {
			var routes []any
			if w.Matched {
				for _, m := range s.Match {
					routes = append(routes, map[string]any{
						"conditions": append([]any{map[string]any{"prefix": "/"}}, conditions(m)...),
						"services":   []any{service(primary, 0), service(canary, 100)},
					})
				}
			}
			routes = append(routes, map[string]any{
				"conditions": []any{map[string]any{"prefix": "/"}},
				"services":   []any{service(primary, w.Primary), service(canary, w.Canary)},
			})
			return map[string]any{"routes": routes}
		},
		ReadWeights: func(obj *unstructured.Unstructured) (router.Weights, error) {
			routes, _, _ := unstructured.NestedSlice(obj.Object, "spec", "routes")
			w, found := router.Weights{}, false
			for _, item := range routes {
				route, _ := item.(map[string]any)
				if matches(route) {
					w.Matched = true
					continue
				}
				services, _ := route["services"].([]any)
				p, okP := router.BackendWeight(services, "name", primary)
				c, okC := router.BackendWeight(services, "name", canary)
				if !okP || !okC {
					return router.Weights{}, fmt.Errorf("the route on prefix / must hold services %s and %s with integer weights", primary, canary)
				}
				w.Primary, w.Canary, found = p, c, true
			}
			if !found {
				return router.Weights{}, fmt.Errorf("spec.routes has no route without header or query conditions for %s and %s", primary, canary)
			}
			return w, nil
		},
	}
	return r
}

// conditions are one analysis.match entry as Contour route conditions, which Contour ANDs:
// headers, then query parameters, each sorted by name. Envoy matches a header regex against
// the whole value, so a prefix or suffix becomes one (Flagger writes contains instead).
func conditions(m router.Match) []any {
	var out []any
	for _, name := range sortedKeys(m.Headers) {
		sm := m.Headers[name]
		h := map[string]any{"name": name}
		if sm.Exact != "" {
			h["exact"] = sm.Exact
		} else {
			h["regex"] = sm.Pattern(true)
		}
		out = append(out, map[string]any{"header": h})
	}
	for _, name := range sortedKeys(m.QueryParams) {
		sm := m.QueryParams[name]
		q := map[string]any{"name": name}
		switch {
		case sm.Exact != "":
			q["exact"] = sm.Exact
		case sm.Prefix != "":
			q["prefix"] = sm.Prefix
		case sm.Suffix != "":
			q["suffix"] = sm.Suffix
		default:
			q["regex"] = sm.Regex
		}
		out = append(out, map[string]any{"queryParameter": q})
	}
	return out
}

func sortedKeys(m map[string]router.StringMatch) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// matches reports a route with header or query parameter conditions: an A/B route.
func matches(route map[string]any) bool {
	conds, _ := route["conditions"].([]any)
	for _, c := range conds {
		if cm, _ := c.(map[string]any); cm["header"] != nil || cm["queryParameter"] != nil {
			return true
		}
	}
	return false
}

func (r *contourRouter) Reconcile(ctx context.Context) error { return r.obj.Reconcile(ctx) }

func (r *contourRouter) SetRoutes(ctx context.Context, w router.Weights) error {
	return r.obj.SetRoutes(ctx, w)
}

func (r *contourRouter) GetRoutes(ctx context.Context) (router.Weights, error) {
	return r.obj.GetRoutes(ctx)
}

func (r *contourRouter) Drift(ctx context.Context) ([]string, error) { return r.obj.Drift(ctx, nil) }

func (r *contourRouter) Finalize(ctx context.Context) error {
	return router.DeleteOwned(ctx, r.obj.Dynamic, r.obj.GVR, r.obj.Namespace, r.obj.Name, r.obj.Spec)
}

func (r *contourRouter) Warnings(context.Context) []string { return nil }
