package meshsim

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// cookieSummary words the records as "<plain|tagged> <service> <Set-Cookie> x<count>", sorted.
func cookieSummary(recs []CookieRecord) string {
	var lines []string
	for _, r := range recs {
		kind := "plain"
		if r.Tagged {
			kind = "tagged"
		}
		lines = append(lines, fmt.Sprintf("%s %s %s x%d", kind, r.Service, r.SetCookie, r.Count))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// Istio: a destination's Set-Cookie rides on the answers that destination gives, a route's on
// every answer of the route. Here the canary's answers set the cookie, and the requests
// carrying an ended release's cookie get it expired by the primary.
func TestIstioRecordsSetCookie(t *testing.T) {
	weighted := istioDests("podinfo-primary", 50, "podinfo-canary", 50)
	weighted[1].(map[string]any)["headers"] = map[string]any{"response": map[string]any{"add": map[string]any{"Set-Cookie": "canary=new; Max-Age=60"}}}
	expiring := map[string]any{
		"match":   istioHeaderMatch("cookie", "regex", ".*canary=old.*"),
		"headers": map[string]any{"response": map[string]any{"add": map[string]any{"Set-Cookie": "canary=old; Max-Age=-1"}}},
		"route":   istioDests("podinfo-primary", 100, "podinfo-canary", 0),
	}
	f := newFixture(t, RouterGVRs, objects(
		podinfoServices(map[string]string{AnnotationABHeader: "cookie=canary=old", AnnotationABShare: "0.5"}),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil),
		flaggerIstioRoutes(expiring, map[string]any{"route": weighted}))...)
	f.run(10) // 200 requests: 100 with the old cookie, 100 split 50/50
	want := "plain podinfo-canary canary=new; Max-Age=60 x50\ntagged podinfo-primary canary=old; Max-Age=-1 x100"
	if got := cookieSummary(f.sim.Cookies(ns)); got != want {
		t.Fatalf("cookies:\n%s\nwant:\n%s", got, want)
	}
	if got := f.sim.Cookies("elsewhere"); len(got) != 0 {
		t.Fatalf("cookies of another namespace: %v", got)
	}
}

// Gateway API: a rule's ResponseHeaderModifier applies to all its answers, a backendRef's to
// that backend's.
func TestGatewayAPIRecordsSetCookie(t *testing.T) {
	modifier := func(value string) []any {
		return []any{map[string]any{"type": "ResponseHeaderModifier",
			"responseHeaderModifier": map[string]any{"add": []any{map[string]any{"name": "Set-Cookie", "value": value}}}}}
	}
	weighted := defaultRule(50, 50)
	weighted["backendRefs"].([]any)[1].(map[string]any)["filters"] = modifier("canary=new; Max-Age=60")
	expiring := abRule(map[string]any{"type": "RegularExpression", "name": "Cookie", "value": ".*canary=old.*"})
	expiring["backendRefs"] = backendRefs("podinfo-primary", 100, "podinfo-canary", 0)
	expiring["filters"] = modifier("canary=old; Max-Age=-1")
	f := newFixture(t, RouterGVRs, objects(
		podinfoServices(map[string]string{AnnotationABHeader: "cookie=canary=old", AnnotationABShare: "0.5"}),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil),
		[]runtime.Object{httpRouteRules(gatewayParent("public"), expiring, weighted)})...)
	f.addGateway("public", "")
	f.run(10)
	want := "plain podinfo-canary canary=new; Max-Age=60 x50\ntagged podinfo-primary canary=old; Max-Age=-1 x100"
	if got := cookieSummary(f.sim.Cookies(ns)); got != want {
		t.Fatalf("cookies:\n%s\nwant:\n%s", got, want)
	}
}
