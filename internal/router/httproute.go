package router

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// HTTPRouteResource is the Gateway API HTTPRoute, written by the gatewayapi and linkerd routers.
var HTTPRouteResource = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}

// Gateway API defaults of a parentRef (those of the HTTPRoute CRD).
const (
	GatewayGroup = "gateway.networking.k8s.io"
	GatewayKind  = "Gateway"
)

// ParentRef is one HTTPRoute parentRef. Group and Kind are always written, even at their
// defaults, so that the object the API server holds equals the one rendered and Drift stays
// quiet whether or not the CRD defaults them.
type ParentRef struct {
	Group, Kind, Name string
	Namespace         string // empty: the route's namespace
	SectionName       string // empty: every listener
	Port              int32  // 0: unset
}

func (p ParentRef) object() map[string]any {
	out := map[string]any{"group": p.Group, "kind": p.Kind, "name": p.Name}
	if p.Namespace != "" {
		out["namespace"] = p.Namespace
	}
	if p.SectionName != "" {
		out["sectionName"] = p.SectionName
	}
	if p.Port != 0 {
		out["port"] = int64(p.Port)
	}
	return out
}

// httpRouteRouter writes one HTTPRoute <apex> whose single rule splits every request between
// the -primary and -canary Services. The gatewayapi and linkerd routers differ only in the
// parentRefs (a Gateway, or the apex Service itself: GAMMA) and in their plan-time hints.
//
// The rule carries Gateway API's default match (PathPrefix /) explicitly, for the same reason
// as ParentRef. A/B matches, mirroring and session affinity would add rules or filters here;
// they are not offered yet.
type httpRouteRouter struct {
	obj  managed
	warn func(context.Context) []string
}

// newHTTPRouteRouter builds the router of provider; hostnames may be empty.
func newHTTPRouteRouter(c Clients, s Spec, provider string, parents []ParentRef, hostnames []string) *httpRouteRouter {
	primary, canary := s.Apex+"-primary", s.Apex+"-canary"
	backend := func(name string, weight int) any {
		return map[string]any{"group": "", "kind": "Service", "name": name, "port": int64(s.Port), "weight": int64(weight)}
	}
	parentList := make([]any, 0, len(parents))
	for _, p := range parents {
		parentList = append(parentList, p.object())
	}
	r := &httpRouteRouter{}
	r.obj = managed{
		c: c.Dynamic, s: s, gvr: HTTPRouteResource, kind: "HTTPRoute",
		name: s.Apex, namespace: s.Namespace, provider: provider,
		spec: func(w Weights) map[string]any {
			spec := map[string]any{
				"parentRefs": deepCopy(parentList),
				"rules": []any{map[string]any{
					"matches":     []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/"}}},
					"backendRefs": []any{backend(primary, w.Primary), backend(canary, w.Canary)},
				}},
			}
			if len(hostnames) > 0 {
				hosts := make([]any, len(hostnames))
				for i, h := range hostnames {
					hosts[i] = h
				}
				spec["hostnames"] = hosts
			}
			return spec
		},
		weights: func(obj *unstructured.Unstructured) (Weights, error) {
			return httpRouteWeights(obj, primary, canary)
		},
	}
	return r
}

// httpRouteWeights reads the weights of the first rule that has both backends. A backendRef
// without weight would weigh 1 in Gateway API, which no split of ours writes: it is unreadable.
func httpRouteWeights(obj *unstructured.Unstructured, primary, canary string) (Weights, error) {
	rules, _, _ := unstructured.NestedSlice(obj.Object, "spec", "rules")
	for _, item := range rules {
		rule, _ := item.(map[string]any)
		refs, _ := rule["backendRefs"].([]any)
		p, okP := backendWeight(refs, "name", primary)
		c, okC := backendWeight(refs, "name", canary)
		if okP && okC {
			return Weights{Primary: p, Canary: c}, nil
		}
	}
	return Weights{}, fmt.Errorf("no rule has backendRefs %s and %s with integer weights", primary, canary)
}

func (r *httpRouteRouter) Reconcile(ctx context.Context) error { return r.obj.reconcile(ctx) }

func (r *httpRouteRouter) SetRoutes(ctx context.Context, w Weights) error {
	return r.obj.setRoutes(ctx, w)
}

func (r *httpRouteRouter) GetRoutes(ctx context.Context) (Weights, error) {
	return r.obj.getRoutes(ctx)
}

func (r *httpRouteRouter) Drift(ctx context.Context) ([]string, error) { return r.obj.drift(ctx, nil) }

func (r *httpRouteRouter) Finalize(ctx context.Context) error {
	return deleteOwned(ctx, r.obj.c, r.obj.gvr, r.obj.namespace, r.obj.name, r.obj.s)
}

func (r *httpRouteRouter) Warnings(ctx context.Context) []string {
	if r.warn == nil {
		return nil
	}
	return r.warn(ctx)
}

// configuredRouter checks the configuration first: an error that would make the route
// useless is returned by Reconcile instead of writing, and reported by Drift.
type configuredRouter struct {
	*httpRouteRouter
	check func() error
}

func (r configuredRouter) Reconcile(ctx context.Context) error {
	if err := r.check(); err != nil {
		return err
	}
	return r.httpRouteRouter.Reconcile(ctx)
}

func (r configuredRouter) Drift(ctx context.Context) ([]string, error) {
	if err := r.check(); err != nil {
		// A configuration problem is drift to report, not a failure to read the cluster.
		return []string{err.Error()}, nil //nolint:nilerr // see above
	}
	return r.httpRouteRouter.Drift(ctx)
}
