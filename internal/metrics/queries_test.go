package metrics

import (
	"strings"
	"testing"
)

var podinfo = Vars{Name: "podinfo-release", Namespace: "test", Target: "podinfo", Service: "podinfo", Ingress: "podinfo", Route: "podinfo", Interval: "1m"}

func TestRenderOSMExact(t *testing.T) {
	q, ok := Builtin("osm", "request-success-rate")
	if !ok {
		t.Fatal("no osm request-success-rate")
	}
	got, err := Render(q, podinfo)
	if err != nil {
		t.Fatal(err)
	}
	want := `sum(rate(osm_request_total{destination_namespace="test",destination_kind="Deployment",destination_name="podinfo",response_code!~"5.*"}[1m]))` +
		` / sum(rate(osm_request_total{destination_namespace="test",destination_kind="Deployment",destination_name="podinfo"}[1m])) * 100`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}

	q, _ = Builtin("osm", "request-duration")
	got, err = Render(q, podinfo)
	if err != nil {
		t.Fatal(err)
	}
	want = `histogram_quantile(0.99, sum(rate(osm_request_duration_ms_bucket{destination_namespace="test",destination_kind="Deployment",destination_name="podinfo"}[1m])) by (le))`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// Every built-in renders, leaves no template syntax behind and carries Flagger's selector.
func TestRenderBuiltins(t *testing.T) {
	selectors := map[string]string{
		"osm":    `destination_namespace="test",destination_kind="Deployment",destination_name="podinfo"`,
		"apisix": `route=~"test_podinfo-podinfo-canary_.+"`,
		"gloo":   `envoy_cluster_name=~"test-podinfo-canaryupstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+"`,
		"istio":  `reporter="destination",destination_workload_namespace="test",destination_workload=~"podinfo"`,
	}
	for provider, selector := range selectors {
		for _, metric := range []string{"request-success-rate", "request-duration"} {
			q, ok := Builtin(provider, metric)
			if !ok {
				t.Errorf("%s/%s missing", provider, metric)
				continue
			}
			got, err := Render(q, podinfo)
			if err != nil {
				t.Errorf("%s/%s: %v", provider, metric, err)
				continue
			}
			if strings.Contains(got, "{{") || !strings.Contains(got, selector) || !strings.Contains(got, "[1m]") {
				t.Errorf("%s/%s rendered %s", provider, metric, got)
			}
		}
	}
	if q, _ := Builtin("apisix", "request-success-rate"); !strings.Contains(q, `code!~"5.."`) {
		t.Errorf("apisix success rate must exclude 5xx: %s", q)
	}
	if q, _ := Builtin("apisix", "request-duration"); !strings.Contains(q, `type=~"request"`) {
		t.Errorf("apisix duration must select type request: %s", q)
	}
	if q, _ := Builtin("gloo", "request-success-rate"); !strings.Contains(q, `envoy_response_code!~"5.*"`) {
		t.Errorf("gloo success rate must exclude 5xx: %s", q)
	}
	if q, _ := Builtin("istio", "request-success-rate"); !strings.Contains(q, `response_code!~"5.*"`) {
		t.Errorf("istio success rate must exclude 5xx: %s", q)
	}
	if _, ok := Builtin("kuma", "request-success-rate"); ok {
		t.Error("kuma is not a supported provider")
	}
	if _, ok := Builtin("osm", "request-count"); ok {
		t.Error("request-count is not a built-in metric")
	}
}

func TestRenderFunctionsAndVariables(t *testing.T) {
	v := podinfo
	v.Service, v.Ingress, v.Route = "svc", "ing", "rt"
	v.Variables = map[string]string{"destination_kind": "Deployment"}
	got, err := Render(`{{ name }} {{ namespace }} {{ target }} {{ service }} {{ ingress }} {{ route }} {{ interval }} {{ variables.destination_kind }}`, v)
	if err != nil {
		t.Fatal(err)
	}
	if want := "podinfo-release test podinfo svc ing rt 1m Deployment"; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestRenderErrors(t *testing.T) {
	v := podinfo
	v.Variables = map[string]string{"a": "1"}
	if _, err := Render(`x{{ variables.missing }}`, v); err == nil || !strings.Contains(err.Error(), `no entry for key "missing"`) {
		t.Errorf("missing variable: %v", err)
	}
	if _, err := Render(`x{{ variables.missing }}`, podinfo); err == nil {
		t.Error("missing variable with no variables at all was accepted")
	}
	if _, err := Render(`{{ cluster }}`, v); err == nil || !strings.Contains(err.Error(), `"cluster" not defined`) {
		t.Errorf("unknown function: %v", err)
	}
	if _, err := Render(`{{ name `, v); err == nil {
		t.Error("unterminated action accepted")
	}
}
