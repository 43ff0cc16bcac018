package meshsim

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// flowKey names one stream of load: the requests one mesh carries for one apex Service, the
// plain ones or those tagged for A/B testing (abtest.go).
type flowKey struct {
	mesh   Mesh
	apex   types.NamespacedName
	tagged bool
}

// objectRef names the router object that holds a route's weights.
type objectRef struct {
	Kind, Namespace, Name string
}

func (o objectRef) String() string { return o.Kind + "/" + o.Name }

// route is the path the mesh sends an apex's requests along at this moment.
type route struct {
	mesh   Mesh
	object objectRef
	// tester marks the load tester's requests (loadtest.go): test traffic, not user traffic.
	tester bool
	// weighted routes must have weights summing to 100; a single Gloo destination has none.
	weighted bool
	backends []backend
	priority int64 // APISIX rule priority; the highest wins
	// accepts is the route's condition on a request's headers and query (APISIX match.exprs,
	// Gloo matchers); nil takes every request.
	accepts requestMatch
	// APISIX prometheus labels: route is <namespace>_<ApisixRoute>_<rule>.
	apisixRoute, matchedURI, matchedHost string
	// gateway is the Gateway API implementation serving the route (gatewayImpl*), which
	// decides what it exports besides the application's own metrics.
	gateway string
	// balancer is the ALB a route belongs to: its IngressGroup (alb.go).
	balancer string
	// mirror is where the route also copies its requests to (Istio mirror, Gateway API
	// RequestMirror); nil when it mirrors nothing.
	mirror *mirror
	// setCookies are the Set-Cookie headers the route adds to every answer (cookies.go).
	setCookies []string
	// ingress is what ingress-nginx's metrics say about the route's location (nginx.go).
	ingress *ingressLabels
	// sidecars are the proxies inside each pod (by namespace/name) this tick, for requests that
	// reach pods past every router (MeshKubernetes, meshLoadTest): see podSide.
	sidecars map[string]sidecar
}

// mirror is a route's request mirroring: a share percent (0..100) of the requests that take the
// route are also sent, fire-and-forget, to backend.
type mirror struct {
	backend backend
	percent float64
}

// backend is one side of a split.
type backend struct {
	service types.NamespacedName
	weight  float64
	// cluster is the name the data plane's metrics give the backend: Gloo's Envoy cluster
	// "<upstream>_<namespace>" (empty when the Upstream is missing), Traefik's service label.
	cluster string
	broken  string // why the backend leads to no Service at all (Gloo: missing Upstream)
	// subset are pod labels the backend requires besides the Service's selector (an Istio
	// DestinationRule subset).
	subset map[string]string
	istio  *istioDest // Istio: the names its metrics carry
	// setCookies are the Set-Cookie headers added to the answers this backend gives.
	setCookies []string
}

// candidate is a route together with the apexes whose load may take it.
type candidate struct {
	apexes []types.NamespacedName
	route  *route
}

// view is what one tick reads from the informer caches.
type view struct {
	services corelisters.ServiceLister
	pods     corelisters.PodLister
	rsets    appslisters.ReplicaSetLister
	crds     map[schema.GroupVersionResource]cache.GenericLister
}

// list returns the objects of a router resource, sorted by namespace and name so that every
// "first one wins" rule below is deterministic. A resource whose CRD is missing is empty.
func (v *view) list(gvr schema.GroupVersionResource) []*unstructured.Unstructured {
	lister, ok := v.crds[gvr]
	if !ok {
		return nil
	}
	objs, err := lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GetNamespace() != out[j].GetNamespace() {
			return out[i].GetNamespace() < out[j].GetNamespace()
		}
		return out[i].GetName() < out[j].GetName()
	})
	return out
}

func (v *view) get(gvr schema.GroupVersionResource, namespace, name string) *unstructured.Unstructured {
	lister, ok := v.crds[gvr]
	if !ok {
		return nil
	}
	o, err := lister.ByNamespace(namespace).Get(name)
	if err != nil {
		return nil
	}
	u, _ := o.(*unstructured.Unstructured)
	return u
}

// resolveRoutes finds, for every apex that some router object routes for, the route its load
// takes now. Each mesh is a separate entry point, so one apex may carry load in several meshes.
func resolveRoutes(v *view) map[flowKey]*route {
	out := map[flowKey]*route{}
	pick := func(cands []candidate) {
		for _, c := range cands {
			for _, apex := range c.apexes {
				for _, tagged := range []bool{false, true} {
					req, ok := v.requestOf(apex, tagged)
					if !ok || !c.route.accepts.takes(req) {
						continue
					}
					key := flowKey{mesh: c.route.mesh, apex: apex, tagged: tagged}
					// Strictly higher priority wins, so among equals the first candidate stays.
					if cur, ok := out[key]; !ok || c.route.priority > cur.priority {
						out[key] = c.route
					}
				}
			}
		}
	}
	for _, m := range models {
		pick(m.candidates(v))
	}
	return out
}

// apexOf strips the backend suffix Flagger-style names carry: podinfo-primary -> podinfo.
func apexOf(service string) string {
	for _, suffix := range []string{"-primary", "-canary"} {
		if s, ok := strings.CutSuffix(service, suffix); ok && s != "" {
			return s
		}
	}
	return service
}

// osmCandidates: the TrafficSplit whose spec.service is the apex; backends in its namespace.
func osmCandidates(v *view) []candidate {
	var out []candidate
	for _, ts := range v.list(TrafficSplitGVR) {
		root := str(ts.Object, "spec", "service")
		if root == "" {
			continue
		}
		// spec.service may be a DNS name (podinfo.test.svc.cluster.local); the Service is its first label.
		name, _, _ := strings.Cut(root, ".")
		r := &route{
			mesh:     MeshOSM,
			object:   objectRef{Kind: "TrafficSplit", Namespace: ts.GetNamespace(), Name: ts.GetName()},
			weighted: true,
		}
		for _, b := range maps(ts.Object, "spec", "backends") {
			w, _ := num(b, "weight")
			r.backends = append(r.backends, backend{
				service: types.NamespacedName{Namespace: ts.GetNamespace(), Name: str(b, "service")},
				weight:  w,
			})
		}
		out = append(out, candidate{apexes: []types.NamespacedName{{Namespace: ts.GetNamespace(), Name: name}}, route: r})
	}
	return out
}

// apisixDefaultWeight is the weight of a backend that sets none: the APISIX ingress controller
// translates a missing weight to 100, so a lone backend without weight takes all traffic and
// its rule sums to 100.
const apisixDefaultWeight = 100

// apisixCandidates: every ApisixRoute rule, serving the apexes its backends belong to
// (apex, apex-primary, apex-canary). The highest priority wins, so Flagger's generated canary
// route (priority 10000) takes over from the user's route (priority 0).
func apisixCandidates(v *view) []candidate {
	var out []candidate
	for _, ar := range v.list(ApisixRouteGVR) {
		ns := ar.GetNamespace()
		for _, rule := range maps(ar.Object, "spec", "http") {
			prio, _ := num(rule, "priority")
			r := &route{
				mesh:        MeshAPISIX,
				object:      objectRef{Kind: "ApisixRoute", Namespace: ns, Name: ar.GetName()},
				weighted:    true,
				priority:    int64(prio),
				accepts:     apisixExprs(rule),
				apisixRoute: fmt.Sprintf("%s_%s_%s", ns, ar.GetName(), str(rule, "name")),
				matchedURI:  first(strs(rule, "match", "paths")),
				matchedHost: first(strs(rule, "match", "hosts")),
			}
			var apexes []types.NamespacedName
			for _, b := range maps(rule, "backends") {
				svc := str(b, "serviceName")
				if svc == "" {
					continue
				}
				w, ok := num(b, "weight")
				if !ok {
					w = apisixDefaultWeight
				}
				r.backends = append(r.backends, backend{service: types.NamespacedName{Namespace: ns, Name: svc}, weight: w})
				apexes = appendUnique(apexes, types.NamespacedName{Namespace: ns, Name: apexOf(svc)})
			}
			if len(apexes) > 0 {
				out = append(out, candidate{apexes: apexes, route: r})
			}
		}
	}
	return out
}

// maxDelegation bounds RouteTable-to-RouteTable delegation (and so any delegation loop).
const maxDelegation = 5

// glooCandidates: each VirtualService route that a plain GET request can match, followed through
// delegation to the route that holds the destinations. The apex of a destination is its
// Service name without -primary/-canary; the first route (VirtualServices in name order, routes
// in list order) that serves an apex wins, as Gloo matches routes in order.
func glooCandidates(v *view) []candidate {
	var out []candidate
	for _, vs := range v.list(VirtualServiceGVR) {
		owner := objectRef{Kind: "VirtualService", Namespace: vs.GetNamespace(), Name: vs.GetName()}
		for _, rt := range maps(vs.Object, "spec", "virtualHost", "routes") {
			out = append(out, glooRoute(v, rt, owner, 0)...)
		}
	}
	return out
}

// glooRoute resolves one route of a VirtualService or RouteTable (owner) into candidates; a
// route delegated to takes only the requests that its own and its parent's matchers take.
func glooRoute(v *view, rt map[string]any, owner objectRef, depth int) []candidate {
	when := glooMatchers(rt)
	if action := mapAt(rt, "routeAction"); action != nil {
		r := glooAction(v, action, owner)
		if r == nil {
			return nil
		}
		r.accepts = when
		var apexes []types.NamespacedName
		for _, b := range r.backends {
			if b.broken == "" {
				apexes = appendUnique(apexes, types.NamespacedName{Namespace: b.service.Namespace, Name: apexOf(b.service.Name)})
			}
		}
		if len(apexes) == 0 {
			return nil
		}
		return []candidate{{apexes: apexes, route: r}}
	}
	delegate := mapAt(rt, "delegateAction")
	if delegate == nil || depth >= maxDelegation {
		return nil
	}
	// delegateAction.ref is current; delegateAction.{name,namespace} is the deprecated form.
	// Delegation by label selector is not simulated.
	ref := mapAt(delegate, "ref")
	if ref == nil {
		ref = delegate
	}
	name, ns := str(ref, "name"), str(ref, "namespace")
	if ns == "" {
		ns = owner.Namespace
	}
	table := v.get(RouteTableGVR, ns, name)
	if name == "" || table == nil {
		return nil
	}
	tableRef := objectRef{Kind: "RouteTable", Namespace: ns, Name: name}
	var out []candidate
	for _, sub := range maps(table.Object, "spec", "routes") {
		for _, c := range glooRoute(v, sub, tableRef, depth+1) {
			c.route.accepts = both(when, c.route.accepts)
			out = append(out, c)
		}
	}
	return out
}

// glooAction turns a routeAction into a route: an UpstreamGroup, weighted destinations (multi)
// or a single upstream. Weights are uint32 with omitempty in Gloo, so a missing weight is 0.
func glooAction(v *view, action map[string]any, owner objectRef) *route {
	if ref := mapAt(action, "upstreamGroup"); ref != nil {
		name, ns := str(ref, "name"), str(ref, "namespace")
		if ns == "" {
			ns = owner.Namespace
		}
		group := v.get(UpstreamGroupGVR, ns, name)
		if group == nil {
			return nil
		}
		groupRef := objectRef{Kind: "UpstreamGroup", Namespace: ns, Name: name}
		r := &route{mesh: MeshGloo, object: groupRef, weighted: true}
		for _, d := range maps(group.Object, "spec", "destinations") {
			w, _ := num(d, "weight")
			r.backends = append(r.backends, glooBackend(v, mapAt(d, "destination", "upstream"), ns, w))
		}
		return r
	}
	if multi := mapAt(action, "multi"); multi != nil {
		r := &route{mesh: MeshGloo, object: owner, weighted: true}
		for _, d := range maps(multi, "destinations") {
			w, _ := num(d, "weight")
			r.backends = append(r.backends, glooBackend(v, mapAt(d, "destination", "upstream"), owner.Namespace, w))
		}
		return r
	}
	if up := mapAt(action, "single", "upstream"); up != nil {
		return &route{mesh: MeshGloo, object: owner, backends: []backend{glooBackend(v, up, owner.Namespace, 1)}}
	}
	return nil
}

// glooBackend follows an Upstream reference to the Kubernetes Service behind it.
func glooBackend(v *view, ref map[string]any, defaultNS string, weight float64) backend {
	name, ns := str(ref, "name"), str(ref, "namespace")
	if ns == "" {
		ns = defaultNS
	}
	b := backend{weight: weight}
	up := v.get(UpstreamGVR, ns, name)
	if up == nil {
		b.broken = fmt.Sprintf("Upstream %s/%s does not exist", ns, name)
		return b
	}
	b.cluster = name + "_" + ns
	svc, svcNS := str(up.Object, "spec", "kube", "serviceName"), str(up.Object, "spec", "kube", "serviceNamespace")
	if svc == "" {
		b.broken = fmt.Sprintf("Upstream %s/%s has no spec.kube.serviceName", ns, name)
		return b
	}
	if svcNS == "" {
		svcNS = ns
	}
	b.service = types.NamespacedName{Namespace: svcNS, Name: svc}
	return b
}

// Helpers over unstructured content. Wrong types read as empty: a malformed router object
// routes nothing rather than crashing the simulator.

func mapAt(obj map[string]any, fields ...string) map[string]any {
	raw, _, _ := unstructured.NestedFieldNoCopy(obj, fields...)
	m, _ := raw.(map[string]any)
	return m
}

func str(obj map[string]any, fields ...string) string {
	s, _, _ := unstructured.NestedString(obj, fields...)
	return s
}

func strs(obj map[string]any, fields ...string) []string {
	s, _, _ := unstructured.NestedStringSlice(obj, fields...)
	return s
}

func maps(obj map[string]any, fields ...string) []map[string]any {
	raw, _, _ := unstructured.NestedFieldNoCopy(obj, fields...)
	list, _ := raw.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, item := range list {
		if m, ok := item.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// num reads a JSON number, which decodes as int64 or float64 depending on its text.
func num(obj map[string]any, fields ...string) (float64, bool) {
	raw, ok, _ := unstructured.NestedFieldNoCopy(obj, fields...)
	if !ok {
		return 0, false
	}
	switch n := raw.(type) {
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func first(list []string) string {
	if len(list) == 0 {
		return ""
	}
	return list[0]
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func appendUnique(list []types.NamespacedName, n types.NamespacedName) []types.NamespacedName {
	for _, x := range list {
		if x == n {
			return list
		}
	}
	return append(list, n)
}
