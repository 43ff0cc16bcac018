package router

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

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

// Object is the parentRef as the HTTPRoute holds it.
func (p ParentRef) Object() map[string]any {
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

// HTTPRouteRouter writes one HTTPRoute <apex>. Its last rule splits every request between the
// -primary and -canary Services; rules before it take the requests that analysis.match
// (w.Matched) or a session-affinity cookie (w.Session) send to one side, or, once a release
// ended, those carrying its cookies, which the primary answers with expiring ones (w.Expired). The gatewayapi and
// linkerd routers differ in the parentRefs (a Gateway, or the apex Service itself: GAMMA), in
// their plan-time hints and in whether they mirror.
//
// Every rule carries Gateway API's default match (PathPrefix /) explicitly, for the same reason
// as ParentRef.
type HTTPRouteRouter struct {
	obj  Managed
	Warn func(context.Context) []string
	// leftBehind, when a Gateway serves the route, is what Finalize hands it over as.
	leftBehind *Handover
}

// pathPrefixAll is the match Gateway API defaults a rule to.
func pathPrefixAll() map[string]any {
	return map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/"}}
}

// NewHTTPRouteRouter builds the router of provider; hostnames may be empty.
func NewHTTPRouteRouter(c Clients, s Spec, provider string, parents []ParentRef, hostnames []string, can Capabilities) *HTTPRouteRouter {
	primary, canary := s.Apex+"-primary", s.Apex+"-canary"
	backend := func(name string, weight int) map[string]any {
		return map[string]any{"group": "", "kind": "Service", "name": name, "port": int64(s.Port), "weight": int64(weight)}
	}
	setsCookie := func(ref map[string]any, name, value string) map[string]any {
		ref["filters"] = []any{map[string]any{
			"type": "ResponseHeaderModifier",
			"responseHeaderModifier": map[string]any{"add": []any{map[string]any{
				"name": "Set-Cookie", "value": s.SessionAffinity.SetCookie(name, value),
			}}},
		}}
		return ref
	}
	sticky := func(name, value string, toCanary bool) any {
		match := pathPrefixAll()
		match["headers"] = []any{map[string]any{"type": "RegularExpression", "name": "Cookie", "value": CookieRegex(name, value)}}
		refs := []any{backend(primary, 100), backend(canary, 0)}
		if toCanary {
			refs = []any{backend(primary, 0), backend(canary, 100)}
		}
		return map[string]any{"matches": []any{match}, "backendRefs": refs}
	}
	parentList := make([]any, 0, len(parents))
	for _, p := range parents {
		parentList = append(parentList, p.Object())
	}
	r := &HTTPRouteRouter{}
	r.obj = Managed{
		Dynamic: c.Dynamic, Spec: s, GVR: HTTPRouteResource, Kind: "HTTPRoute",
		Name: s.Apex, Namespace: s.Namespace, Provider: provider, Can: can, Last: &HeldCache{}, StampApex: true,
		Render: func(w Weights) map[string]any {
			var rules []any
			if w.Matched {
				rules = append(rules, map[string]any{
					"matches":     httpRouteMatches(s.Match),
					"backendRefs": []any{backend(primary, 0), backend(canary, 100)},
				})
			}
			primaryRef, canaryRef := backend(primary, w.Primary), backend(canary, w.Canary)
			if sa := s.SessionAffinity; sa != nil && w.Session != "" {
				rules = append(rules, sticky(sa.CookieName, w.Session, true))
				canaryRef = setsCookie(canaryRef, sa.CookieName, w.Session)
				if sa.PrimaryCookieName != "" {
					rules = append(rules, sticky(sa.PrimaryCookieName, w.Session, false))
					primaryRef = setsCookie(primaryRef, sa.PrimaryCookieName, w.Session)
				}
			}
			if sa := s.SessionAffinity; sa != nil && w.Session == "" && w.Expired != "" {
				for _, name := range sa.Cookies() {
					rule, _ := sticky(name, w.Expired, false).(map[string]any)
					rule["filters"] = []any{map[string]any{
						"type": "ResponseHeaderModifier",
						"responseHeaderModifier": map[string]any{"add": []any{map[string]any{
							"name": "Set-Cookie", "value": sa.ExpireCookie(name, w.Expired),
						}}},
					}}
					rules = append(rules, rule)
				}
			}
			split := map[string]any{
				"matches":     []any{pathPrefixAll()},
				"backendRefs": []any{primaryRef, canaryRef},
			}
			if w.Mirrored {
				mirror := map[string]any{"backendRef": map[string]any{"group": "", "kind": "Service", "name": canary, "port": int64(s.Port)}}
				if s.MirrorWeight > 0 {
					mirror["percent"] = int64(s.MirrorWeight)
				}
				split["filters"] = []any{map[string]any{"type": "RequestMirror", "requestMirror": mirror}}
			}
			spec := map[string]any{
				"parentRefs": DeepCopy(parentList),
				"rules":      append(rules, split),
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
		ReadWeights: func(obj *unstructured.Unstructured) (Weights, error) {
			return httpRouteWeights(obj, primary, canary, s.SessionAffinity)
		},
		TakeOver: func(live, want map[string]any) error { return httpRouteTakesOver(s, live, want) },
	}
	if slices.ContainsFunc(parents, func(p ParentRef) bool { return !p.isService() }) {
		// Weights{Primary: 100} renders the split rule alone (no A/B, session-affinity or mirror).
		spec := r.obj.Render(Weights{Primary: 100})
		rules, _ := spec["rules"].([]any)
		for _, rule := range rules {
			if m, ok := rule.(map[string]any); ok {
				m["backendRefs"] = []any{backend(s.Apex, 100)}
			}
		}
		r.leftBehind = &Handover{Spec: spec, Dest: s.Apex, Destinations: backendNames, Note: RouteHandoverNote(s)}
	}
	return r
}

// isService reports the GAMMA form of a parent: the route then only splits requests already
// sent to that Service, which takes them itself once the route is gone.
func (p ParentRef) isService() bool { return p.Group == "" && p.Kind == "Service" }

// backendNames lists the backendRef names of an HTTPRoute's rules, in order.
func backendNames(route *unstructured.Unstructured) []string {
	var out []string
	rules, _, _ := unstructured.NestedSlice(route.Object, "spec", "rules")
	for _, rule := range rules {
		rm, _ := rule.(map[string]any)
		refs, _ := rm["backendRefs"].([]any)
		for _, ref := range refs {
			refMap, _ := ref.(map[string]any)
			if name, ok, _ := unstructured.NestedString(refMap, "name"); ok {
				out = append(out, name)
			}
		}
	}
	return out
}

// httpRouteMatches renders analysis.match as HTTPRouteMatches, which a rule ORs. Gateway API
// matches headers and query parameters exactly or by regular expression, so a prefix or a
// suffix becomes one (RE2, which implementations match against the whole value).
func httpRouteMatches(ms []Match) []any {
	out := make([]any, 0, len(ms))
	for _, m := range ms {
		entry := pathPrefixAll()
		for key, conds := range map[string]map[string]StringMatch{"headers": m.Headers, "queryParams": m.QueryParams} {
			var list []any
			for _, name := range slices.Sorted(maps.Keys(conds)) {
				c := conds[name]
				kind, value := "Exact", c.Exact
				if c.Exact == "" {
					kind, value = "RegularExpression", c.Pattern(true)
				}
				list = append(list, map[string]any{"type": kind, "name": name, "value": value})
			}
			if len(list) > 0 {
				entry[key] = list
			}
		}
		out = append(out, entry)
	}
	return out
}

// httpRouteWeights reads the split from the rule whose matches look at nothing but the path
// (the rule every other request follows), and the extras from the rules before it. A
// backendRef without weight would weigh 1 in Gateway API, which no split of ours writes: it is
// unreadable.
func httpRouteWeights(obj *unstructured.Unstructured, primary, canary string, sa *SessionAffinity) (Weights, error) {
	rules, _, _ := unstructured.NestedSlice(obj.Object, "spec", "rules")
	var w Weights
	found := false
	for _, item := range rules {
		rule, _ := item.(map[string]any)
		refs, _ := rule["backendRefs"].([]any)
		p, okP := BackendWeight(refs, "name", primary)
		c, okC := BackendWeight(refs, "name", canary)
		if !okP || !okC {
			continue
		}
		if conds := requestConditions(rule); len(conds) > 0 {
			switch value, sticky := stickyHeader(conds, sa); {
			case sticky && c == 100:
				w.Session = value
			case sticky && p == 100 && c == 0:
				w.Expired = value
			case !sticky && c == 100:
				w.Matched = true
			}
			continue
		}
		if !found {
			found = true
			w.Primary, w.Canary = p, c
			w.Mirrored = mirrorsTo(rule, canary)
		}
	}
	if !found {
		return Weights{}, fmt.Errorf("no rule matching on the path alone has backendRefs %s and %s with integer weights", primary, canary)
	}
	return w, nil
}

// requestConditions are a rule's header and query-parameter matches.
func requestConditions(rule map[string]any) []map[string]any {
	var out []map[string]any
	matches, _ := rule["matches"].([]any)
	for _, m := range matches {
		mm, _ := m.(map[string]any)
		for _, key := range []string{"headers", "queryParams"} {
			list, _ := mm[key].([]any)
			for _, item := range list {
				if cond, ok := item.(map[string]any); ok {
					out = append(out, cond)
				}
			}
		}
	}
	return out
}

// stickyHeader reads the cookie value of a session-affinity rule's lone Cookie match.
func stickyHeader(conds []map[string]any, sa *SessionAffinity) (string, bool) {
	if sa == nil || len(conds) != 1 || !strings.EqualFold(fmt.Sprint(conds[0]["name"]), "cookie") {
		return "", false
	}
	re, _ := conds[0]["value"].(string)
	return CookieValue(sa.CookieName, re)
}

// mirrorsTo reports a RequestMirror filter to the canary Service on the rule.
func mirrorsTo(rule map[string]any, canary string) bool {
	filters, _ := rule["filters"].([]any)
	for _, f := range filters {
		fm, _ := f.(map[string]any)
		if name, _, _ := unstructured.NestedString(fm, "requestMirror", "backendRef", "name"); fm["type"] == "RequestMirror" && name == canary {
			return true
		}
	}
	return false
}

func (r *HTTPRouteRouter) Reconcile(ctx context.Context) error { return r.obj.Reconcile(ctx) }

func (r *HTTPRouteRouter) SetRoutes(ctx context.Context, w Weights) error {
	return r.obj.SetRoutes(ctx, w)
}

func (r *HTTPRouteRouter) GetRoutes(ctx context.Context) (Weights, error) {
	return r.obj.GetRoutes(ctx)
}

func (r *HTTPRouteRouter) Drift(ctx context.Context) ([]string, error) { return r.obj.Drift(ctx, nil) }

// Finalize deletes the HTTPRoute, unless a Gateway serves it: the Gateway has no other route
// to the apex, so the route is handed over to the apex Service instead (see handover), keeping
// its parentRefs and hostnames. A release that owns its workload deletes it all the same: the
// workload goes too.
func (r *HTTPRouteRouter) Finalize(ctx context.Context) error {
	if r.leftBehind != nil && !r.obj.Spec.OwnsWorkload {
		return r.obj.HandOver(ctx, *r.leftBehind)
	}
	return DeleteOwned(ctx, r.obj.Dynamic, r.obj.GVR, r.obj.Namespace, r.obj.Name, r.obj.Spec)
}

func (r *HTTPRouteRouter) Warnings(ctx context.Context) []string {
	if r.Warn == nil {
		return nil
	}
	return r.Warn(ctx)
}

// ConfiguredRouter checks the configuration first: an error that would make the route
// useless is returned by Reconcile instead of writing, and reported by Drift.
type ConfiguredRouter struct {
	*HTTPRouteRouter
	Check func() error
}

func (r ConfiguredRouter) Reconcile(ctx context.Context) error {
	if err := r.Check(); err != nil {
		return err
	}
	return r.HTTPRouteRouter.Reconcile(ctx)
}

func (r ConfiguredRouter) Drift(ctx context.Context) ([]string, error) {
	if err := r.Check(); err != nil {
		// A configuration problem is drift to report, not a failure to read the cluster.
		return []string{err.Error()}, nil //nolint:nilerr // see above
	}
	return r.HTTPRouteRouter.Drift(ctx)
}

// httpRouteTakesOver judges a hand-written HTTPRoute <apex> (see Managed.TakeOver): the
// release's must list its hostnames and parentRefs, and it may only send requests (or mirror
// them) to the apex or its two sides.
func httpRouteTakesOver(s Spec, live, want map[string]any) error {
	problems := map[string][]string{}
	liveHosts, _, _ := unstructured.NestedSlice(live, "hostnames")
	wantHosts, _, _ := unstructured.NestedSlice(want, "hostnames")
	if len(wantHosts) > 0 {
		// No hostnames take every host the parents accept, which covers any list.
		problems["hostnames"] = Missing(liveHosts, wantHosts, func(v any) string { return fmt.Sprint(v) })
	}
	parent := func(v any) string {
		p, _ := v.(map[string]any)
		group, kind := GatewayGroup, GatewayKind
		if g, ok := p["group"].(string); ok {
			group = g
		}
		if k, ok := p["kind"].(string); ok && k != "" {
			kind = k
		}
		ns, _ := p["namespace"].(string)
		if ns == "" {
			ns = s.Namespace
		}
		return fmt.Sprintf("%s/%s %s/%v", group, kind, ns, p["name"]) + sectionOf(p)
	}
	liveParents, _, _ := unstructured.NestedSlice(live, "parentRefs")
	wantParents, _, _ := unstructured.NestedSlice(want, "parentRefs")
	problems["parentRefs"] = Missing(liveParents, wantParents, parent)
	var names []string
	rules, _, _ := unstructured.NestedSlice(live, "rules")
	for _, rule := range rules {
		rm, _ := rule.(map[string]any)
		refs, _ := rm["backendRefs"].([]any)
		filters, _ := rm["filters"].([]any)
		for _, f := range filters {
			fm, _ := f.(map[string]any)
			if ref, ok, _ := unstructured.NestedMap(fm, "requestMirror", "backendRef"); ok {
				refs = append(refs, ref)
			}
		}
		for _, ref := range refs {
			rm, _ := ref.(map[string]any)
			name, _ := rm["name"].(string)
			if kind, _ := rm["kind"].(string); kind != "" && kind != "Service" {
				name = kind + " " + name
			}
			names = append(names, name)
		}
	}
	problems["backends"] = Foreign(names, s.Backends())
	return TakeOverProblems(problems, "hostnames", "parentRefs", "backends")
}

// sectionOf is the listener part of a parentRef's key.
func sectionOf(p map[string]any) string {
	if sec, _ := p["sectionName"].(string); sec != "" {
		return "#" + sec
	}
	return ""
}
