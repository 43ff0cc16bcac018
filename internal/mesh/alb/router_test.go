package alb_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/alb"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

const (
	actionKey   = "alb.ingress.kubernetes.io/actions.podinfo"
	userCond    = `{"field":"http-request-method","httpRequestMethodConfig":{"Values":["GET"]}}`
	insiderCond = `{"field":"http-header","httpHeaderConfig":{"httpHeaderName":"x-canary","values":["insider"]}}`
)

func forwardJSON(primary, canary string) string {
	return `{"type":"forward","forwardConfig":{"targetGroups":[{"serviceName":"podinfo-primary","servicePort":"http","weight":` + primary +
		`},{"serviceName":"podinfo-canary","servicePort":"http","weight":` + canary + `}],"targetGroupStickinessConfig":{"enabled":false}}}`
}

func pathTo(backend string) string {
	return `{"backend":{"service":{"name":"` + backend + `","port":{"name":"use-annotation"}}},"path":"/","pathType":"Prefix"}`
}

// The generated Ingress joins the user's IngressGroup one order below it, copies its
// load-balancer annotations and its conditions on the apex, and sends the apex's path to the
// forward action podinfo; the user's Ingress is left as it was.
func TestALBReconcileShape(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{UserIngress})
	user := routertest.MustJSON(t, routertest.Get(t, c, alb.IngressResource, "test", "podinfo").Object)
	r, _ := New("alb", c, spec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	ing := routertest.Get(t, c, alb.IngressResource, "test", "podinfo-podinfo-canary")
	want := `{"ingressClassName":"alb","rules":[{"host":"app.example.com","http":{"paths":[` + pathTo("podinfo") + `]}}]}`
	if got := routertest.SpecJSON(t, ing); got != want {
		t.Fatalf("spec %s\nwant %s", got, want)
	}
	ann := ing.GetAnnotations()
	for k, v := range map[string]string{
		"alb.ingress.kubernetes.io/group.name":             "demo",
		"alb.ingress.kubernetes.io/group.order":            "9",
		"alb.ingress.kubernetes.io/target-type":            "ip",
		actionKey:                                          forwardJSON("100", "0"),
		"alb.ingress.kubernetes.io/conditions.podinfo":     "[" + userCond + "]",
		"alb.ingress.kubernetes.io/actions.other":          "",
		"kubectl.kubernetes.io/last-applied-configuration": "",
	} {
		if ann[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, ann[k], v)
		}
	}
	if ing.GetLabels()[router.LabelRelease] != "podinfo-release" {
		t.Fatalf("labels %v", ing.GetLabels())
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	routertest.MustDrift(t, r)

	if err := r.SetRoutes(ctx, router.Weights{Primary: 70, Canary: 30}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 70, Canary: 30})
	if got := routertest.Get(t, c, alb.IngressResource, "test", "podinfo-podinfo-canary").GetAnnotations()[actionKey]; got != forwardJSON("70", "30") {
		t.Fatalf("action %s", got)
	}
	// A new run's Reconcile keeps the weights, which live in the annotation it rewrites.
	r, _ = New("alb", c, spec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 70, Canary: 30})
	routertest.MustDrift(t, r)
	if now := routertest.MustJSON(t, routertest.Get(t, c, alb.IngressResource, "test", "podinfo").Object); now != user {
		t.Fatalf("the user's Ingress changed:\n%s\nwas\n%s", now, user)
	}
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if routertest.Exists(t, c, alb.IngressResource, "test", "podinfo-podinfo-canary") || !routertest.Exists(t, c, alb.IngressResource, "test", "podinfo") {
		t.Fatal("Finalize must delete the generated Ingress and only it")
	}
}

// A/B testing: ahead of the path, one path per match entry to an action that forwards to the
// canary alone under the user's conditions and the entry's; the next unmatched split removes them.
func TestALBMatched(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{UserIngress})
	s := spec
	s.Match = []router.Match{
		{Headers: map[string]router.StringMatch{"x-canary": {Exact: "insider"}}},
		{Headers: map[string]router.StringMatch{"user-agent": {Prefix: "Mozilla/5"}}, QueryParams: map[string]router.StringMatch{"beta": {Suffix: "on"}}},
	}
	r, _ := New("alb", c, s)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100, Matched: true}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100, Matched: true})
	routertest.MustDrift(t, r)
	ing := routertest.Get(t, c, alb.IngressResource, "test", "podinfo-podinfo-canary")
	want := `{"ingressClassName":"alb","rules":[{"host":"app.example.com","http":{"paths":[` + pathTo("podinfo-ab-0") + `,` + pathTo("podinfo-ab-1") + `,` + pathTo("podinfo") + `]}}]}`
	if got := routertest.SpecJSON(t, ing); got != want {
		t.Fatalf("spec %s\nwant %s", got, want)
	}
	ann := ing.GetAnnotations()
	for k, v := range map[string]string{
		"alb.ingress.kubernetes.io/actions.podinfo-ab-0":    forwardJSON("0", "100"),
		"alb.ingress.kubernetes.io/conditions.podinfo-ab-0": "[" + userCond + "," + insiderCond + "]",
		"alb.ingress.kubernetes.io/conditions.podinfo-ab-1": "[" + userCond + `,{"field":"http-header","httpHeaderConfig":{"httpHeaderName":"user-agent","values":["Mozilla/5*"]}},` +
			`{"field":"query-string","queryStringConfig":{"values":[{"key":"beta","value":"*on"}]}}]`,
	} {
		if ann[k] != v {
			t.Errorf("annotation %s = %s\nwant %s", k, ann[k], v)
		}
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	ing = routertest.Get(t, c, alb.IngressResource, "test", "podinfo-podinfo-canary")
	for k := range ing.GetAnnotations() {
		if k == "alb.ingress.kubernetes.io/actions.podinfo-ab-0" || k == "alb.ingress.kubernetes.io/conditions.podinfo-ab-1" {
			t.Errorf("annotation %s left after A/B testing", k)
		}
	}
	routertest.MustDrift(t, r)
}

// What ALB conditions cannot say is refused before anything is written.
func TestALBRefusesUnwritableMatches(t *testing.T) {
	for _, tc := range []struct {
		m    router.StringMatch
		want string
	}{
		{router.StringMatch{Regex: "in.*"}, `analysis.match[0].headers["x-canary"]: mesh_provider alb cannot match a regex`},
		{router.StringMatch{Exact: "a*b"}, `"a*b" holds * or ?, which ALB conditions read as wildcards`},
	} {
		s := spec
		s.Match = []router.Match{{Headers: map[string]router.StringMatch{"x-canary": tc.m}}}
		r, _ := New("alb", routertest.FakeClients(t, []string{UserIngress}), s)
		routertest.WantErr(t, r.Reconcile(context.Background()), tc.want)
	}
}

// The user's Ingress must exist, share its load balancer through an IngressGroup, leave room
// for a lower group.order and send a path to the apex.
func TestALBUserIngressProblems(t *testing.T) {
	for _, tc := range []struct {
		name, ingress, want string
	}{
		{"missing", "", "ingress_ref: Ingress test/podinfo not found"},
		{"no group", `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: podinfo, namespace: test}
spec: {rules: [{http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: podinfo, port: {number: 80}}}}]}}]}`,
			"has no annotation alb.ingress.kubernetes.io/group.name"},
		{"lowest order", `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: podinfo, namespace: test, annotations: {alb.ingress.kubernetes.io/group.name: demo, alb.ingress.kubernetes.io/group.order: "-1000"}}
spec: {rules: [{http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: podinfo, port: {number: 80}}}}]}}]}`,
			"group.order is -1000, which leaves no lower order"},
		{"no path to the apex", `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: podinfo, namespace: test, annotations: {alb.ingress.kubernetes.io/group.name: demo}}
spec: {rules: [{http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: other, port: {number: 80}}}}]}}]}`,
			"has no rule path whose backend is Service podinfo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []string
			if tc.ingress != "" {
				objs = append(objs, tc.ingress)
			}
			r, _ := New("alb", routertest.FakeClients(t, objs), spec)
			routertest.WantErr(t, r.Reconcile(context.Background()), tc.want)
			drift, err := r.Drift(context.Background())
			if err != nil || len(drift) != 1 || !strings.Contains(drift[0], tc.want) {
				t.Fatalf("drift %q (%v), want one entry saying %q", drift, err, tc.want)
			}
		})
	}
}

// Weights are set on the generated Ingress alone: a rollback works with the user's Ingress gone.
func TestALBSetRoutesWithoutTheUserIngress(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{UserIngress})
	r, _ := New("alb", c, spec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Dynamic.Resource(alb.IngressResource).Namespace("test").Delete(ctx, "podinfo", deleteOptions); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 60, Canary: 40}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 60, Canary: 40})
}

var deleteOptions = metav1.DeleteOptions{}
