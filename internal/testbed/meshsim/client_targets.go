package meshsim

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// What the client sends to: the hosts of the routes the stack's Traefik serves, through its three
// providers (the static configuration in the stack script):
//   - kubernetescrd: every IngressRoute route on the web entry point whose match names a
//     Host(`...`), through its services (a TraefikService is followed);
//   - kubernetesgateway: every HTTPRoute with hostnames attached to a Gateway whose GatewayClass
//     is Traefik's (TraefikGatewayController);
//   - kubernetesingress: every rule host of an Ingress of class TraefikIngressClass, to the
//     Service of its first path, while that Service exists.
//
// Each host gets its apex's rps (AnnotationRPS, as the simulated flows). When the apex asks for
// A/B traffic (AnnotationABHeader, AnnotationABQuery) the share AnnotationABShare of it is sent
// tagged, carrying those headers and query parameters, as the simulated flows are.
//
// With each request goes the simulator's own model of the route for it: its split and the share
// of requests each image would answer, so that a test can hold the model to what Traefik served.

// The classes the stack's Traefik serves (traefik-classes.yaml).
const (
	TraefikGatewayController = "traefik.io/gateway-controller"
	TraefikIngressClass      = "traefik"
)

// NoPod is the model's key for the share of requests that no Ready pod would answer.
const NoPod = "(no Ready pod)"

// hostRule finds the hosts of a Traefik match rule: Host(`a`) or Host(`a`, `b`).
var hostRule = regexp.MustCompile(`Host\(([^)]*)\)`)

var backquoted = regexp.MustCompile("`([^`]*)`")

// clientTarget is one host the client sends to, with the route that serves it.
type clientTarget struct {
	object objectRef // the IngressRoute, HTTPRoute or Ingress
	host   string
	rps    float64
	// tagged requests carry the apex's A/B headers and query parameters (req).
	tagged bool
	req    request
	// split is the model's route's weights when the request leaves
	// ("podinfo-primary=90,podinfo-canary=10"); model the share each image would answer.
	split string
	model map[string]float64
	// empty are the Services (namespace/name) of positive weight in the model's route that
	// have no Ready pod as the request leaves: where a 503 of the proxy's may come from.
	empty []string
	// route is the model's route for the request; flows are the simulated flows the client's
	// requests to this host stand for, which the simulator no longer sends (proxiedFlows).
	route *route
	flows []flowKey
}

// clientTargets lists the hosts of the routes Traefik serves.
func (s *Simulator) clientTargets() []clientTarget {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.targetsOf(s.view())
}

func (s *Simulator) targetsOf(v *view) []clientTarget {
	var out []clientTarget
	out = append(out, s.ingressRouteTargets(v)...)
	out = append(out, s.httpRouteTargets(v)...)
	out = append(out, s.ingressTargets(v)...)
	return out
}

// ingressRouteTargets: the IngressRoute routes on the web entry point. As for the simulated
// flows, a route whose services lead nowhere (its TraefikService gone) carries no load.
func (s *Simulator) ingressRouteTargets(v *view) []clientTarget {
	var out []clientTarget
	for _, ir := range v.list(IngressRouteGVR) {
		if eps := strs(ir.Object, "spec", "entryPoints"); len(eps) > 0 && !contains(eps, "web") {
			continue
		}
		ns := ir.GetNamespace()
		owner := objectRef{Kind: "IngressRoute", Namespace: ns, Name: ir.GetName()}
		for _, rt := range maps(ir.Object, "spec", "routes") {
			hosts := ruleHosts(str(rt, "match"))
			if len(hosts) == 0 {
				continue
			}
			var r *route
			for _, svc := range maps(rt, "services") {
				if r = traefikRoute(v, svc, ns, owner); r != nil && len(r.backends) > 0 {
					break
				}
			}
			if r == nil || len(r.backends) == 0 {
				continue
			}
			// The model does not read the match beyond its hosts: both kinds of request take r.
			// Its load stands for the model's IngressRoute flow of each apex it serves, and for
			// the un-meshed clients of a plain Service it names (a kubernetes release's apex).
			var flows []flowKey
			for _, b := range r.backends {
				flows = append(flows, flowKey{mesh: MeshTraefik, apex: types.NamespacedName{Namespace: b.service.Namespace, Name: apexOf(b.service.Name)}},
					flowKey{mesh: MeshKubernetes, apex: b.service})
			}
			out = append(out, s.targets(v, owner, hosts, apexOfRoute(r), flows, func(request) *route { return r })...)
		}
	}
	return out
}

// httpRouteTargets: the HTTPRoutes on a Gateway of Traefik's GatewayClass; each request takes the
// rule match of highest precedence that accepts it (httpRouteCandidates).
func (s *Simulator) httpRouteTargets(v *view) []clientTarget {
	var out []clientTarget
	for _, hr := range v.list(HTTPRouteGVR) {
		gw, ok := attachedGateway(v, hr)
		hosts := strs(hr.Object, "spec", "hostnames")
		if !ok || len(hosts) == 0 || gatewayController(v, gw) != TraefikGatewayController {
			continue
		}
		cands := httpRouteCandidates(hr, MeshGatewayAPI, "", nil)
		if len(cands) == 0 {
			continue
		}
		owner := objectRef{Kind: "HTTPRoute", Namespace: hr.GetNamespace(), Name: hr.GetName()}
		routeFor := func(req request) *route {
			var best *route
			for _, c := range cands {
				if c.route.accepts.takes(req) && (best == nil || c.route.priority > best.priority) {
					best = c.route
				}
			}
			return best
		}
		var flows []flowKey
		for _, c := range cands {
			for _, apex := range c.apexes {
				flows = append(flows, flowKey{mesh: MeshGatewayAPI, apex: apex})
			}
		}
		out = append(out, s.targets(v, owner, hosts, cands[0].apexes[0], flows, routeFor)...)
	}
	return out
}

// ingressTargets: the rule hosts of the Ingresses of Traefik's class, each to the Service of its
// rule's first path.
func (s *Simulator) ingressTargets(v *view) []clientTarget {
	var out []clientTarget
	for _, ing := range v.list(IngressGVR) {
		class := str(ing.Object, "spec", "ingressClassName")
		if class == "" {
			class = ing.GetAnnotations()["kubernetes.io/ingress.class"]
		}
		if class != TraefikIngressClass {
			continue
		}
		ns := ing.GetNamespace()
		owner := objectRef{Kind: "Ingress", Namespace: ns, Name: ing.GetName()}
		for _, rule := range maps(ing.Object, "spec", "rules") {
			paths := maps(rule, "http", "paths")
			name := ""
			if len(paths) > 0 {
				name = str(paths[0], "backend", "service", "name")
			}
			if str(rule, "host") == "" || name == "" {
				continue
			}
			// As for an IngressRoute whose TraefikService is gone, a rule whose Service is gone
			// (a destroyed release's apex) carries no load: its users are gone with it.
			if _, err := v.services.Services(ns).Get(name); err != nil {
				continue
			}
			svc := types.NamespacedName{Namespace: ns, Name: name}
			r := &route{mesh: MeshTraefik, object: owner, backends: []backend{{service: svc, weight: 1}}}
			flows := []flowKey{{mesh: MeshKubernetes, apex: svc}}
			out = append(out, s.targets(v, owner, []string{str(rule, "host")}, svc, flows, func(request) *route { return r })...)
		}
	}
	return out
}

// targets makes the plain target of each host and, when the apex asks for A/B traffic, the
// tagged one; routeFor is the model's route for a request (nil: none, no load). flows are the
// plain flows the targets stand for (the tagged ones follow).
func (s *Simulator) targets(v *view, owner objectRef, hosts []string, apex types.NamespacedName, flows []flowKey, routeFor func(request) *route) []clientTarget {
	var out []clientTarget
	for _, tagged := range []bool{false, true} {
		req, ok := v.requestOf(apex, tagged)
		if !ok {
			continue
		}
		r := routeFor(req)
		if r == nil {
			continue
		}
		rps := s.flowRPS(v, flowKey{apex: apex, tagged: tagged})
		split, model, empty := splitOf(r), s.modelShares(v, r), s.emptyBackends(v, r)
		replaced := make([]flowKey, len(flows))
		for i, k := range flows {
			replaced[i] = flowKey{mesh: k.mesh, apex: k.apex, tagged: tagged}
		}
		for _, h := range hosts {
			out = append(out, clientTarget{object: owner, host: h, rps: rps, tagged: tagged, req: req, split: split, model: model,
				empty: empty, route: r, flows: replaced})
		}
	}
	return out
}

// modelShares is the share of a route's requests each image answers in the simulator's model:
// each backend of positive weight takes its share of the weights (the smooth round-robin of
// traffic.go), spread evenly over its Service's Ready pods; a backend without any is NoPod's.
func (s *Simulator) modelShares(v *view, r *route) map[string]float64 {
	total := 0.0
	for _, b := range r.backends {
		total += max(b.weight, 0)
	}
	out := map[string]float64{}
	if total == 0 {
		return out
	}
	for _, b := range r.backends {
		if b.weight <= 0 {
			continue
		}
		share := b.weight / total
		ready := s.selectPods(v, b.service, b.subset).ready
		if len(ready) == 0 {
			out[NoPod] += share
			continue
		}
		for _, p := range ready {
			out[p.image] += share / float64(len(ready))
		}
	}
	return out
}

// emptyBackends are the Services of positive weight in r without a Ready pod in the model.
func (s *Simulator) emptyBackends(v *view, r *route) []string {
	var out []string
	for _, b := range r.backends {
		if b.weight > 0 && len(s.selectPods(v, b.service, b.subset).ready) == 0 {
			out = append(out, b.service.String())
		}
	}
	return out
}

// apexOfRoute is the apex of a route's first backend.
func apexOfRoute(r *route) types.NamespacedName {
	b := r.backends[0]
	return types.NamespacedName{Namespace: b.service.Namespace, Name: apexOf(b.service.Name)}
}

// gatewayController is the controllerName of a Gateway's GatewayClass ("" when it has none).
func gatewayController(v *view, gw *unstructured.Unstructured) string {
	lister, ok := v.crds[GatewayClassGVR]
	if !ok {
		return ""
	}
	o, err := lister.Get(str(gw.Object, "spec", "gatewayClassName"))
	if err != nil {
		return ""
	}
	class, _ := o.(*unstructured.Unstructured)
	if class == nil {
		return ""
	}
	return str(class.Object, "spec", "controllerName")
}

func ruleHosts(match string) []string {
	var hosts []string
	for _, m := range hostRule.FindAllStringSubmatch(match, -1) {
		for _, h := range backquoted.FindAllStringSubmatch(m[1], -1) {
			hosts = append(hosts, h[1])
		}
	}
	return hosts
}

// splitOf names a weighted route's backends and weights in order; "" when it is not weighted.
func splitOf(r *route) string {
	if !r.weighted {
		return ""
	}
	parts := make([]string, 0, len(r.backends))
	for _, b := range r.backends {
		parts = append(parts, fmt.Sprintf("%s=%g", b.service.Name, b.weight))
	}
	return strings.Join(parts, ",")
}

// requestURL is the path and query a target's request asks for.
func (t clientTarget) requestURL() string {
	if len(t.req.query) == 0 {
		return "/"
	}
	q := url.Values{}
	for n, v := range t.req.query {
		q.Set(n, v)
	}
	return "/?" + q.Encode()
}
