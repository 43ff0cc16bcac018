package meshsim

import (
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// A/B test traffic (see the package comment). The annotations go on the apex Service.
const (
	// AnnotationABHeader lists the headers a tagged request carries: "name=value" pairs
	// separated by commas, for example "x-canary=insider".
	AnnotationABHeader = "sim.canary-release.dev/ab-header"
	// AnnotationABQuery lists the query parameters a tagged request carries, in the same form.
	AnnotationABQuery = "sim.canary-release.dev/ab-query"
	// AnnotationABShare is the share of the apex's requests that are tagged, 0..1.
	AnnotationABShare = "sim.canary-release.dev/ab-share"

	DefaultABShare = 0.5
)

// request is what the routing can see of one request besides host, path and method (always
// GET): its headers (names in lower case) and query parameters. The plain request carries none.
type request struct {
	headers, query map[string]string
}

// requestMatch is a route's condition on the request; nil takes every request.
type requestMatch func(request) bool

func (m requestMatch) takes(req request) bool { return m == nil || m(req) }

// both is the condition of a route reached through another: a Gloo route delegated to.
func both(a, b requestMatch) requestMatch {
	if a == nil || b == nil {
		if a == nil {
			return b
		}
		return a
	}
	return func(req request) bool { return a(req) && b(req) }
}

// abRequest is the tagged request of an apex, or false when its Service asks for none.
func (v *view) abRequest(apex types.NamespacedName) (request, bool) {
	svc, err := v.services.Services(apex.Namespace).Get(apex.Name)
	if err != nil {
		return request{}, false
	}
	h, hasH := svc.Annotations[AnnotationABHeader]
	q, hasQ := svc.Annotations[AnnotationABQuery]
	if !hasH && !hasQ {
		return request{}, false
	}
	return request{headers: pairs(h, true), query: pairs(q, false)}, true
}

// requestOf is the request a flow sends; false when the flow does not exist.
func (v *view) requestOf(apex types.NamespacedName, tagged bool) (request, bool) {
	if !tagged {
		return request{}, true
	}
	return v.abRequest(apex)
}

// pairs parses "a=1,b=2"; a name without "=" carries an empty value.
func pairs(s string, lower bool) map[string]string {
	out := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(p), "=")
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if lower {
			name = strings.ToLower(name)
		}
		out[name] = strings.TrimSpace(value)
	}
	return out
}

// flowRPS is the load of one flow: the apex's rps, split between its plain and tagged
// requests when the apex sends tagged ones.
func (s *Simulator) flowRPS(v *view, key flowKey) float64 {
	rps := s.rps(v, key.apex)
	if _, ok := v.abRequest(key.apex); !ok {
		return rps
	}
	share := DefaultABShare
	if svc, err := v.services.Services(key.apex.Namespace).Get(key.apex.Name); err == nil {
		share = s.annotation("Service "+key.apex.String(), svc.Annotations, AnnotationABShare, DefaultABShare, 1)
	}
	if key.tagged {
		return rps * share
	}
	return rps * (1 - share)
}

// apisixExprs is the condition of an ApisixRoute rule's match.exprs, which APISIX ANDs. Header
// and Query subjects are read from the request; other scopes (Cookie, Path, Variable, Body)
// hold nothing the load generator sends, so they compare as empty. An unknown operator matches
// nothing, as the ingress controller would not translate it.
func apisixExprs(rule map[string]any) requestMatch {
	exprs := maps(rule, "match", "exprs")
	if len(exprs) == 0 {
		return nil
	}
	return func(req request) bool {
		for _, e := range exprs {
			name := str(e, "subject", "name")
			var got string
			switch str(e, "subject", "scope") {
			case "Header":
				got = req.headers[strings.ToLower(name)]
			case "Query":
				got = req.query[name]
			}
			if !apisixOp(str(e, "op"), got, str(e, "value"), strs(e, "set")) {
				return false
			}
		}
		return true
	}
}

func apisixOp(op, got, value string, set []string) bool {
	search := func(expr string) bool {
		re, err := regexp.Compile(expr)
		return err == nil && re.MatchString(got)
	}
	switch op {
	case "Equal":
		return got == value
	case "NotEqual":
		return got != value
	case "RegexMatch":
		return search(value)
	case "RegexNotMatch":
		return !search(value)
	case "RegexMatchCaseInsensitive":
		return search("(?i)" + value)
	case "RegexNotMatchCaseInsensitive":
		return !search("(?i)" + value)
	case "In":
		return containsExactly(set, got)
	case "NotIn":
		return !containsExactly(set, got)
	}
	return false
}

func containsExactly(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// glooMatchers is the condition of a Gloo route's matchers (any of them; within one, every
// header and query parameter and the method). Paths are not modelled: the load enters at the
// prefix the user's route delegates. A header or query matcher without value asks for presence;
// regex: true matches the whole value, as Envoy does.
func glooMatchers(rt map[string]any) requestMatch {
	matchers := maps(rt, "matchers")
	if len(matchers) == 0 {
		return nil
	}
	return func(req request) bool {
		for _, m := range matchers {
			if methods := strs(m, "methods"); len(methods) > 0 && !contains(methods, "GET") {
				continue
			}
			if glooValuesMatch(maps(m, "headers"), req.headers, true) && glooValuesMatch(maps(m, "queryParameters"), req.query, false) {
				return true
			}
		}
		return false
	}
}

func glooValuesMatch(conds []map[string]any, have map[string]string, header bool) bool {
	for _, c := range conds {
		name := str(c, "name")
		if header {
			name = strings.ToLower(name)
		}
		got, present := have[name]
		want := str(c, "value")
		ok := present
		switch regex, _, _ := unstructured.NestedBool(c, "regex"); {
		case !present:
		case regex:
			re, err := regexp.Compile("^(?:" + want + ")$")
			ok = err == nil && re.MatchString(got)
		case want != "":
			ok = got == want
		}
		if invert, _, _ := unstructured.NestedBool(c, "invertMatch"); invert {
			ok = !ok
		}
		if !ok {
			return false
		}
	}
	return true
}
