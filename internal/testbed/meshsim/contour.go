package meshsim

import (
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Contour (projectcontour.io/v1): a root HTTPProxy (one with spec.virtualhost) takes the
// requests of its host; its routes and the routes of the HTTPProxies it includes send them to
// weighted Services.
//
// Modelling choices:
//   - Only root HTTPProxies are entry points; includes are followed (name, and namespace
//     defaulting to the includer's) up to maxDelegation deep. Path prefixes are not modelled:
//     the load is GET /.
//   - A route takes the requests its header and query parameter conditions accept (Contour
//     ANDs them); among the routes that take a request, the one with the most such conditions
//     wins, as Contour orders routes of the same prefix.
//   - Weights: when no service of a route sets one, the split is even; otherwise a service
//     without weight gets 0. Mirror services are ignored.
//   - Metrics are Envoy's cluster stats, as for Gloo, with Contour's cluster stat name
//     <namespace>_<service>_<port>.

// HTTPProxyGVR is Contour's HTTPProxy.
var HTTPProxyGVR = schema.GroupVersionResource{Group: "projectcontour.io", Version: "v1", Resource: "httpproxies"}

// contourCandidates: every route reachable from a root HTTPProxy.
func contourCandidates(v *view) []candidate {
	var out []candidate
	for _, hp := range v.list(HTTPProxyGVR) {
		if mapAt(hp.Object, "spec", "virtualhost") == nil {
			continue
		}
		out = append(out, contourProxy(v, hp, 0)...)
	}
	return out
}

func contourProxy(v *view, hp *unstructured.Unstructured, depth int) []candidate {
	ns := hp.GetNamespace()
	ref := objectRef{Kind: "HTTPProxy", Namespace: ns, Name: hp.GetName()}
	var out []candidate
	for _, rt := range maps(hp.Object, "spec", "routes") {
		r := &route{mesh: MeshContour, object: ref, accepts: contourConditions(rt)}
		r.priority = int64(contourConditionCount(rt))
		services := maps(rt, "services")
		anyWeight := false
		for _, s := range services {
			if _, ok := num(s, "weight"); ok {
				anyWeight = true
			}
		}
		var apexes []types.NamespacedName
		for _, s := range services {
			if mirror, _, _ := unstructured.NestedBool(s, "mirror"); mirror || str(s, "name") == "" {
				continue
			}
			w, ok := num(s, "weight")
			if !anyWeight {
				w = 1
			} else if !ok {
				w = 0
			}
			port, _ := num(s, "port")
			name := str(s, "name")
			r.backends = append(r.backends, backend{
				service: types.NamespacedName{Namespace: ns, Name: name}, weight: w,
				cluster: ns + "_" + name + "_" + strconv.Itoa(int(port)),
			})
			apexes = appendUnique(apexes, types.NamespacedName{Namespace: ns, Name: apexOf(name)})
		}
		r.weighted = anyWeight && len(r.backends) > 1
		if len(apexes) > 0 {
			out = append(out, candidate{apexes: apexes, route: r})
		}
	}
	if depth >= maxDelegation {
		return out
	}
	for _, inc := range maps(hp.Object, "spec", "includes") {
		incNS := str(inc, "namespace")
		if incNS == "" {
			incNS = ns
		}
		if child := v.get(HTTPProxyGVR, incNS, str(inc, "name")); child != nil {
			out = append(out, contourProxy(v, child, depth+1)...)
		}
	}
	return out
}

func contourConditionCount(rt map[string]any) int {
	n := 0
	for _, c := range maps(rt, "conditions") {
		if mapAt(c, "header") != nil || mapAt(c, "queryParameter") != nil {
			n++
		}
	}
	return n
}

// contourConditions is a route's header and query parameter conditions, ANDed; nil when it
// has none.
func contourConditions(rt map[string]any) requestMatch {
	if contourConditionCount(rt) == 0 {
		return nil
	}
	conds := maps(rt, "conditions")
	return func(req request) bool {
		for _, c := range conds {
			if h := mapAt(c, "header"); h != nil {
				got, present := req.headers[strings.ToLower(str(h, "name"))]
				if !contourValue(h, got, present) {
					return false
				}
			}
			if q := mapAt(c, "queryParameter"); q != nil {
				got, present := req.query[str(q, "name")]
				if !contourValue(q, got, present) {
					return false
				}
			}
		}
		return true
	}
}

// contourValue applies one header or query parameter condition; regexes match the whole
// value, as Envoy's do.
func contourValue(c map[string]any, got string, present bool) bool {
	whole := func(re string) bool {
		r, err := regexp.Compile("^(?:" + re + ")$")
		return err == nil && r.MatchString(got)
	}
	switch {
	case has(c, "present"):
		return present
	case has(c, "notpresent"):
		return !present
	case str(c, "exact") != "":
		return present && got == str(c, "exact")
	case str(c, "notexact") != "":
		return got != str(c, "notexact")
	case str(c, "contains") != "":
		return present && strings.Contains(got, str(c, "contains"))
	case str(c, "notcontains") != "":
		return !strings.Contains(got, str(c, "notcontains"))
	case str(c, "prefix") != "":
		return present && strings.HasPrefix(got, str(c, "prefix"))
	case str(c, "suffix") != "":
		return present && strings.HasSuffix(got, str(c, "suffix"))
	case str(c, "regex") != "":
		return present && whole(str(c, "regex"))
	}
	return present
}

func has(c map[string]any, key string) bool {
	b, _, _ := unstructured.NestedBool(c, key)
	return b
}
