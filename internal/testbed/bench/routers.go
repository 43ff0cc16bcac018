package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
)

// routerSetup is what a weighted router needs besides the release: HCL and the user's own
// objects, as in the router's acceptance tests.
type routerSetup struct {
	resourceExtra, serviceExtra string
	// successQuery and durationQuery replace the built-in checks' queries (alb has none).
	successQuery, durationQuery string
	// objects returns the user-owned objects to create in ns before the release.
	objects func(ns string) []objectIn
	// target replaces the release's manifest for a router that owns its target kind.
	target *targetSetup
}

// targetSetup is a driver-owned target: target_ref (with triggers on the image) instead of a
// manifest, and the bench's own ways to create it, give it a new image and check the promotion.
type targetSetup struct {
	ref             string
	create, release func(ctx context.Context, cl *cluster, ns, image string) error
	remove          func(ctx context.Context, cl *cluster, ns string)
	promoted        func(ctx context.Context, cl *cluster, ns string) error
}

// spec is the rollout scenario's release on the router name.
func (s routerSetup) spec(ns, name string) releaseSpec {
	spec := flaggerScenario(ns)
	spec.Router, spec.ResourceExtra, spec.ServiceExtra = name, s.resourceExtra, s.serviceExtra
	spec.SuccessQuery, spec.DurationQuery = s.successQuery, s.durationQuery
	if s.target != nil {
		spec.TargetRef = s.target.ref
	}
	return spec
}

// objectIn is an object and its resource; namespaced when the object has a namespace.
type objectIn struct {
	gvr schema.GroupVersionResource
	obj *unstructured.Unstructured
}

var (
	apisixRouteResource  = schema.GroupVersionResource{Group: "apisix.apache.org", Version: "v2", Resource: "apisixroutes"}
	gatewayResource      = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}
	gatewayClassResource = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gatewayclasses"}
	glooVirtualService   = schema.GroupVersionResource{Group: "gateway.solo.io", Version: "v1", Resource: "virtualservices"}
	ingressRouteResource = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "ingressroutes"}
	httpProxyResource    = schema.GroupVersionResource{Group: "projectcontour.io", Version: "v1", Resource: "httpproxies"}
	ingressResource      = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}
)

// glooObjects is the user's Gloo VirtualService delegating to the RouteTable the release
// generates (the default mode): the simulator's Gloo traffic enters through it.
func glooObjects(ns string) []objectIn {
	vs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.solo.io/v1",
		"kind":       "VirtualService",
		"metadata":   map[string]any{"name": "podinfo", "namespace": ns},
		"spec": map[string]any{"virtualHost": map[string]any{
			"domains": []any{"app.example.com"},
			"routes": []any{map[string]any{
				"matchers":       []any{map[string]any{"prefix": "/"}},
				"delegateAction": map[string]any{"ref": map[string]any{"name": "podinfo", "namespace": ns}},
			}},
		}},
	}}
	return []objectIn{{glooVirtualService, vs}}
}

// routerSetups covers every weighted router (the mesh registry); blue/green-only routers have
// no weights to shift and are left out.
var routerSetups = map[string]routerSetup{
	"osm":   {},
	"gloo":  {objects: glooObjects},
	"istio": {},
	"apisix": {
		resourceExtra: `route_ref = { api_version = "apisix.apache.org/v2", kind = "ApisixRoute", name = "podinfo" }`,
		objects:       func(ns string) []objectIn { return []objectIn{{apisixRouteResource, userApisixRoute(ns)}} },
	},
	"gatewayapi": {
		serviceExtra: `gateway_refs = [{ name = "public", section_name = "http" }]`,
		objects:      gatewayObjects,
	},
	"linkerd": {},
	"traefik": {objects: traefikObjects},
	"contour": {objects: contourObjects},
	"nginx": {
		resourceExtra: `ingress_ref = { name = "podinfo-web" }`,
		objects:       nginxObjects,
	},
	"skipper": {
		resourceExtra: `ingress_ref = { name = "podinfo" }`,
		objects:       skipperObjects,
	}, "alb": {
		resourceExtra: `ingress_ref = { name = "podinfo" }`,
		objects:       albObjects,
		// The simulator's stand-ins for CloudWatch's per target group ALB metrics.
		successQuery: `sum(rate(alb_requests_total{target_group=~"{{ namespace }}/{{ target }}-canary:.+",code!~"5.."}[{{ interval }}]))` +
			` / sum(rate(alb_requests_total{target_group=~"{{ namespace }}/{{ target }}-canary:.+"}[{{ interval }}])) * 100`,
		durationQuery: `histogram_quantile(0.99, sum(rate(alb_target_response_time_seconds_bucket{target_group=~"{{ namespace }}/{{ target }}-canary:.+"}[{{ interval }}])) by (le)) * 1000`,
	},
	"knative": {target: knativeTarget},
}

// userApisixRoute is the user's route the APISIX router copies: one rule to the apex Service.
func userApisixRoute(ns string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apisix.apache.org/v2",
		"kind":       "ApisixRoute",
		"metadata":   map[string]any{"name": "podinfo", "namespace": ns},
		"spec": map[string]any{"http": []any{map[string]any{
			"name":     "method",
			"match":    map[string]any{"hosts": []any{"app.example.com"}, "methods": []any{"GET"}, "paths": []any{"/*"}},
			"backends": []any{map[string]any{"serviceName": "podinfo", "servicePort": int64(9898)}},
			"plugins": []any{map[string]any{
				"name": "prometheus", "enable": true, "config": map[string]any{"prefer_name": true},
			}},
		}}},
	}}
}

// traefikObjects is the user's IngressRoute naming the TraefikService the release generates:
// the simulator's client sends real requests through the stack's Traefik for its host, which
// is the namespace's own (Traefik serves one route per host, whatever its namespace).
func traefikObjects(ns string) []objectIn {
	ir := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "traefik.io/v1alpha1",
		"kind":       "IngressRoute",
		"metadata":   map[string]any{"name": "podinfo", "namespace": ns},
		"spec": map[string]any{"entryPoints": []any{"web"}, "routes": []any{map[string]any{
			"match": "Host(`" + ns + ".app.example.com`)", "kind": "Rule",
			"services": []any{map[string]any{"name": "podinfo", "kind": "TraefikService"}},
		}}},
	}}
	return []objectIn{{ingressRouteResource, ir}}
}

// contourObjects is the user's root HTTPProxy including the HTTPProxy the release generates:
// the simulator's Contour traffic enters through it.
func contourObjects(ns string) []objectIn {
	root := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "projectcontour.io/v1",
		"kind":       "HTTPProxy",
		"metadata":   map[string]any{"name": "root", "namespace": ns},
		"spec": map[string]any{
			"virtualhost": map[string]any{"fqdn": "app.example.com"},
			"includes":    []any{map[string]any{"name": "podinfo", "namespace": ns}},
		},
	}}
	return []objectIn{{httpProxyResource, root}}
}

// nginxObjects is the user's nginx Ingress to the apex Service, beside which the release writes
// its canary Ingress; the host is the namespace's, since ingress-nginx serves a host and path
// once across namespaces.
func nginxObjects(ns string) []objectIn {
	ing := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.k8s.io/v1",
		"kind":       "Ingress",
		"metadata":   map[string]any{"name": "podinfo-web", "namespace": ns},
		"spec": map[string]any{
			"ingressClassName": "nginx",
			"rules": []any{map[string]any{"host": "app." + ns + ".example.com", "http": map[string]any{"paths": []any{map[string]any{
				"path": "/", "pathType": "Prefix",
				"backend": map[string]any{"service": map[string]any{"name": "podinfo", "port": map[string]any{"number": int64(9898)}}},
			}}}}},
		},
	}}
	return []objectIn{{ingressResource, ing}}
}

// envoyGatewayController is Envoy Gateway's controller name, which the simulator serves
// (meshsim.EnvoyGatewayController; spelled out so the bench builds while the simulator changes).
const envoyGatewayController = "gateway.envoyproxy.io/gatewayclass-controller"

// gatewayObjects are a GatewayClass of the namespace's own, served by the simulator's Envoy
// Gateway, and the Gateway "public" the release's gateway_refs name.
func gatewayObjects(ns string) []objectIn {
	class := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
		"metadata": map[string]any{"name": "eg-" + ns},
		"spec":     map[string]any{"controllerName": envoyGatewayController},
	}}
	gw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"name": "public", "namespace": ns},
		"spec": map[string]any{"gatewayClassName": "eg-" + ns, "listeners": []any{
			map[string]any{"name": "http", "protocol": "HTTP", "port": int64(80)},
		}},
	}}
	return []objectIn{{gatewayClassResource, class}, {gatewayResource, gw}}
}

// weightedRouters lists the routers the routers scenario covers, in the mesh registry's order.
func weightedRouters() []string {
	var out []string
	for _, p := range registry.Names() {
		if _, ok := routerSetups[p]; ok {
			out = append(out, p)
		}
	}
	return out
}

// routers: the rollout scenario once per weighted router (-router-runs times), for
// overhead_ratio_<router>.
func (b *bench) routers(ctx context.Context) error {
	var failed []error
	for _, name := range weightedRouters() {
		if b.opts.routers != "" && !slices.Contains(strings.Split(b.opts.routers, ","), name) {
			continue
		}
		setup := routerSetups[name]
		for i := range b.opts.routerRuns {
			ns := b.cl.namespace("router", name, i)
			ratio, err := b.routerRun(ctx, ns, setup.spec(ns, name), setup)
			if !b.opts.keep {
				if setup.target != nil {
					// Before its namespace, so that no route is left to pods being deleted.
					setup.target.remove(ctx, b.cl, ns)
				}
				b.cl.deleteNamespaces(ctx, ns)
				if setup.objects != nil {
					for _, o := range setup.objects(ns) {
						if o.obj.GetNamespace() == "" {
							_ = b.cl.dyn.Resource(o.gvr).Delete(ctx, o.obj.GetName(), metav1.DeleteOptions{})
						}
					}
				}
			}
			if err != nil {
				progress("router %s run %d failed: %v", name, i+1, err)
				failed = append(failed, fmt.Errorf("%s: %w", name, err))
				break
			}
			b.res.addRouterRatio(name, ratio)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return errors.Join(failed...)
}

// routerRun creates the router's user objects and a release, releases a new version and
// returns the overhead ratio of that apply.
func (b *bench) routerRun(ctx context.Context, ns string, spec releaseSpec, setup routerSetup) (float64, error) {
	if err := b.cl.createNamespaces(ctx, ns); err != nil {
		return 0, err
	}
	if setup.objects != nil {
		for _, o := range setup.objects(ns) {
			var err error
			if o.obj.GetNamespace() == "" {
				_, err = b.cl.dyn.Resource(o.gvr).Create(ctx, o.obj, metav1.CreateOptions{})
			} else {
				_, err = b.cl.dyn.Resource(o.gvr).Namespace(ns).Create(ctx, o.obj, metav1.CreateOptions{})
			}
			if err != nil {
				return 0, fmt.Errorf("creating %s %s: %w", o.obj.GetKind(), o.obj.GetName(), err)
			}
		}
	}
	if setup.target != nil {
		if err := setup.target.create(ctx, b.cl, ns, podinfoImage+imageTag(0)); err != nil {
			return 0, err
		}
	}
	// The rollout scenario's init_s stays its own.
	inits := len(b.res.initS)
	ws, rec, initWall, err := b.initialise(ctx, ns, spec)
	b.res.initS = b.res.initS[:inits]
	if err != nil {
		return 0, err
	}
	if setup.target != nil {
		if err := setup.target.release(ctx, b.cl, ns, podinfoImage+imageTag(1)); err != nil {
			rec.done()
			return 0, err
		}
	}
	at, err := b.attributedApply(ctx, ws, "router-"+spec.Router, []string{ns}, spec.interval(), podinfoImage+imageTag(1), false,
		"apply", "-auto-approve", "-var", "image_tag="+imageTag(1))
	wall := at.wall
	obs := rec.done()
	if err != nil {
		return 0, err
	}
	var canaryWait, primaryWait time.Duration
	if setup.target != nil {
		// Its revision was Ready before the apply, and the promotion starts no pods.
		err = setup.target.promoted(ctx, b.cl, ns)
	} else {
		t := rolloutTimeline(obs, "podinfo", podinfoImage+imageTag(1))
		var err1, err2 error
		canaryWait, err1 = t.canaryWait()
		primaryWait, err2 = t.primaryWait()
		err = errors.Join(err1, err2)
	}
	if err != nil {
		return 0, err
	}
	ratio := overheadRatio(wall, canaryWait, primaryWait, spec.steps(), spec.interval())
	// The drain: the weight 0 line -> the verdict line in the provider's log. A router whose
	// run has no weight 0 line before its verdict (Knative's) has no drain.
	var drain time.Duration
	noDrain := math.NaN()
	if len(at.breakdown) == 1 && !slices.Contains(at.breakdown[0].missing, "verdict line") {
		drain = at.breakdown[0].by[waitDrain]
		b.res.addRouterBreakdown(spec.Router, at.breakdown[0])
		noDrain = overheadRatio(wall-drain, canaryWait, primaryWait, spec.steps(), spec.interval())
		b.res.addRouterRatioNoDrain(spec.Router, noDrain)
	}
	progress("router %s: init %.1fs, apply %.1fs, canary ready in %.1fs, primary ready in %.1fs, drain %.2fs, overhead ratio %.3f (%.3f without the drain)",
		spec.Router, initWall.Seconds(), wall.Seconds(), canaryWait.Seconds(), primaryWait.Seconds(), drain.Seconds(), ratio, noDrain)
	return ratio, nil
}

// skipperObjects is the user's Ingress of class skipper that ingress_ref names: the simulator's
// Skipper traffic enters through it, then through the <ingress>-canary Ingress the release
// generates, whose Weight(100) predicate outweighs it.
func skipperObjects(ns string) []objectIn {
	path := map[string]any{"path": "/", "pathType": "Prefix",
		"backend": map[string]any{"service": map[string]any{"name": "podinfo", "port": map[string]any{"number": int64(9898)}}}}
	ing := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.k8s.io/v1",
		"kind":       "Ingress",
		"metadata":   map[string]any{"name": "podinfo", "namespace": ns},
		"spec": map[string]any{
			"ingressClassName": "skipper",
			"rules":            []any{map[string]any{"host": "app.example.com", "http": map[string]any{"paths": []any{path}}}},
		},
	}}
	return []objectIn{{ingressResource, ing}}
}

// albObjects is the user's Ingress, in IngressGroup bench, sending app.example.com to the apex
// Service: the release generates its weighted Ingress beside it.
func albObjects(ns string) []objectIn {
	ing := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.k8s.io/v1",
		"kind":       "Ingress",
		"metadata": map[string]any{"name": "podinfo", "namespace": ns,
			"annotations": map[string]any{"alb.ingress.kubernetes.io/group.name": "bench"}},
		"spec": map[string]any{
			"ingressClassName": "alb",
			"rules": []any{map[string]any{"host": "app.example.com", "http": map[string]any{"paths": []any{map[string]any{
				"path": "/", "pathType": "Prefix",
				"backend": map[string]any{"service": map[string]any{"name": "podinfo", "port": map[string]any{"number": int64(9898)}}},
			}}}}},
		},
	}}
	return []objectIn{{ingressResource, ing}}
}
