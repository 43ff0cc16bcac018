package meshsim

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// describe renders the resolved routes as "mesh apex -> Kind/name [service=weight ...]" lines.
func describe(routes map[flowKey]*route) string {
	var lines []string
	for k, r := range routes {
		var bs []string
		for _, b := range r.backends {
			target := b.service.Name
			if b.broken != "" {
				target = "(" + b.broken + ")"
			}
			bs = append(bs, fmt.Sprintf("%s=%g", target, b.weight))
		}
		mesh := string(k.mesh)
		if k.tagged {
			mesh += "+ab" // the flow of the requests tagged for A/B testing
		}
		lines = append(lines, fmt.Sprintf("%s %s -> %s/%s [%s]", mesh, k.apex, r.object.Namespace, r.object, strings.Join(bs, " ")))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestResolveRoutes(t *testing.T) {
	delegateTo := func(ref map[string]any) map[string]any {
		return map[string]any{"matchers": []any{map[string]any{"prefix": "/"}}, "delegateAction": ref}
	}
	cases := []struct {
		name string
		objs []runtime.Object
		want string
	}{{
		name: "OSM: the TrafficSplit of the apex",
		objs: []runtime.Object{trafficSplit("podinfo", "podinfo", "podinfo-canary", 10, "podinfo-primary", 90)},
		want: "osm test/podinfo -> test/TrafficSplit/podinfo [podinfo-canary=10 podinfo-primary=90]",
	}, {
		name: "OSM: spec.service given as a DNS name",
		objs: []runtime.Object{trafficSplit("podinfo", "podinfo.test.svc.cluster.local", "podinfo-primary", 100)},
		want: "osm test/podinfo -> test/TrafficSplit/podinfo [podinfo-primary=100]",
	}, {
		name: "APISIX: the user's route alone; a missing weight is 100",
		objs: []runtime.Object{apisixRoute("podinfo", 0, "podinfo", -1)},
		want: "apisix test/podinfo -> test/ApisixRoute/podinfo [podinfo=100]",
	}, {
		name: "APISIX: the generated canary route (priority 10000) wins over the user's",
		objs: []runtime.Object{
			apisixRoute("podinfo", 0, "podinfo", -1),
			apisixRoute("podinfo-podinfo-canary", 10000, "podinfo-primary", 90, "podinfo-canary", 10),
		},
		want: "apisix test/podinfo -> test/ApisixRoute/podinfo-podinfo-canary [podinfo-primary=90 podinfo-canary=10]",
	}, {
		name: "Gloo: VirtualService delegateAction.ref to a RouteTable; a missing weight is 0",
		objs: append(glooUpstreams(),
			virtualService(delegateTo(map[string]any{"ref": map[string]any{"name": "podinfo", "namespace": ns}})),
			routeTable("podinfo", destinations(primaryUpstream, 100, canaryUpstream, -1))),
		want: "gloo test/podinfo -> test/RouteTable/podinfo [podinfo-primary=100 podinfo-canary=0]",
	}, {
		name: "Gloo: deprecated delegateAction {name, namespace}",
		objs: append(glooUpstreams(),
			virtualService(delegateTo(map[string]any{"name": "podinfo", "namespace": ns})),
			routeTable("podinfo", destinations(primaryUpstream, 70, canaryUpstream, 30))),
		want: "gloo test/podinfo -> test/RouteTable/podinfo [podinfo-primary=70 podinfo-canary=30]",
	}, {
		name: "Gloo: routeAction.upstreamGroup",
		objs: append(glooUpstreams(),
			virtualService(map[string]any{"routeAction": map[string]any{"upstreamGroup": map[string]any{"name": "podinfo", "namespace": ns}}}),
			obj("gloo.solo.io/v1", "UpstreamGroup", ns, "podinfo", map[string]any{"destinations": destinations(primaryUpstream, 80, canaryUpstream, 20)})),
		want: "gloo test/podinfo -> test/UpstreamGroup/podinfo [podinfo-primary=80 podinfo-canary=20]",
	}, {
		name: "Gloo: a destination whose Upstream is missing still takes its share",
		objs: []runtime.Object{
			upstream(primaryUpstream, "podinfo-primary"),
			virtualService(delegateTo(map[string]any{"ref": map[string]any{"name": "podinfo", "namespace": ns}})),
			routeTable("podinfo", destinations(primaryUpstream, 50, canaryUpstream, 50)),
		},
		want: "gloo test/podinfo -> test/RouteTable/podinfo [podinfo-primary=50 (Upstream test/test-podinfo-canaryupstream-80 does not exist)=50]",
	}, {
		name: "Gloo: a header-matched (A/B) route does not take plain requests; the next route does",
		objs: append(glooUpstreams(),
			virtualService(delegateTo(map[string]any{"ref": map[string]any{"name": "podinfo", "namespace": ns}})),
			obj("gateway.solo.io/v1", "RouteTable", ns, "podinfo", map[string]any{"routes": []any{
				map[string]any{
					"matchers":    []any{map[string]any{"headers": []any{map[string]any{"name": "x-canary", "value": "insider"}}}},
					"routeAction": map[string]any{"multi": map[string]any{"destinations": destinations(primaryUpstream, -1, canaryUpstream, 100)}},
				},
				map[string]any{"routeAction": map[string]any{"single": map[string]any{"upstream": map[string]any{"name": primaryUpstream, "namespace": ns}}}},
			}})),
		want: "gloo test/podinfo -> test/RouteTable/podinfo [podinfo-primary=1]",
	}, {
		name: "objects no router refers to carry no load",
		objs: []runtime.Object{upstream(primaryUpstream, "podinfo-primary")},
		want: "",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, RouterGVRs, tc.objs...)
			if got := describe(resolveRoutes(f.sim.view())); got != tc.want {
				t.Fatalf("routes:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestMissingCRDsAreSkippedUntilInstalled(t *testing.T) {
	f := newFixture(t, RouterGVRs[:1], objects(podinfoServices(nil), glooUpstreams(), []runtime.Object{
		trafficSplit("podinfo", "podinfo", "podinfo-primary", 100),
		virtualService(map[string]any{"delegateAction": map[string]any{"ref": map[string]any{"name": "podinfo", "namespace": ns}}}),
		routeTable("podinfo", destinations(primaryUpstream, 100, canaryUpstream, -1)),
	})...)
	if got, want := describe(resolveRoutes(f.sim.view())), "osm test/podinfo -> test/TrafficSplit/podinfo [podinfo-primary=100]"; got != want {
		t.Fatalf("before the Gloo CRDs are installed:\n%s\nwant:\n%s", got, want)
	}

	f.install(VirtualServiceGVR, RouteTableGVR, UpstreamGVR, UpstreamGroupGVR)
	f.sim.syncCRDs(f.ctx)
	want := "gloo test/podinfo -> test/RouteTable/podinfo [podinfo-primary=100 podinfo-canary=0]\n" +
		"osm test/podinfo -> test/TrafficSplit/podinfo [podinfo-primary=100]"
	if got := describe(resolveRoutes(f.sim.view())); got != want {
		t.Fatalf("after the Gloo CRDs are installed:\n%s\nwant:\n%s", got, want)
	}
}
