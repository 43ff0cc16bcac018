package traefik

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// traefikRouter writes the TraefikService <apex>, as Flagger's traefik router does: weighted
// round robin over <apex>-primary and <apex>-canary on the Service port. While the canary is
// mirrored to (at weight 0), the same object becomes a mirroring TraefikService whose main
// service is the primary, so the user's IngressRoute, which names the object, follows.
//
// Both weights are always written, 0 included: Traefik skips a service of weight 0 but reads
// a missing weight as 1, which is why Flagger, whose type omits a 0, drops the canary instead.
type traefikRouter struct {
	obj router.Managed
}

func newRouter(c router.Clients, s router.Spec, can router.Capabilities) router.Router {
	primary, canary := s.Apex+"-primary", s.Apex+"-canary"
	service := func(name string) map[string]any {
		return map[string]any{"name": name, "namespace": s.Namespace, "port": int64(s.Port)}
	}
	r := &traefikRouter{}
	r.obj = router.Managed{
		Dynamic: c.Dynamic, Spec: s, GVR: TraefikServiceResource, Kind: "TraefikService",
		Name: s.Apex, Namespace: s.Namespace, Provider: "traefik", Can: can, Last: &router.HeldCache{}, StampApex: true,
		Render: func(w router.Weights) map[string]any {
			if w.Mirrored {
				mirror := service(canary)
				mirror["percent"] = int64(mirrorPercent(s))
				main := service(primary)
				main["mirrors"] = []any{mirror}
				return map[string]any{"mirroring": main}
			}
			p, c := service(primary), service(canary)
			p["weight"], c["weight"] = int64(w.Primary), int64(w.Canary)
			return map[string]any{"weighted": map[string]any{"services": []any{p, c}}}
		},
		ReadWeights: func(obj *unstructured.Unstructured) (router.Weights, error) {
			if mirroring, ok, _ := unstructured.NestedMap(obj.Object, "spec", "mirroring"); ok {
				mirrors, _, _ := unstructured.NestedSlice(mirroring, "mirrors")
				if mirroring["name"] != primary || !names(mirrors, canary) {
					return router.Weights{}, fmt.Errorf("spec.mirroring must send to %s and mirror to %s", primary, canary)
				}
				return router.Weights{Primary: 100, Mirrored: true}, nil
			}
			services, _, _ := unstructured.NestedSlice(obj.Object, "spec", "weighted", "services")
			p, okP := router.BackendWeight(services, "name", primary)
			c, okC := router.BackendWeight(services, "name", canary)
			if !okP || !okC {
				return router.Weights{}, fmt.Errorf("spec.weighted.services must hold %s and %s with integer weights", primary, canary)
			}
			return router.Weights{Primary: p, Canary: c}, nil
		},
	}
	return r
}

// mirrorPercent is the share of requests mirrored: analysis.mirror_weight, or all of them.
func mirrorPercent(s router.Spec) int {
	if s.MirrorWeight > 0 {
		return s.MirrorWeight
	}
	return 100
}

func names(list []any, name string) bool {
	for _, item := range list {
		if m, _ := item.(map[string]any); m != nil && m["name"] == name {
			return true
		}
	}
	return false
}

func (r *traefikRouter) Reconcile(ctx context.Context) error { return r.obj.Reconcile(ctx) }

func (r *traefikRouter) SetRoutes(ctx context.Context, w router.Weights) error {
	return r.obj.SetRoutes(ctx, w)
}

func (r *traefikRouter) GetRoutes(ctx context.Context) (router.Weights, error) {
	return r.obj.GetRoutes(ctx)
}

func (r *traefikRouter) Drift(ctx context.Context) ([]string, error) { return r.obj.Drift(ctx, nil) }

func (r *traefikRouter) Finalize(ctx context.Context) error {
	return router.DeleteOwned(ctx, r.obj.Dynamic, r.obj.GVR, r.obj.Namespace, r.obj.Name, r.obj.Spec)
}

// Warnings points out that no IngressRoute of the release's namespace sends traffic to the
// TraefikService: until one does, the split moves no user request. IngressRoutes elsewhere
// may name it (cross-namespace references), so this is a hint, and an unreadable list says
// nothing.
func (r *traefikRouter) Warnings(ctx context.Context) []string {
	var list *unstructured.UnstructuredList
	err := router.WithRetry(ctx, func() (err error) {
		list, err = r.obj.Dynamic.Resource(IngressRouteResource).Namespace(r.obj.Namespace).List(ctx, metav1.ListOptions{})
		return err
	})
	if err != nil {
		return nil
	}
	for _, ir := range list.Items {
		if routesTo(ir, r.obj.Namespace, r.obj.Name) {
			return nil
		}
	}
	return []string{fmt.Sprintf("no IngressRoute in namespace %s names TraefikService %s (a route service with kind: TraefikService, name: %s): "+
		"until one does, the canary's weight moves no user traffic", r.obj.Namespace, r.obj.Name, r.obj.Name)}
}

// routesTo reports whether an IngressRoute has a route service naming TraefikService ns/name.
func routesTo(ir unstructured.Unstructured, ns, name string) bool {
	routes, _, _ := unstructured.NestedSlice(ir.Object, "spec", "routes")
	for _, item := range routes {
		route, _ := item.(map[string]any)
		services, _ := route["services"].([]any)
		for _, s := range services {
			svc, _ := s.(map[string]any)
			if svc == nil || svc["kind"] != "TraefikService" || svc["name"] != name {
				continue
			}
			if svcNS, _ := svc["namespace"].(string); svcNS == "" || svcNS == ns {
				return true
			}
		}
	}
	return false
}
