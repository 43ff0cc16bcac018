package istio

import (
	"context"
	"errors"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// istioRouter writes what Flagger's istio provider writes: a VirtualService <apex> whose one
// http route splits service.port between <apex>-primary and <apex>-canary, and DestinationRules
// <apex>-primary and <apex>-canary carrying service.traffic_policy.
type istioRouter struct {
	s               router.Spec
	o               Options
	vs              router.Managed
	rules           []router.Managed
	primary, canary string
}

func newRouter(c router.Clients, s router.Spec, can router.Capabilities) router.Router {
	o, _ := s.Options.(Options) // none: Flagger's default route
	r := &istioRouter{s: s, o: o, primary: s.Apex + "-primary", canary: s.Apex + "-canary"}
	r.vs = router.Managed{
		Dynamic: c.Dynamic, Spec: s, GVR: router.IstioVirtualServiceResource, Kind: "VirtualService",
		Name: s.Apex, Namespace: s.Namespace, Provider: "istio",
		Render: r.virtualServiceSpec, ReadWeights: r.weights,
		Can: can, Last: &router.HeldCache{}, TakeOver: r.takesOver, StampApex: true,
	}
	for _, host := range []string{r.primary, r.canary} {
		r.rules = append(r.rules, router.Managed{
			Dynamic: c.Dynamic, Spec: s, GVR: router.IstioDestinationRuleResource, Kind: "DestinationRule",
			Name: host, Namespace: s.Namespace,
			Render: func(router.Weights) map[string]any { return r.destinationRuleSpec(host) },
			// A DestinationRule carries no split; managed wants one to keep on update.
			ReadWeights: func(*unstructured.Unstructured) (router.Weights, error) { return router.Weights{Primary: 100}, nil },
		})
	}
	return r
}

// hosts are service.hosts plus the apex, unless listed already or "*" covers it (Flagger's rule).
func (r *istioRouter) hosts() []any {
	var out []any
	for _, h := range r.s.Hosts {
		out = append(out, h)
	}
	if !slices.Contains(r.s.Hosts, r.s.Apex) && !slices.Contains(r.s.Hosts, "*") {
		out = append(out, r.s.Apex)
	}
	return out
}

func (r *istioRouter) gateways() []any {
	gws := r.o.Gateways
	if len(gws) == 0 {
		gws = []string{MeshGateway}
	}
	out := make([]any, len(gws))
	for i, g := range gws {
		out[i] = g
	}
	return out
}

func (r *istioRouter) destination(host string, weight int) map[string]any {
	return map[string]any{
		"destination": map[string]any{"host": host, "port": map[string]any{"number": int64(r.s.Port)}},
		// Written even when 0 (Flagger omits it): an explicit 0 says what the split is.
		"weight": int64(weight),
	}
}

// setsCookie makes a destination's answers set a session-affinity cookie.
func (r *istioRouter) setsCookie(dest map[string]any, name, value string) map[string]any {
	dest["headers"] = map[string]any{"response": map[string]any{"add": map[string]any{
		"Set-Cookie": r.s.SessionAffinity.SetCookie(name, value),
	}}}
	return dest
}

// expiring is the route of requests carrying cookie name=value of a release that ended: the
// primary answers them, and the answer expires the cookie (Flagger's expired-cookie route).
func (r *istioRouter) expiring(name, value string) map[string]any {
	route := r.withSettings(map[string]any{
		"match": r.narrowed(cookieMatch(name, value)),
		"route": []any{r.destination(r.primary, 100), r.destination(r.canary, 0)},
	})
	headers, _ := route["headers"].(map[string]any)
	if headers == nil {
		headers = map[string]any{}
		route["headers"] = headers
	}
	response, _ := headers["response"].(map[string]any)
	if response == nil {
		response = map[string]any{}
		headers["response"] = response
	}
	add, _ := response["add"].(map[string]any)
	if add == nil {
		add = map[string]any{}
		response["add"] = add
	}
	add["Set-Cookie"] = r.s.SessionAffinity.ExpireCookie(name, value)
	return route
}

// virtualServiceSpec renders Flagger's routes, first match first: the A/B route (w.Matched),
// the session-affinity routes (w.Session) or, once the release ended, those expiring its
// cookies (w.Expired), then the weighted route every other request takes.
func (r *istioRouter) virtualServiceSpec(w router.Weights) map[string]any {
	var routes []any
	if w.Matched {
		routes = append(routes, r.withSettings(map[string]any{
			"match": r.narrowed(istioMatches(r.s.Match)...),
			"route": []any{r.destination(r.primary, 0), r.destination(r.canary, 100)},
		}))
	}
	primaryDest, canaryDest := r.destination(r.primary, w.Primary), r.destination(r.canary, w.Canary)
	if sa := r.s.SessionAffinity; sa != nil && w.Session != "" {
		routes = append(routes, r.withSettings(map[string]any{
			"match": r.narrowed(cookieMatch(sa.CookieName, w.Session)),
			"route": []any{r.destination(r.primary, 0), r.destination(r.canary, 100)},
		}))
		canaryDest = r.setsCookie(canaryDest, sa.CookieName, w.Session)
		if sa.PrimaryCookieName != "" {
			routes = append(routes, r.withSettings(map[string]any{
				"match": r.narrowed(cookieMatch(sa.PrimaryCookieName, w.Session)),
				"route": []any{r.destination(r.primary, 100), r.destination(r.canary, 0)},
			}))
			primaryDest = r.setsCookie(primaryDest, sa.PrimaryCookieName, w.Session)
		}
	}
	if sa := r.s.SessionAffinity; sa != nil && w.Session == "" && w.Expired != "" {
		for _, name := range sa.Cookies() {
			routes = append(routes, r.expiring(name, w.Expired))
		}
	}
	weighted := r.withSettings(map[string]any{"route": []any{primaryDest, canaryDest}})
	if len(r.o.Match) > 0 {
		weighted["match"] = r.narrowed()
	}
	if w.Mirrored {
		weighted["mirror"] = map[string]any{"host": r.canary, "port": map[string]any{"number": int64(r.s.Port)}}
		if r.s.MirrorWeight > 0 {
			weighted["mirrorPercentage"] = map[string]any{"value": float64(r.s.MirrorWeight)}
		}
	}
	spec := map[string]any{"http": append(routes, weighted)}
	if !r.o.Delegation {
		// A delegate has neither: the root VirtualService's apply.
		spec["hosts"], spec["gateways"] = r.hosts(), r.gateways()
	}
	return spec
}

// narrowed combines conditions with service.match: each condition with each service.match
// entry (the condition's headers and query parameters win a name both set), or the
// service.match entries alone when there are no conditions.
func (r *istioRouter) narrowed(conds ...map[string]any) []any {
	service := r.o.Match
	if len(service) == 0 {
		out := make([]any, len(conds))
		for i, c := range conds {
			out[i] = c
		}
		return out
	}
	if len(conds) == 0 {
		conds = []map[string]any{{}}
	}
	var out []any
	for _, sm := range service {
		base := istioServiceMatch(sm)
		for _, c := range conds {
			entry := router.DeepCopyMap(base)
			for key, value := range c {
				into, _ := entry[key].(map[string]any)
				byName, isMap := value.(map[string]any)
				if into == nil || !isMap {
					entry[key] = value
					continue
				}
				for name, v := range byName {
					into[name] = v
				}
			}
			out = append(out, entry)
		}
	}
	return out
}

// istioServiceMatch renders one service.match entry.
func istioServiceMatch(m Match) map[string]any {
	out := istioMatch(router.Match{Headers: m.Headers, QueryParams: m.QueryParams})
	for key, sm := range map[string]*StringMatch{"uri": m.URI, "method": m.Method} {
		if sm != nil {
			out[key] = istioStringMatch(sm.Exact, sm.Prefix, sm.Regex)
		}
	}
	return out
}

// istioStringMatch is an Istio StringMatch: exact, else prefix, else regex.
func istioStringMatch(exact, prefix, regex string) map[string]any {
	switch {
	case exact != "":
		return map[string]any{"exact": exact}
	case prefix != "":
		return map[string]any{"prefix": prefix}
	}
	return map[string]any{"regex": regex}
}

// cookieMatch is an HTTPMatchRequest taking the requests that carry cookie name=value.
func cookieMatch(name, value string) map[string]any {
	return map[string]any{"headers": map[string]any{"cookie": map[string]any{"regex": router.CookieRegex(name, value)}}}
}

// istioMatches renders analysis.match as HTTPMatchRequests; Istio has no suffix match, so a
// suffix becomes a regular expression (which Istio matches against the whole value).
func istioMatches(ms []router.Match) []map[string]any {
	out := make([]map[string]any, 0, len(ms))
	for _, m := range ms {
		out = append(out, istioMatch(m))
	}
	return out
}

// istioMatch renders one Match as an HTTPMatchRequest.
func istioMatch(m router.Match) map[string]any {
	entry := map[string]any{}
	for key, conds := range map[string]map[string]router.StringMatch{"headers": m.Headers, "queryParams": m.QueryParams} {
		if len(conds) == 0 {
			continue
		}
		rendered := map[string]any{}
		for name, c := range conds {
			rendered[name] = istioStringMatch(c.Exact, c.Prefix, c.Pattern(true))
		}
		entry[key] = rendered
	}
	return entry
}

// withSettings adds the route settings of service (timeout, retries, headers, CORS).
func (r *istioRouter) withSettings(route map[string]any) map[string]any {
	is := r.o
	if is.Timeout != "" {
		route["timeout"] = is.Timeout
	}
	if is.Retries != nil {
		retries := map[string]any{"attempts": int64(is.Retries.Attempts)}
		if is.Retries.PerTryTimeout != "" {
			retries["perTryTimeout"] = is.Retries.PerTryTimeout
		}
		if is.Retries.RetryOn != "" {
			retries["retryOn"] = is.Retries.RetryOn
		}
		route["retries"] = retries
	}
	if h := is.Headers; h != nil {
		headers := map[string]any{}
		if ops := headerOps(h.Request); ops != nil {
			headers["request"] = ops
		}
		if ops := headerOps(h.Response); ops != nil {
			headers["response"] = ops
		}
		if len(headers) > 0 {
			route["headers"] = headers
		}
	}
	if c := is.CorsPolicy; c != nil {
		route["corsPolicy"] = corsPolicy(c)
	}
	return route
}

func headerOps(o *HeaderOps) map[string]any {
	if o == nil {
		return nil
	}
	out := map[string]any{}
	if len(o.Set) > 0 {
		out["set"] = router.StringMapToAny(o.Set)
	}
	if len(o.Add) > 0 {
		out["add"] = router.StringMapToAny(o.Add)
	}
	if len(o.Remove) > 0 {
		out["remove"] = stringsToAny(o.Remove)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func corsPolicy(c *CorsPolicy) map[string]any {
	out := map[string]any{}
	var origins []any
	for _, o := range c.AllowOrigins {
		m := map[string]any{}
		switch {
		case o.Exact != "":
			m["exact"] = o.Exact
		case o.Prefix != "":
			m["prefix"] = o.Prefix
		case o.Regex != "":
			m["regex"] = o.Regex
		}
		origins = append(origins, m)
	}
	if len(origins) > 0 {
		out["allowOrigins"] = origins
	}
	for key, list := range map[string][]string{"allowMethods": c.AllowMethods, "allowHeaders": c.AllowHeaders, "exposeHeaders": c.ExposeHeaders} {
		if len(list) > 0 {
			out[key] = stringsToAny(list)
		}
	}
	if c.MaxAge != "" {
		out["maxAge"] = c.MaxAge
	}
	if c.AllowCredentials != nil {
		out["allowCredentials"] = *c.AllowCredentials
	}
	return out
}

func stringsToAny(list []string) []any {
	out := make([]any, len(list))
	for i, s := range list {
		out[i] = s
	}
	return out
}

func (r *istioRouter) destinationRuleSpec(host string) map[string]any {
	spec := map[string]any{"host": host}
	if tp := r.o.TrafficPolicy; tp != nil {
		policy := map[string]any{}
		if tp.TLSMode != "" {
			policy["tls"] = map[string]any{"mode": tp.TLSMode}
		}
		if tp.LoadBalancer != "" {
			policy["loadBalancer"] = map[string]any{"simple": tp.LoadBalancer}
		}
		if len(policy) > 0 {
			spec["trafficPolicy"] = policy
		}
	}
	return spec
}

// weights reads the split from the last route (the one every request that no other route
// takes follows), and the extras from the routes virtualServiceSpec puts before it. A missing
// weight is 0: Istio's own types omit it.
func (r *istioRouter) weights(obj *unstructured.Unstructured) (router.Weights, error) {
	routes, _, _ := unstructured.NestedSlice(obj.Object, "spec", "http")
	var w router.Weights
	for i, item := range routes {
		route, _ := item.(map[string]any)
		dests, _ := route["route"].([]any)
		p, okP := r.destinationWeight(dests, r.primary)
		c, okC := r.destinationWeight(dests, r.canary)
		last := i == len(routes)-1
		switch {
		case !okP || !okC:
			if last {
				return router.Weights{}, fmt.Errorf("the last http route has no destinations %s and %s", r.primary, r.canary)
			}
			continue
		case p < 0 || c < 0:
			return router.Weights{}, fmt.Errorf("destinations %s and %s have negative weights %d and %d", r.primary, r.canary, p, c)
		case last:
			w.Primary, w.Canary = p, c
			host, _, _ := unstructured.NestedString(route, "mirror", "host")
			w.Mirrored = host == r.canary
			return w, nil
		}
		matches, _ := route["match"].([]any)
		switch value, sticky := r.stickyTo(matches); {
		case sticky && c == 100:
			w.Session = value
		case sticky && p == 100 && c == 0:
			w.Expired = value
		case !sticky && c == 100 && len(matches) > 0:
			w.Matched = true
		}
	}
	return router.Weights{}, fmt.Errorf("no http route has destinations %s and %s", r.primary, r.canary)
}

// stickyTo reads the cookie value of a session-affinity route's match.
func (r *istioRouter) stickyTo(matches []any) (string, bool) {
	sa := r.s.SessionAffinity
	if sa == nil || len(matches) == 0 {
		return "", false
	}
	m, _ := matches[0].(map[string]any)
	re, _, _ := unstructured.NestedString(m, "headers", "cookie", "regex")
	return router.CookieValue(sa.CookieName, re)
}

// destinationWeight finds host among the destinations; found is false when it is missing or
// its weight is not an integer.
func (r *istioRouter) destinationWeight(dests []any, host string) (weight int, found bool) {
	for _, d := range dests {
		dm, _ := d.(map[string]any)
		if h, _, _ := unstructured.NestedString(dm, "destination", "host"); h != host {
			continue
		}
		v, ok := dm["weight"]
		if !ok || v == nil {
			return 0, true
		}
		return router.AsInt(v)
	}
	return 0, false
}

// Reconcile writes the DestinationRules first, so that the VirtualService never routes to a
// host whose traffic policy is not in place yet.
func (r *istioRouter) Reconcile(ctx context.Context) error {
	for _, dr := range r.rules {
		if err := dr.Reconcile(ctx); err != nil {
			return err
		}
	}
	return r.vs.Reconcile(ctx)
}

// SetRoutes rewrites the whole VirtualService spec with the new weights; that also repairs any
// other drift of the route, as Flagger's update does.
func (r *istioRouter) SetRoutes(ctx context.Context, w router.Weights) error {
	return r.vs.SetRoutes(ctx, w)
}

func (r *istioRouter) GetRoutes(ctx context.Context) (router.Weights, error) {
	return r.vs.GetRoutes(ctx)
}

func (r *istioRouter) Drift(ctx context.Context) ([]string, error) {
	var out []string
	for _, m := range append(slices.Clone(r.rules), r.vs) {
		d, err := m.Drift(ctx, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, d...)
	}
	return out, nil
}

// Finalize deletes the VirtualService before the DestinationRules, so that no route is left
// pointing at a host whose rules are gone. Once the VirtualService is gone, the apex Service
// (pointed at the serving pods by the engine) takes the traffic, as in Flagger.
//
// A gateway other than mesh has no other route to the apex, so a VirtualService bound to one is
// handed over instead (see handover): each http route keeps its match and settings and sends
// everything to the apex Service. Its hosts and gateways stay, so the hostname keeps answering.
// A delegate is handed over likewise: the root VirtualService's route to it would answer
// nothing once it is gone.
// A release that owns its workload deletes it all the same: the workload goes too.
func (r *istioRouter) Finalize(ctx context.Context) error {
	if (r.servedByGateway() || r.o.Delegation) && !r.s.OwnsWorkload {
		if err := r.vs.HandOver(ctx, router.Handover{
			Spec: r.leftBehindSpec(), Dest: r.s.Apex, Destinations: destinationHosts, Note: router.RouteHandoverNote(r.s),
		}); err != nil {
			return err
		}
	} else if err := router.DeleteOwned(ctx, r.vs.Dynamic, r.vs.GVR, r.vs.Namespace, r.vs.Name, r.s); err != nil {
		return fmt.Errorf("deleting %s: %w", r.vs.Ref(), err)
	}
	var errs []error
	for _, m := range r.rules {
		if err := router.DeleteOwned(ctx, m.Dynamic, m.GVR, m.Namespace, m.Name, r.s); err != nil {
			errs = append(errs, fmt.Errorf("deleting %s: %w", m.Ref(), err))
		}
	}
	return errors.Join(errs...)
}

// servedByGateway reports a service.gateways entry other than the mesh.
func (r *istioRouter) servedByGateway() bool {
	return slices.ContainsFunc(r.o.Gateways, func(g string) bool { return g != MeshGateway })
}

// leftBehindSpec is the VirtualService once handed over: the weighted route alone (no A/B,
// session-affinity or mirror), with the apex Service as its one destination.
func (r *istioRouter) leftBehindSpec() map[string]any {
	spec := r.virtualServiceSpec(router.Weights{Primary: 100})
	routes, _ := spec["http"].([]any)
	for _, route := range routes {
		if m, ok := route.(map[string]any); ok {
			m["route"] = []any{r.destination(r.s.Apex, 100)}
		}
	}
	return spec
}

// destinationHosts lists the destination hosts of a VirtualService's http routes, in order.
func destinationHosts(vs *unstructured.Unstructured) []string {
	var out []string
	routes, _, _ := unstructured.NestedSlice(vs.Object, "spec", "http")
	for _, route := range routes {
		rm, _ := route.(map[string]any)
		dests, _ := rm["route"].([]any)
		for _, d := range dests {
			dm, _ := d.(map[string]any)
			if host, ok, _ := unstructured.NestedString(dm, "destination", "host"); ok {
				out = append(out, host)
			}
		}
	}
	return out
}

// Warnings points out a route that in-mesh clients will not take: without the mesh gateway
// only the listed gateways apply it, so sidecar-to-sidecar traffic (and the built-in metrics
// of those requests) bypasses the split.
func (r *istioRouter) Warnings(ctx context.Context) []string {
	if r.o.Delegation {
		return r.undelegated(ctx)
	}
	if len(r.o.Gateways) == 0 || slices.Contains(r.o.Gateways, MeshGateway) {
		return nil
	}
	return []string{fmt.Sprintf("service.gateways %v does not include %q: requests from inside the mesh to %s bypass the "+
		"VirtualService and reach the apex Service, which selects the primary only; add \"mesh\" to split them too",
		r.o.Gateways, MeshGateway, r.s.Apex)}
}

// undelegated points out a delegate no root VirtualService names: it routes nothing, and the
// requests reach the apex Service, which selects the primary only. A failed list (no
// permission to read VirtualServices in every namespace) says nothing, so it gives no hint.
func (r *istioRouter) undelegated(ctx context.Context) []string {
	var list *unstructured.UnstructuredList
	err := router.WithRetry(ctx, func() (err error) {
		list, err = r.vs.Dynamic.Resource(r.vs.GVR).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		return err
	})
	if err != nil {
		return nil
	}
	for _, root := range list.Items {
		if delegatesTo(&root, r.s.Namespace, r.s.Apex) {
			return nil
		}
	}
	return []string{fmt.Sprintf("service.delegation: no VirtualService delegates to %s/%s yet; until a root VirtualService routes to it with "+
		"delegate: {name: %s, namespace: %s}, the split applies to no request", r.s.Namespace, r.s.Apex, r.s.Apex, r.s.Namespace)}
}

// delegatesTo reports an http route of root whose delegate is namespace/name (the delegate's
// namespace defaults to the root's).
func delegatesTo(root *unstructured.Unstructured, namespace, name string) bool {
	routes, _, _ := unstructured.NestedSlice(root.Object, "spec", "http")
	for _, route := range routes {
		rm, _ := route.(map[string]any)
		n, _, _ := unstructured.NestedString(rm, "delegate", "name")
		ns, _, _ := unstructured.NestedString(rm, "delegate", "namespace")
		if ns == "" {
			ns = root.GetNamespace()
		}
		if n == name && ns == namespace {
			return true
		}
	}
	return false
}

// takesOver judges a hand-written VirtualService <apex> (see router.Managed.TakeOver): the
// release's must list its hosts and gateways, and it may only send requests to the apex or its
// two sides, by http routes (not tcp, tls or delegate ones, which the release's would drop).
func (r *istioRouter) takesOver(live, want map[string]any) error {
	problems := map[string][]string{}
	hosts := func(v any) string { return router.ServiceName(fmt.Sprint(v), r.s.Namespace) }
	liveHosts, _, _ := unstructured.NestedSlice(live, "hosts")
	wantHosts, _, _ := unstructured.NestedSlice(want, "hosts")
	problems["hosts"] = router.Missing(liveHosts, wantHosts, hosts)
	if r.o.Delegation && len(liveHosts) > 0 {
		problems["hosts"] = router.Missing(liveHosts, nil, hosts)
	}
	liveGateways, _, _ := unstructured.NestedSlice(live, "gateways")
	if len(liveGateways) == 0 && len(liveHosts) > 0 {
		liveGateways = []any{MeshGateway}
	}
	wantGateways, _, _ := unstructured.NestedSlice(want, "gateways")
	problems["gateways"] = router.Missing(liveGateways, wantGateways, func(v any) string { return fmt.Sprint(v) })
	for _, kind := range []string{"tcp", "tls"} {
		if routes, _, _ := unstructured.NestedSlice(live, kind); len(routes) > 0 {
			problems["routes"] = append(problems["routes"], kind)
		}
	}
	var dests []string
	routes, _, _ := unstructured.NestedSlice(live, "http")
	for _, route := range routes {
		rm, _ := route.(map[string]any)
		if _, ok := rm["delegate"]; ok {
			problems["routes"] = append(problems["routes"], "a delegate")
		}
		for _, key := range []string{"route", "mirror"} {
			items, _ := rm[key].([]any)
			if m, ok := rm[key].(map[string]any); ok {
				items = []any{map[string]any{"destination": m}}
			}
			for _, d := range items {
				dm, _ := d.(map[string]any)
				if host, ok, _ := unstructured.NestedString(dm, "destination", "host"); ok {
					dests = append(dests, router.ServiceName(host, r.s.Namespace))
				}
			}
		}
	}
	problems["destinations"] = router.Foreign(dests, r.s.Backends())
	return router.TakeOverProblems(problems, "hosts", "gateways", "routes", "destinations")
}
