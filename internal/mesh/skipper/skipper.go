// Package skipper is the mesh driver of Skipper: a generated Ingress <ingress>-canary, beside
// the user's, that carries the primary and canary backends split by Skipper's
// zalando.org/backend-weights annotation.
package skipper

import (
	"regexp"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// IngressResource is the object the skipper router reads (the user's) and writes (its own).
var IngressResource = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}

// Driver is the skipper mesh_provider.
type Driver struct{}

// Describe declares weights only: Flagger's Skipper router matches no requests (no A/B
// testing), mirrors nothing and keeps no sessions.
func (Driver) Describe() mesh.Description {
	return mesh.Description{
		Name:         "skipper",
		Capabilities: router.Capabilities{Weighted: true},
		Queries:      queries,
		RBACExample:  "role-skipper.yaml",
		Guide:        "skipper",
		Summary:      "Ingress `<ingress_ref>-canary` with Skipper's backend weights",
	}
}

func (d Driver) NewRouter(c router.Clients, s router.Spec) router.Router {
	return newRouter(c, s, d.Describe().Capabilities)
}

// queries are Flagger's skipper observer: the routes of the canary backend in the generated
// Ingress, in Skipper's route metrics (-route-response-metrics, -serve-route-metrics). The
// success rate reads skipper_response_duration_seconds' +Inf bucket by status code; the
// duration is the mean time to serve the route, in ms (Flagger's, not a p99).
//
// Skipper names an Ingress route kube_<namespace>__<ingress>__<host>__<path>__<backend>
// (kubeew_ for its east-west copy), each part with every non-word character turned into "_",
// and Flagger encodes its variables the same way. Without options the {{ ingress }} variable
// stands for the user's Ingress; a release's options put its encoded name in (Options.Queries).
var queries = withIngress(`{{ template "skipperID" ingress }}`)

// withIngress are the queries for the user's Ingress written as ingress.
func withIngress(ingress string) map[string]string {
	route := `kube(ew)?_{{ template "skipperID" namespace }}__` + ingress + `_canary__.*__{{ template "skipperID" service }}_canary(_[0-9]+)?`
	return map[string]string{
		mesh.MetricSuccessRate: defineID + `sum(rate(skipper_response_duration_seconds_bucket{route=~"` + route + `",code!~"5..",le="+Inf"}[{{ interval }}]))` +
			` / sum(rate(skipper_response_duration_seconds_bucket{route=~"` + route + `",le="+Inf"}[{{ interval }}])) * 100`,
		mesh.MetricDuration: defineID + `sum(rate(skipper_serve_route_duration_seconds_sum{route=~"` + route + `"}[{{ interval }}]))` +
			` / sum(rate(skipper_serve_route_duration_seconds_count{route=~"` + route + `"}[{{ interval }}])) * 1000`,
	}
}

// defineID defines the template "skipperID": its argument with every "-" and "." (the only
// non-word characters a namespace, Ingress or Service name may hold) turned into "_", as
// Skipper and Flagger encode route ids. The query language has no replace function, so it
// walks the bytes, copying each other one as the slice [i, i+1) (i+1 being the length of the
// first i bytes and one more).
const defineID = `{{- define "skipperID" }}{{ range $i := len . }}{{ if or (eq (index $ $i) 45) (eq (index $ $i) 46) }}_` +
	`{{ else }}{{ slice $ $i (len (printf "%s." (slice $ 0 $i))) }}{{ end }}{{ end }}{{ end -}}`

// nonWord is what Skipper replaces with "_" in route ids.
var nonWord = regexp.MustCompile(`\W`)

// encode is a name as Skipper writes it into a route id.
func encode(name string) string { return nonWord.ReplaceAllString(name, "_") }

// MeasuredAtGateway: Skipper reports the generated Ingress's routes at the proxy, which never
// sees the test traffic a blue/green analysis sends straight to the canary Service.
func (Driver) MeasuredAtGateway(mesh.Values) bool { return true }

// Unless: every built-in metric of Skipper is the proxy's.
func (Driver) Unless() string { return "" }
