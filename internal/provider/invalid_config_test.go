package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// invalidConfigBase is a valid canary_release, one attribute per line so that a case can
// replace or drop it. Its analysis is built from invalidConfigAnalysis the same way.
var invalidConfigBase = []attrLine{
	{"name", `"podinfo"`},
	{"mesh_provider", `"osm"`},
	{"target_ref", `{ name = "podinfo" }`},
	{"service", `{ port = 9898, target_port = "http" }`},
}

var invalidConfigAnalysis = []attrLine{
	{"interval", `"30s"`},
	{"step_weight", `10`},
	{"max_weight", `50`},
	{"metrics", `[{ name = "request-success-rate", interval = "1m", threshold_range = { min = 99 } }]`},
	{"webhooks", `[{ name = "load", url = "http://loadtester.test/", timeout = "5s" }]`},
}

type attrLine struct{ name, value string }

// manifestYAML is a Deployment for the manifest cases, with name and kind replaceable.
func manifestYAML(apiVersion, kind, name, extra string) string {
	return fmt.Sprintf(`<<-EOT
    apiVersion: %s
    kind: %s
    metadata:
      name: %s
    spec:
      selector:
        matchLabels: { app: podinfo }
      template:
        metadata:
          labels: { app: podinfo }
        spec:
          containers:
            - name: podinfo
              image: ghcr.io/stefanprodan/podinfo:6.0.0%s
    EOT`, apiVersion, kind, name, extra)
}

// invalidCase is one configuration that must fail at plan time. release and analysis replace
// (or, with "", drop) attributes of the valid base, or add new ones.
type invalidCase struct {
	name     string
	release  map[string]string
	analysis map[string]string
	// want are phrases that the error must contain, in this order: the attribute path and
	// what is allowed. A space matches any line wrapping of Terraform's output.
	want []string
}

func renderAttrs(base []attrLine, override map[string]string, indent string) string {
	var b strings.Builder
	seen := map[string]bool{}
	write := func(name, value string) {
		if value != "" {
			fmt.Fprintf(&b, "%s%s = %s\n", indent, name, value)
		}
	}
	for _, a := range base {
		seen[a.name] = true
		if v, ok := override[a.name]; ok {
			write(a.name, v)
		} else {
			write(a.name, a.value)
		}
	}
	var extra []string
	for name := range override {
		if !seen[name] {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	for _, name := range extra {
		write(name, override[name])
	}
	return b.String()
}

// invalidConfig is the HCL of a case. The provider reaches no cluster: Configure only builds
// clients from the kubeconfig given, and validation fails before any read.
func invalidConfig(kubeconfig string, release, analysis map[string]string) string {
	return fmt.Sprintf(`terraform {
  required_providers {
    canary = { source = "canary-release/canary" }
  }
}

provider "canary" {
  kubernetes = { config_path = %q }
  prometheus = { address = "http://127.0.0.1:1" }
}

resource "canary_release" "test" {
%s  analysis = {
%s  }
}
`, kubeconfig, renderAttrs(invalidConfigBase, release, "  "), renderAttrs(invalidConfigAnalysis, analysis, "    "))
}

// phrasesRegexp matches the phrases in order; a space in a phrase matches any whitespace,
// including Terraform's wrapping of long diagnostics (and its "│" margin).
func phrasesRegexp(phrases []string) *regexp.Regexp {
	parts := make([]string, len(phrases))
	for i, p := range phrases {
		words := strings.Fields(p)
		for j, w := range words {
			words[j] = regexp.QuoteMeta(w)
		}
		parts[i] = strings.Join(words, `[\s│]+`)
	}
	return regexp.MustCompile(`(?s)` + strings.Join(parts, `.*`))
}

// offlineKubeconfig writes a kubeconfig for an API server that does not exist: enough for
// Configure, so that these tests run without a cluster whatever KUBE_* variables are set.
func offlineKubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{ name: offline, cluster: { server: "https://127.0.0.1:1" } }]
users: [{ name: offline, user: { token: offline } }]
contexts: [{ name: offline, context: { cluster: offline, user: offline } }]
current-context: offline
`
	if err := os.WriteFile(p, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func invalidCases() []invalidCase {
	long := func(n int) string { return strings.Repeat("a", n) }
	apisix := map[string]string{"mesh_provider": `"apisix"`, "route_ref": `{ name = "podinfo" }`}
	istio := map[string]string{"mesh_provider": `"istio"`}
	with := func(base map[string]string, k, v string) map[string]string {
		m := map[string]string{k: v}
		for bk, bv := range base {
			if _, ok := m[bk]; !ok {
				m[bk] = bv
			}
		}
		return m
	}
	metric := func(attrs string) map[string]string {
		return map[string]string{"metrics": "[{ " + attrs + " }]"}
	}
	webhook := func(attrs string) map[string]string {
		return map[string]string{"webhooks": "[{ " + attrs + " }]"}
	}
	manifest := func(m string) map[string]string {
		return map[string]string{"target_ref": "", "manifest": m}
	}
	return []invalidCase{
		// Names of the objects the release creates.
		{name: "release name not a DNS-1123 subdomain", release: map[string]string{"name": `"Podinfo"`},
			want: []string{"name must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')", `"Podinfo" is not`}},
		{name: "release name too long", release: map[string]string{"name": `"` + long(64) + `"`},
			want: []string{"Attribute name string length must be between 1 and 63, got: 64"}},
		{name: "release name empty", release: map[string]string{"name": `""`},
			want: []string{"Attribute name string length must be between 1 and 63, got: 0"}},
		{name: "namespace not a DNS-1123 label", release: map[string]string{"namespace": `"Team_A"`},
			want: []string{"namespace must be a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)"}},
		{name: "target name starts with a digit", release: map[string]string{"target_ref": `{ name = "1podinfo" }`},
			want: []string{"target_ref.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter)", "`<name>-canary`"}},
		{name: "target name with a dot", release: map[string]string{"target_ref": `{ name = "pod.info" }`},
			want: []string{"target_ref.name must be a DNS-1035 label", `"pod.info" is not`}},
		{name: "target name too long for -primary", release: map[string]string{"target_ref": `{ name = "` + long(56) + `" }`},
			want: []string{"target_ref.name must be a DNS-1035 label", "short enough for the Services", `"` + long(56) + `-primary" is not`}},
		{name: "manifest name starts with a digit", release: manifest(manifestYAML("apps/v1", "Deployment", "1podinfo", "")),
			want: []string{`manifest metadata.name "1podinfo" must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter)`}},
		{name: "manifest name too long for -primary", release: manifest(manifestYAML("apps/v1", "Deployment", long(56), "")),
			want: []string{"manifest metadata.name", "must be a DNS-1035 label", "short enough for the Services", `"` + long(56) + `-primary" is not`}},

		// What the release runs: exactly one of target_ref and manifest, and a valid manifest.
		{name: "target_ref and manifest", release: map[string]string{"manifest": manifestYAML("apps/v1", "Deployment", "podinfo", "")},
			want: []string{"2 attributes specified when one (and only one) of [target_ref,manifest] is required"}},
		{name: "neither target_ref nor manifest", release: map[string]string{"target_ref": ""},
			want: []string{"No attribute specified when one (and only one) of [target_ref,manifest] is required"}},
		{name: "manifest not a Deployment", release: manifest(manifestYAML("apps/v1", "StatefulSet", "podinfo", "")),
			want: []string{`manifest must be an apps/v1 Deployment or DaemonSet, got apiVersion "apps/v1" and kind "StatefulSet"`}},
		{name: "manifest of an old API version", release: manifest(manifestYAML("extensions/v1beta1", "Deployment", "podinfo", "")),
			want: []string{`manifest must be an apps/v1 Deployment or DaemonSet, got apiVersion "extensions/v1beta1"`}},
		{name: "manifest without a name", release: manifest(manifestYAML("apps/v1", "Deployment", `""`, "")),
			want: []string{"manifest must set metadata.name"}},
		{name: "manifest not YAML", release: manifest(`"kind: Deployment\n  name: [podinfo"`),
			want: []string{"manifest is not a valid Deployment or DaemonSet in YAML or JSON"}},
		{name: "manifest with an unknown field", release: manifest(manifestYAML("apps/v1", "Deployment", "podinfo", "\n              imagePolicy: Always")),
			want: []string{"manifest is not a valid Deployment in YAML or JSON", `unknown field "imagePolicy"`}},
		{name: "manifest in another namespace", release: manifest(manifestYAML("apps/v1", "Deployment", "podinfo\n      namespace: other", "")),
			want: []string{`manifest metadata.namespace "other" differs from the release's namespace "default"; leave it out or make them equal`}},
		{name: "target_ref kind", release: map[string]string{"target_ref": `{ name = "podinfo", kind = "ReplicaSet" }`},
			want: []string{`Attribute target_ref.kind value must be one of: ["Deployment" "StatefulSet" "DaemonSet" "Service"], got: "ReplicaSet"`}},
		{name: "DaemonSet with autoscaler_ref", release: map[string]string{"target_ref": `{ name = "podinfo", kind = "DaemonSet" }`, "autoscaler_ref": `{ name = "podinfo" }`},
			want: []string{"Autoscalers do not apply to DaemonSets", "autoscaler_ref = ", "remove autoscaler_ref"}},
		{name: "DaemonSet manifest with autoscaler_ref", release: map[string]string{"target_ref": "", "manifest": manifestYAML("apps/v1", "DaemonSet", "podinfo", ""), "autoscaler_ref": `{ name = "podinfo" }`},
			want: []string{"Autoscalers do not apply to DaemonSets", "autoscaler_ref = ", "remove autoscaler_ref"}},
		{name: "DaemonSet weighted without a mesh", release: map[string]string{"target_ref": `{ name = "podinfo", kind = "DaemonSet" }`, "mesh_provider": `"kubernetes"`},
			want: []string{"A DaemonSet without a mesh runs blue/green", `mesh_provider "kubernetes" cannot give a DaemonSet's canary a share of the traffic`, "Set analysis.iterations (blue/green)"}},
		{name: "StatefulSet with another router", release: map[string]string{"target_ref": `{ name = "podinfo", kind = "StatefulSet" }`},
			want: []string{`mesh_provider must be "kubernetes" (not "osm"), since no other router here splits traffic by pod`}},
		{name: "StatefulSet with a pre-rollout webhook", release: map[string]string{"target_ref": `{ name = "podinfo", kind = "StatefulSet" }`, "mesh_provider": `"kubernetes"`},
			analysis: webhook(`name = "smoke", url = "http://loadtester.test/", type = "pre-rollout"`),
			want:     []string{`A StatefulSet release runs rollout, confirm-rollout, confirm-traffic-increase, confirm-promotion webhooks only, not "pre-rollout".`}},
		{name: "StatefulSet with rollback_window", release: map[string]string{"target_ref": `{ name = "podinfo", kind = "StatefulSet" }`, "mesh_provider": `"kubernetes"`, "rollback_window": `{ revisions = 1 }`},
			want: []string{`a StatefulSet is released in place by its partition, and analyses every revision, a revert included: remove rollback_window`}},
		{name: "target_ref api_version", release: map[string]string{"target_ref": `{ name = "podinfo", api_version = "apps/v1beta1" }`},
			want: []string{`Attribute target_ref.api_version value must be one of: ["apps/v1" "serving.knative.dev/v1"], got: "apps/v1beta1"`}},
		{name: "Knative Service with another router", release: map[string]string{"target_ref": `{ name = "podinfo", api_version = "serving.knative.dev/v1", kind = "Service" }`},
			want: []string{"target_ref kind Service needs its mesh_provider", `A target of kind serving.knative.dev/v1 Service is released only by the mesh_provider that owns that kind (mesh_provider = "knative"); mesh_provider "osm" releases an apps/v1 Deployment, StatefulSet or DaemonSet.`}},
		{name: "knative with a Deployment", release: map[string]string{"mesh_provider": `"knative"`},
			want: []string{"mesh_provider knative releases a Service", `mesh_provider "knative" routes between the revisions of a serving.knative.dev/v1 Service: set target_ref = { api_version = "serving.knative.dev/v1", kind = "Service", name = ... } (not apps/v1 Deployment, and not manifest).`}},

		// The mesh and its references.
		{name: "unknown mesh_provider", release: map[string]string{"mesh_provider": `"kuma"`},
			want: []string{`Attribute mesh_provider value must be one of: ["osm" "apisix" "gloo"`, `got: "kuma"`}},
		{name: "alb without ingress_ref", release: map[string]string{"mesh_provider": `"alb"`},
			want: []string{`ingress_ref is required when mesh_provider = "alb": it names the Ingress whose IngressGroup`}},
		{name: "built-in metric on alb", release: map[string]string{"mesh_provider": `"alb"`, "ingress_ref": `{ name = "podinfo" }`},
			want: []string{`analysis.metrics[0]: metric "request-success-rate" has no query, and mesh_provider "alb" has no built-in metrics (see its guide). Set query.`}},
		{name: "apisix without route_ref", release: map[string]string{"mesh_provider": `"apisix"`},
			want: []string{`route_ref is required when mesh_provider = "apisix": it names the ApisixRoute`}},
		{name: "route_ref with osm", release: map[string]string{"route_ref": `{ name = "podinfo" }`},
			want: []string{`route_ref is only used with mesh_provider = "apisix", not "osm"`}},
		{name: "upstream_ref with osm", release: map[string]string{"upstream_ref": `{ name = "podinfo" }`},
			want: []string{`upstream_ref is only used with mesh_provider = "gloo", not "osm"`}},
		{name: "gloo with apisix", release: with(apisix, "gloo", `{ mode = "upstream_group" }`),
			want: []string{`gloo is only used with mesh_provider = "gloo", not "apisix"`}},
		{name: "ingress_ref with osm", release: map[string]string{"ingress_ref": `{ name = "podinfo" }`},
			want: []string{`ingress_ref is only used with mesh_provider "nginx", "skipper" or "alb", not "osm"`}},
		{name: "nginx without ingress_ref", release: map[string]string{"mesh_provider": `"nginx"`},
			want: []string{`ingress_ref is required when mesh_provider = "nginx"`}},
		{name: "ingress_ref api_version", release: map[string]string{"mesh_provider": `"nginx"`, "ingress_ref": `{ name = "podinfo", api_version = "extensions/v1beta1" }`},
			want: []string{`Attribute ingress_ref.api_version value must be one of: ["networking.k8s.io/v1"], got: "extensions/v1beta1"`}},
		{name: "route_ref kind", release: with(apisix, "route_ref", `{ name = "podinfo", kind = "Ingress" }`),
			want: []string{`Attribute route_ref.kind value must be one of: ["ApisixRoute"], got: "Ingress"`}},
		{name: "upstream_ref api_version", release: map[string]string{"mesh_provider": `"gloo"`, "upstream_ref": `{ name = "podinfo", api_version = "gloo.solo.io/v2" }`},
			want: []string{`Attribute upstream_ref.api_version value must be one of: ["gloo.solo.io/v1"], got: "gloo.solo.io/v2"`}},
		{name: "gloo mode", release: map[string]string{"mesh_provider": `"gloo"`, "gloo": `{ mode = "virtual_service" }`},
			want: []string{`Attribute gloo.mode value must be one of: ["route_table" "upstream_group"], got: "virtual_service"`}},

		// The Services.
		{name: "port zero", release: map[string]string{"service": `{ port = 0 }`},
			want: []string{"Attribute service.port value must be between 1 and 65535, got: 0"}},
		{name: "port above 65535", release: map[string]string{"service": `{ port = 65536 }`},
			want: []string{"Attribute service.port value must be between 1 and 65535, got: 65536"}},
		{name: "target_port number out of range", release: map[string]string{"service": `{ port = 80, target_port = "70000" }`},
			want: []string{"service.target_port must be a port number from 1 to 65535, such as `8080`, or a container port name", `"70000" is not`}},
		{name: "target_port name not an IANA service name", release: map[string]string{"service": `{ port = 80, target_port = "http_port" }`},
			want: []string{"service.target_port must be a port number from 1 to 65535", "container port name of at most 15 lowercase letters, digits and '-'", `"http_port" is not`}},
		{name: "port_name not a DNS-1123 label", release: map[string]string{"service": `{ port = 80, port_name = "HTTP" }`},
			want: []string{"service.port_name must be a DNS-1123 label (lowercase letters, digits and '-'", `"HTTP" is not`}},

		// Durations.
		{name: "analysis interval zero", analysis: map[string]string{"interval": `"0s"`},
			want: []string{`analysis.interval must be at least 1s; got "0s"`}},
		{name: "analysis interval overflow", analysis: map[string]string{"interval": `"9999999999h"`},
			want: []string{"analysis.interval must be a Go duration such as `30s` or `1m30s`, at least 1s", `got "9999999999h"`}},
		{name: "analysis interval without unit", analysis: map[string]string{"interval": `"60"`},
			want: []string{"analysis.interval must be a Go duration such as `30s` or `1m30s`, at least 1s"}},
		{name: "metric interval zero", analysis: metric(`name = "request-success-rate", interval = "0s", threshold_range = { min = 99 }`),
			want: []string{`analysis.metrics[0].interval must be at least 1s; got "0s"`}},
		{name: "metric interval overflow", analysis: metric(`name = "request-success-rate", interval = "9999999999h", threshold_range = { min = 99 }`),
			want: []string{"analysis.metrics[0].interval must be a PromQL duration such as `30s` or `1m30s`, at least 1s"}},
		{name: "metric interval not a PromQL duration", analysis: metric(`name = "request-success-rate", interval = "1.5m", threshold_range = { min = 99 }`),
			want: []string{"analysis.metrics[0].interval must be a PromQL duration such as `30s` or `1m30s`", `got "1.5m"`}},
		{name: "webhook timeout zero", analysis: webhook(`name = "load", url = "http://loadtester.test/", timeout = "0s"`),
			want: []string{`analysis.webhooks[0].timeout must be at least 1ms; got "0s"`}},
		{name: "webhook timeout overflow", analysis: webhook(`name = "load", url = "http://loadtester.test/", timeout = "9999999999h"`),
			want: []string{"analysis.webhooks[0].timeout must be a Go duration such as `30s` or `1m30s`, at least 1ms"}},

		// Webhooks.
		{name: "webhook URL not http", analysis: webhook(`name = "load", url = "ftp://loadtester.test/"`),
			want: []string{"analysis.webhooks[0].url must be an absolute http:// or https:// URL."}},
		{name: "webhook URL not absolute", analysis: webhook(`name = "load", url = "loadtester.test/hook"`),
			want: []string{"analysis.webhooks[0].url must be an absolute http:// or https:// URL."}},
		{name: "webhook type", analysis: webhook(`name = "load", url = "http://loadtester.test/", type = "pre-rolout"`),
			want: []string{`Attribute analysis.webhooks[0].type value must be one of: ["confirm-rollout" "pre-rollout" "rollout" "confirm-traffic-increase" "confirm-promotion" "post-rollout" "rollback" "event"], got: "pre-rolout"`}},

		// Steps.
		{name: "step_weights descending", analysis: map[string]string{"step_weight": "", "step_weights": "[10, 5, 20]"},
			want: []string{"analysis.step_weights must be strictly ascending, but 5 follows 10."}},
		{name: "step_weights repeated", analysis: map[string]string{"step_weight": "", "step_weights": "[10, 10]"},
			want: []string{"analysis.step_weights must be strictly ascending, but 10 follows 10."}},
		{name: "step_weights above 100", analysis: map[string]string{"step_weight": "", "step_weights": "[10, 101]"},
			want: []string{"Attribute analysis.step_weights[1] value must be between 1 and 100, got: 101"}},
		{name: "step_weights zero", analysis: map[string]string{"step_weight": "", "step_weights": "[0, 10]"},
			want: []string{"Attribute analysis.step_weights[0] value must be between 1 and 100, got: 0"}},
		{name: "step_weights empty", analysis: map[string]string{"step_weight": "", "step_weights": "[]"},
			want: []string{"Attribute analysis.step_weights list must contain at least 1 elements, got: 0"}},
		{name: "step_weight and step_weights", analysis: map[string]string{"step_weights": "[10, 20]"},
			want: []string{"Set exactly one of analysis.step_weight and analysis.step_weights."}},
		{name: "neither step_weight nor step_weights", analysis: map[string]string{"step_weight": ""},
			want: []string{"Set analysis.step_weight (with max_weight) or analysis.step_weights"}},
		{name: "step_weight zero", analysis: map[string]string{"step_weight": "0"},
			want: []string{"Attribute analysis.step_weight value must be between 1 and 100, got: 0"}},
		{name: "step_weight above 100", analysis: map[string]string{"step_weight": "101"},
			want: []string{"Attribute analysis.step_weight value must be between 1 and 100, got: 101"}},
		// Terraform drops a key it does not know inside an object without a word (hashicorp/terraform#33570).
		{name: "camelCase maxWeight leaves max_weight unset", analysis: map[string]string{"max_weight": "", "maxWeight": "30"},
			want: []string{"analysis.step_weight needs analysis.max_weight", "a misspelled or camelCase maxWeight would otherwise send the canary up to 100%"}},
		{name: "max_weight above 100", analysis: map[string]string{"max_weight": "101"},
			want: []string{"Attribute analysis.max_weight value must be between 1 and 100, got: 101"}},
		{name: "step_weight_promotion zero", analysis: map[string]string{"step_weight_promotion": "0"},
			want: []string{"Attribute analysis.step_weight_promotion value must be between 1 and 100, got: 0"}},

		// Counters.
		{name: "iterations with step_weight", analysis: map[string]string{"iterations": "10"},
			want: []string{"analysis.iterations selects A/B testing (with match) or blue/green (without); analysis.step_weight and step_weights select a weighted canary. Set one of them."}},
		{name: "mirror on osm", analysis: map[string]string{"mirror": "true"},
			want: []string{`analysis.mirror needs a router that can copy requests to the canary: mesh_provider "istio", "gatewayapi" or "traefik"; not "osm".`}},
		{name: "mirror_weight without mirror", release: istio, analysis: map[string]string{"mirror_weight": "20"},
			want: []string{"analysis.mirror_weight is the percent of requests mirrored: set analysis.mirror = true, or remove mirror_weight."}},
		{name: "mirror with A/B testing", release: istio, analysis: map[string]string{"step_weight": "", "iterations": "3", "mirror": "true", "match": `[{ headers = { "x-canary" = { exact = "insider" } } }]`},
			want: []string{"A/B testing (match) already sends the canary real requests. Remove one of them."}},
		{name: "session_affinity on osm", analysis: map[string]string{"session_affinity": `{ cookie_name = "canary" }`},
			want: []string{`analysis.session_affinity needs a router that can route by cookie: mesh_provider "istio" or "gatewayapi"; not "osm".`}},
		{name: "session_affinity with iterations", release: istio, analysis: map[string]string{"step_weight": "", "iterations": "3", "session_affinity": `{ cookie_name = "canary" }`},
			want: []string{"it works with step_weight or step_weights, not with iterations (A/B testing or blue/green)."}},
		{name: "delegation with hosts", release: with(istio, "service", `{ port = 9898, delegation = true, hosts = ["app.example.com"] }`),
			want: []string{"service.delegation = true makes the VirtualService a delegate, which Istio requires to have no hosts and no gateways: remove service.hosts"}},
		{name: "delegation with gateways", release: with(istio, "service", `{ port = 9898, delegation = true, gateways = ["mesh"] }`),
			want: []string{"service.delegation = true makes the VirtualService a delegate", "remove service.gateways and list them on the root VirtualService"}},
		{name: "delegation with another mesh_provider", release: map[string]string{"service": `{ port = 9898, delegation = true }`},
			want: []string{`service.delegation is only used with mesh_provider = "istio"`}},
		{name: "session_affinity same cookies", release: istio, analysis: map[string]string{"session_affinity": `{ cookie_name = "c", primary_cookie_name = "c" }`},
			want: []string{`analysis.session_affinity.primary_cookie_name must differ from cookie_name (both are "c")`}},
		{name: "session_affinity bad cookie name", release: istio, analysis: map[string]string{"session_affinity": `{ cookie_name = "a=b" }`},
			want: []string{"must be a cookie name: letters, digits"}},
		{name: "session_affinity same_site", release: istio, analysis: map[string]string{"session_affinity": `{ cookie_name = "c", same_site = "strict" }`},
			want: []string{`analysis.session_affinity.same_site value must be one of: ["Strict" "Lax" "None"]`}},
		{name: "weights on kubernetes with an autoscaler", release: map[string]string{"mesh_provider": `"kubernetes"`, "autoscaler_ref": `{ name = "podinfo" }`},
			want: []string{`each step sets the canary's replicas to its share of the primary's Ready pods`, "Remove autoscaler_ref, or use a mesh that splits traffic by weight."}},
		{name: "step_weight_promotion on kubernetes", release: map[string]string{"mesh_provider": `"kubernetes"`}, analysis: map[string]string{"step_weight": "", "iterations": "3", "step_weight_promotion": "50"},
			want: []string{`the traffic cannot return to the primary step by step: remove analysis.step_weight_promotion.`}},
		{name: "A/B testing on kubernetes", release: map[string]string{"mesh_provider": `"kubernetes"`}, analysis: map[string]string{"step_weight": "", "iterations": "3", "match": `[{ headers = { "x-canary" = { exact = "insider" } } }]`},
			want: []string{`not "kubernetes".`}},
		{name: "match without iterations", analysis: map[string]string{"match": `[{ headers = { "x-canary" = { exact = "insider" } } }]`},
			want: []string{"analysis.match selects A/B testing, which runs analysis.iterations intervals: set iterations."}},
		{name: "A/B testing on osm", analysis: map[string]string{"step_weight": "", "iterations": "3", "match": `[{ headers = { "x-canary" = { exact = "insider" } } }]`},
			want: []string{`analysis.match needs a router that can send matching requests to the canary: mesh_provider "apisix", "gloo", "istio", "gatewayapi", "linkerd", "contour", "nginx" or "alb" (gloo with gloo.mode = "route_table"); not "osm".`}},
		{name: "match with two kinds", analysis: map[string]string{"step_weight": "", "iterations": "3", "match": `[{ headers = { "x-canary" = { exact = "a", prefix = "b" } } }]`},
			want: []string{`must set exactly one of exact, prefix, suffix and regex; it sets 2.`}},
		{name: "match with a bad regex", analysis: map[string]string{"step_weight": "", "iterations": "3", "match": `[{ headers = { "x-canary" = { regex = "(" } } }]`},
			want: []string{`is not a valid regular expression`}},
		{name: "blue/green on apisix built-in metrics", release: apisix, analysis: map[string]string{"step_weight": "", "iterations": "3"},
			want: []string{`Blue/green analyses test traffic sent straight to the canary Service, which the built-in metrics of mesh_provider "apisix"`}},
		{name: "threshold zero", analysis: map[string]string{"threshold": "0"},
			want: []string{"Attribute analysis.threshold value must be at least 1, got: 0"}},
		{name: "max_query_errors zero", analysis: map[string]string{"max_query_errors": "0"},
			want: []string{"Attribute analysis.max_query_errors value must be at least 1, got: 0"}},
		{name: "progress_deadline_seconds zero", release: map[string]string{"progress_deadline_seconds": "0"},
			want: []string{"Attribute progress_deadline_seconds value must be at least 1, got: 0"}},

		// Metrics.
		{name: "metric without threshold_range", analysis: metric(`name = "request-success-rate"`),
			want: []string{`analysis.metrics[0].threshold_range: metric "request-success-rate" needs threshold_range with min, max or both, or a judge.`}},
		{name: "judge with an unknown method", analysis: metric(`name = "request-duration", judge = { method = "t-test" }`),
			want: []string{`analysis.metrics[0].judge.method value must be one of: ["ratio" "mann-whitney"]`}},
		{name: "judge with an unknown direction", analysis: metric(`name = "request-duration", judge = { method = "ratio", direction = "up" }`),
			want: []string{`analysis.metrics[0].judge.direction value must be one of: ["increase" "decrease" "either"]`}},
		{name: "judge max_ratio below 1", analysis: metric(`name = "request-duration", judge = { method = "ratio", max_ratio = 0.8 }`),
			want: []string{`analysis.metrics[0].judge.max_ratio value must be at least 1.000000, got: 0.800000`}},
		{name: "judge with too few samples", analysis: metric(`name = "request-duration", judge = { method = "mann-whitney", samples = 3 }`),
			want: []string{`analysis.metrics[0].judge.samples value must be between 5 and 100, got: 3`}},
		{name: "judge of a query that names no side", analysis: metric(`name = "errors", query = "sum(rate(errors_total[{{ interval }}]))", judge = { method = "ratio" }`),
			want: []string{`analysis.metrics[0].judge: the metric's query renders the same for the canary and the primary, so it cannot compare them.`}},
		{name: "judge of apisix's built-in query", release: apisix, analysis: metric(`name = "request-duration", judge = { method = "ratio" }`),
			want: []string{`analysis.metrics[0].judge: the metric's query renders the same for the canary and the primary`}},
		{name: "metric with an empty threshold_range", analysis: metric(`name = "request-success-rate", threshold_range = {}`),
			want: []string{`analysis.metrics[0].threshold_range: metric "request-success-rate" needs threshold_range with min, max or both, or a judge.`}},
		{name: "threshold_range min above max", analysis: metric(`name = "request-duration", threshold_range = { min = 500, max = 100 }`),
			want: []string{`analysis.metrics[0].threshold_range: metric "request-duration": min (500) is above max (100).`}},
		{name: "unknown built-in metric without query", analysis: metric(`name = "request-count", threshold_range = { min = 1 }`),
			want: []string{`analysis.metrics[0]: metric "request-count" is not built in; built-in metrics are request-success-rate and request-duration. Set query.`}},
		{name: "query that does not parse", analysis: metric(`name = "errors", query = "sum(rate(errors[{{ interval }]))", threshold_range = { max = 1 }`),
			want: []string{"analysis.metrics[0].query must be a PromQL query, as a Go template that uses only the variables `{{ name }}`", "parsing query template"}},
		{name: "query with an unknown variable", analysis: metric(`name = "errors", query = "sum(errors{cluster=\"{{ cluster }}\"})", threshold_range = { max = 1 }`),
			want: []string{"analysis.metrics[0].query must be a PromQL query", "`{{ route }}`, `{{ interval }}` and `{{ side }}`", `function "cluster" not defined`}},
		{name: "query with a variables key", analysis: metric(`name = "errors", query = "sum(errors{kind=\"{{ variables.kind }}\"})", threshold_range = { max = 1 }`),
			want: []string{"analysis.metrics[0].query must be a PromQL query", `no entry for key "kind"`}},
		{name: "query empty", analysis: metric(`name = "errors", query = " ", threshold_range = { max = 1 }`),
			want: []string{"analysis.metrics[0].query must be a PromQL query", "it is empty. Leave query out to use the built-in query of request-success-rate or request-duration."}},
	}
}

// TestInvalidConfigurations plans each invalid configuration with the real Terraform CLI and
// expects an error that names the attribute and says what is allowed. No cluster is needed.
func TestInvalidConfigurations(t *testing.T) {
	kubeconfig := offlineKubeconfig(t)
	t.Run("valid base", func(t *testing.T) {
		t.Parallel()
		resource.UnitTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{{
				Config: invalidConfig(kubeconfig, nil, nil), PlanOnly: true, ExpectNonEmptyPlan: true,
			}},
		})
	})
	cases := invalidCases()
	if len(cases) < 40 {
		t.Fatalf("only %d invalid configurations; issue #10 asks for at least 40", len(cases))
	}
	for _, tc := range cases {
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

// TestMaxWeightWithStepWeightsWarns checks the one setting that is a warning, not an error:
// max_weight is ignored with step_weights. The plan succeeds, and validation warns.
func TestMaxWeightWithStepWeightsWarns(t *testing.T) {
	kubeconfig := offlineKubeconfig(t)
	analysis := map[string]string{"step_weight": "", "step_weights": "[10, 50]", "max_weight": "50"}
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: invalidConfig(kubeconfig, nil, analysis), PlanOnly: true, ExpectNonEmptyPlan: true,
		}},
	})

	// terraform-plugin-testing does not expose warnings: ask the provider directly.
	ctx := context.Background()
	server, err := testAccProtoV6ProviderFactories["canary"]()
	if err != nil {
		t.Fatal(err)
	}
	config, err := json.Marshal(map[string]any{
		"name": "podinfo", "mesh_provider": "osm", "target_ref": map[string]any{"name": "podinfo"},
		"service":  map[string]any{"port": 9898},
		"analysis": map[string]any{"step_weights": []int{10, 50}, "max_weight": 50},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := server.ValidateResourceConfig(ctx, &tfprotov6.ValidateResourceConfigRequest{
		TypeName: "canary_release", Config: &tfprotov6.DynamicValue{JSON: config},
	})
	if err != nil {
		t.Fatal(err)
	}
	var warned bool
	for _, d := range resp.Diagnostics {
		switch {
		case d.Severity == tfprotov6.DiagnosticSeverityError:
			t.Errorf("unexpected error: %s: %s", d.Summary, d.Detail)
		case d.Severity == tfprotov6.DiagnosticSeverityWarning && d.Summary == "max_weight is ignored with step_weights":
			warned = true
			if d.Attribute == nil || d.Attribute.String() != `AttributeName("analysis").AttributeName("max_weight")` {
				t.Errorf("the warning is on %v, want analysis.max_weight", d.Attribute)
			}
			if !strings.Contains(d.Detail, "with analysis.step_weights the last step is the highest weight") {
				t.Errorf("warning detail %q does not say what max_weight does instead", d.Detail)
			}
		}
	}
	if !warned {
		t.Errorf("no warning that max_weight is ignored with step_weights; diagnostics: %v", resp.Diagnostics)
	}
}
