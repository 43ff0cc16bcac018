package metrics

import (
	"strings"
	"testing"
)

func TestRenderHTTPRouteBuiltins(t *testing.T) {
	selectors := map[string][]string{
		"gatewayapi":         {`kubernetes_namespace="test",kubernetes_pod_name=~"podinfo-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"`, "http_request_duration_seconds_"},
		"gatewayapi:envoy":   {`envoy_cluster_name=~"httproute/test/podinfo/rule/[0-9]+"`, "envoy_cluster_upstream_rq"},
		"gatewayapi:istio":   {`reporter="destination",destination_workload_namespace="test",destination_workload=~"podinfo"`, "istio_request"},
		"gatewayapi:linkerd": {`namespace="test",deployment=~"podinfo"`, `direction="inbound"`},
		"linkerd":            {`namespace="test",deployment=~"podinfo"`, `direction="inbound"`},
	}
	for provider, want := range selectors {
		for _, metric := range []string{"request-success-rate", "request-duration"} {
			q, ok := Builtin(provider, metric)
			if !ok {
				t.Errorf("%s/%s missing", provider, metric)
				continue
			}
			got, err := Render(q, podinfo)
			if err != nil {
				t.Fatalf("%s/%s: %v", provider, metric, err)
			}
			for _, w := range want {
				if !strings.Contains(got, w) || strings.Contains(got, "{{") || !strings.Contains(got, "[1m]") {
					t.Errorf("%s/%s rendered %s, want it to contain %s", provider, metric, got, w)
				}
			}
		}
	}
	// The generic duration is the application's histogram in seconds: it must come out in ms.
	if q, _ := Builtin("gatewayapi", "request-duration"); !strings.HasSuffix(q, "by (le)) * 1000") {
		t.Errorf("generic duration not in ms: %s", q)
	}
	if q, _ := Builtin("linkerd", "request-success-rate"); !strings.Contains(q, `classification!="failure"`) {
		t.Errorf("linkerd success rate must exclude failures: %s", q)
	}
}

func TestGatewayBuiltinProvider(t *testing.T) {
	for source, want := range map[string]string{"": "gatewayapi", "generic": "gatewayapi", "envoy": "gatewayapi:envoy", "istio": "gatewayapi:istio", "linkerd": "gatewayapi:linkerd"} {
		if got := GatewayBuiltinProvider(source); got != want {
			t.Errorf("%q: %s, want %s", source, got, want)
		}
	}
	for _, source := range GatewayMetrics {
		if _, ok := Builtin(GatewayBuiltinProvider(source), "request-success-rate"); !ok {
			t.Errorf("no built-in queries for gateway_api.metrics %q", source)
		}
	}
}
