package osm

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// osmRouter writes an SMI TrafficSplit (split.smi-spec.io/v1alpha2, the only version OSM
// serves) named after the apex Service, like Flagger's osm provider.
type osmRouter struct {
	obj router.Managed
}

// newRouter is the osm router; can is what the driver declares (a plain split), so it refuses
// every extra of Weights.
func newRouter(c router.Clients, s router.Spec, can router.Capabilities) router.Router {
	r := &osmRouter{}
	root := s.Apex
	if len(s.Hosts) > 0 && s.Hosts[0] != "" {
		root = s.Hosts[0]
	}
	primary, canary := s.Apex+"-primary", s.Apex+"-canary"
	r.obj = router.Managed{
		Dynamic: c.Dynamic, Spec: s, GVR: router.TrafficSplitResource, Kind: "TrafficSplit",
		Name: s.Apex, Namespace: s.Namespace, Provider: "osm", Can: can, Last: &router.HeldCache{},
		Render: func(w router.Weights) map[string]any {
			// The weight is required by the CRD, so 0 is always written (Flagger bug #930).
			return map[string]any{
				"service": root,
				"backends": []any{
					map[string]any{"service": canary, "weight": int64(w.Canary)},
					map[string]any{"service": primary, "weight": int64(w.Primary)},
				},
			}
		},
		ReadWeights: func(obj *unstructured.Unstructured) (router.Weights, error) {
			backends, _, _ := unstructured.NestedSlice(obj.Object, "spec", "backends")
			p, okP := router.BackendWeight(backends, "service", primary)
			c, okC := router.BackendWeight(backends, "service", canary)
			if !okP || !okC {
				return router.Weights{}, fmt.Errorf("spec.backends must hold %s and %s with integer weights", primary, canary)
			}
			return router.Weights{Primary: p, Canary: c}, nil
		},
	}
	return r
}

func (r *osmRouter) Reconcile(ctx context.Context) error { return r.obj.Reconcile(ctx) }

func (r *osmRouter) SetRoutes(ctx context.Context, w router.Weights) error {
	return r.obj.SetRoutes(ctx, w)
}

func (r *osmRouter) GetRoutes(ctx context.Context) (router.Weights, error) {
	return r.obj.GetRoutes(ctx)
}

func (r *osmRouter) Drift(ctx context.Context) ([]string, error) { return r.obj.Drift(ctx, nil) }

func (r *osmRouter) Finalize(ctx context.Context) error {
	return router.DeleteOwned(ctx, r.obj.Dynamic, r.obj.GVR, r.obj.Namespace, r.obj.Name, r.obj.Spec)
}

func (r *osmRouter) Warnings(context.Context) []string { return nil }
