package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// istioService is the base service block of the Istio cases, with extra attributes.
func istioService(extra string) string {
	return `{ port = 9898, target_port = "http"` + extra + ` }`
}

// TestIstioConfigValidation plans Istio settings with the real Terraform CLI: a valid one
// with every setting, and invalid ones whose errors name the attribute and what is allowed.
// No cluster is needed.
func TestIstioConfigValidation(t *testing.T) {
	kubeconfig := offlineKubeconfig(t)
	istio := func(service string) map[string]string {
		return map[string]string{"mesh_provider": `"istio"`, "service": istioService(service)}
	}
	t.Run("every setting", func(t *testing.T) {
		t.Parallel()
		resource.UnitTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{{
				Config: invalidConfig(kubeconfig, istio(`
    gateways = ["istio-system/public-gateway", "mesh"]
    hosts    = ["app.example.com"]
    match    = [{ uri = { prefix = "/api" }, method = { exact = "GET" }, headers = { "x-tenant" = { suffix = ".eu" } } }]
    retries  = { attempts = 3, per_try_timeout = "1s", retry_on = "gateway-error,connect-failure,503" }
    timeout  = "30s"
    headers  = {
      request  = { add = { "x-some-header" = "value" } }
      response = { set = { "x-frame-options" = "DENY" }, remove = ["x-envoy-upstream-service-time"] }
    }
    cors_policy = {
      allow_origins     = [{ exact = "https://example.com" }, { prefix = "https://dev." }]
      allow_methods     = ["GET", "POST"]
      max_age           = "24h"
      allow_credentials = true
    }
    traffic_policy = { tls_mode = "ISTIO_MUTUAL", load_balancer = "LEAST_REQUEST" }`), nil),
				PlanOnly: true, ExpectNonEmptyPlan: true,
			}},
		})
	})
	for _, tc := range []invalidCase{
		{name: "gateways with osm", release: map[string]string{"service": istioService(`, gateways = ["mesh"]`)},
			want: []string{`service.gateways is only used with mesh_provider = "istio", not "osm"`}},
		{name: "retries with osm", release: map[string]string{"service": istioService(`, retries = { attempts = 2 }`)},
			want: []string{`service.retries is only used with mesh_provider = "istio", not "osm"`}},
		{name: "match with osm", release: map[string]string{"service": istioService(`, match = [{ uri = { prefix = "/" } }]`)},
			want: []string{`service.match is only used with mesh_provider = "istio", not "osm"`}},
		{name: "match uri with two forms", release: istio(`, match = [{ uri = { prefix = "/", exact = "/" } }]`),
			want: []string{"service.match[0].uri"}},
		{name: "timeout with osm", release: map[string]string{"service": istioService(`, timeout = "5s"`)},
			want: []string{`service.timeout is only used with mesh_provider = "istio", not "osm"`}},
		{name: "traffic_policy with apisix", release: map[string]string{"mesh_provider": `"apisix"`, "route_ref": `{ name = "podinfo" }`,
			"service": istioService(`, traffic_policy = { tls_mode = "DISABLE" }`)},
			want: []string{`service.traffic_policy is only used with mesh_provider = "istio", not "apisix"`}},
		{name: "gateway not a name", release: istio(`, gateways = ["Public_Gateway"]`),
			want: []string{"service.gateways[0] must be `mesh`, a Gateway name or `<namespace>/<gateway>`", `"Public_Gateway" is not`}},
		{name: "gateways empty", release: istio(`, gateways = []`),
			want: []string{"Attribute service.gateways list must contain at least 1 elements, got: 0"}},
		{name: "timeout not a duration", release: istio(`, timeout = "30"`),
			want: []string{"service.timeout must be a Go duration such as `30s` or `1m30s`, at least 1ms"}},
		{name: "timeout too short", release: istio(`, timeout = "100us"`),
			want: []string{`service.timeout must be at least 1ms; got "100us"`}},
		{name: "per_try_timeout not a duration", release: istio(`, retries = { attempts = 3, per_try_timeout = "one second" }`),
			want: []string{"service.retries.per_try_timeout must be a Go duration"}},
		{name: "retries without attempts", release: istio(`, retries = { per_try_timeout = "1s" }`),
			want: []string{`attribute "attempts" is required`}},
		{name: "negative attempts", release: istio(`, retries = { attempts = -1 }`),
			want: []string{"Attribute service.retries.attempts value must be between 0 and 2147483647, got: -1"}},
		{name: "unknown retry_on", release: istio(`, retries = { attempts = 3, retry_on = "5xx,timeouts" }`),
			want: []string{"service.retries.retry_on must be a comma-separated list of 5xx, gateway-error", `or HTTP status codes (100-599); "timeouts" is not one`}},
		{name: "tls_mode MUTUAL", release: istio(`, traffic_policy = { tls_mode = "MUTUAL" }`),
			want: []string{`Attribute service.traffic_policy.tls_mode value must be one of: ["DISABLE" "SIMPLE" "ISTIO_MUTUAL"], got: "MUTUAL"`}},
		{name: "traffic_policy empty", release: istio(`, traffic_policy = {}`),
			want: []string{"service.traffic_policy must set at least one of tls_mode, load_balancer; it sets none."}},
		{name: "cors origin with two matches", release: istio(`, cors_policy = { allow_origins = [{ exact = "a", prefix = "b" }] }`),
			want: []string{"service.cors_policy.allow_origins[0] must set exactly one of exact, prefix, regex; it sets exact and prefix."}},
		{name: "cors max_age", release: istio(`, cors_policy = { max_age = "1d" }`),
			want: []string{"service.cors_policy.max_age must be a Go duration"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{{
					Config:      invalidConfig(kubeconfig, tc.release, tc.analysis),
					PlanOnly:    true,
					ExpectError: phrasesRegexp(tc.want),
				}},
			})
		})
	}
}
