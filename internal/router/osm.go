package router

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// osmRouter writes an SMI TrafficSplit (split.smi-spec.io/v1alpha2, the only version OSM
// serves) named after the apex Service, like Flagger's osm provider.
type osmRouter struct {
	obj managed
}

// NewOSM is the osm router; it writes no extras, so can only names the mesh.
func NewOSM(c Clients, s Spec, can Capabilities) Router {
	r := &osmRouter{}
	root := s.Apex
	if len(s.Hosts) > 0 && s.Hosts[0] != "" {
		root = s.Hosts[0]
	}
	primary, canary := s.Apex+"-primary", s.Apex+"-canary"
	r.obj = managed{
		c: c.Dynamic, s: s, gvr: TrafficSplitResource, kind: "TrafficSplit",
		name: s.Apex, namespace: s.Namespace, provider: "osm", can: can, last: &heldCache{},
		spec: func(w Weights) map[string]any {
			// The weight is required by the CRD, so 0 is always written (Flagger bug #930).
			return map[string]any{
				"service": root,
				"backends": []any{
					map[string]any{"service": canary, "weight": int64(w.Canary)},
					map[string]any{"service": primary, "weight": int64(w.Primary)},
				},
			}
		},
		weights: func(obj *unstructured.Unstructured) (Weights, error) {
			backends, _, _ := unstructured.NestedSlice(obj.Object, "spec", "backends")
			p, okP := backendWeight(backends, "service", primary)
			c, okC := backendWeight(backends, "service", canary)
			if !okP || !okC {
				return Weights{}, fmt.Errorf("spec.backends must hold %s and %s with integer weights", primary, canary)
			}
			return Weights{Primary: p, Canary: c}, nil
		},
	}
	return r
}

// backendWeight finds the entry of list whose nameKey equals name and returns its weight.
func backendWeight(list []any, nameKey, name string) (int, bool) {
	for _, item := range list {
		m, _ := item.(map[string]any)
		if m == nil || m[nameKey] != name {
			continue
		}
		return asInt(m["weight"])
	}
	return 0, false
}

func (r *osmRouter) Reconcile(ctx context.Context) error { return r.obj.reconcile(ctx) }

func (r *osmRouter) SetRoutes(ctx context.Context, w Weights) error { return r.obj.setRoutes(ctx, w) }

func (r *osmRouter) GetRoutes(ctx context.Context) (Weights, error) { return r.obj.getRoutes(ctx) }

func (r *osmRouter) Drift(ctx context.Context) ([]string, error) { return r.obj.drift(ctx, nil) }

func (r *osmRouter) Finalize(ctx context.Context) error {
	return deleteOwned(ctx, r.obj.c, r.obj.gvr, r.obj.namespace, r.obj.name, r.obj.s)
}

func (r *osmRouter) Warnings(context.Context) []string { return nil }
