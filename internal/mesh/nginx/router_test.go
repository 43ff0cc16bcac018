package nginx_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/nginx"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

const prefix = "nginx.ingress.kubernetes.io/"

func annotations(t *testing.T, c router.Clients) map[string]string {
	t.Helper()
	return routertest.Get(t, c, nginx.IngressResource, "test", "podinfo-web-canary").GetAnnotations()
}

// The canary Ingress is the user's, its apex path leading to the canary Service, with the
// user's labels and annotations but ingress-nginx's canary ones and kubectl's record; the
// user's Ingress is not written.
func TestNginxReconcileShape(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{routertest.NginxUserIngress})
	user := routertest.MustJSON(t, routertest.Get(t, c, nginx.IngressResource, "test", "podinfo-web").Object)
	r, err := New("nginx", c, routertest.NginxSpec)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	ing := routertest.Get(t, c, nginx.IngressResource, "test", "podinfo-web-canary")
	want := `{"ingressClassName":"nginx","rules":[{"host":"app.example.com","http":{"paths":[
	  {"backend":{"service":{"name":"podinfo-canary","port":{"number":80}}},"path":"/","pathType":"Prefix"},
	  {"backend":{"service":{"name":"other","port":{"number":80}}},"path":"/other","pathType":"Prefix"}]}}],
	  "tls":[{"hosts":["app.example.com"],"secretName":"app-tls"}]}`
	if got := routertest.SpecJSON(t, ing); got != routertest.CompactJSON(t, want) {
		t.Fatalf("spec %s\nwant %s", got, routertest.CompactJSON(t, want))
	}
	wantAnn := map[string]string{"owner": "alice", prefix + "proxy-body-size": "8m", prefix + "canary": "true"}
	if got := ing.GetAnnotations(); !reflect.DeepEqual(got, wantAnn) {
		t.Fatalf("annotations %v, want %v", got, wantAnn)
	}
	if l := ing.GetLabels(); l["team"] != "web" || l[router.LabelRelease] != "podinfo-release" {
		t.Fatalf("labels %v", l)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	routertest.MustDrift(t, r)

	if err := r.SetRoutes(ctx, router.Weights{Primary: 70, Canary: 30}); err != nil {
		t.Fatal(err)
	}
	if a := annotations(t, c); a[prefix+"canary-weight"] != "30" || a[prefix+"canary"] != "true" {
		t.Fatalf("annotations %v", a)
	}
	r, _ = New("nginx", c, routertest.NginxSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 70, Canary: 30})
	routertest.MustDrift(t, r)
	// Back at 0 it stays a canary (not an ordinary copy of the user's hosts and paths).
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	if a := annotations(t, c); a[prefix+"canary-weight"] != "0" || a[prefix+"canary"] != "true" {
		t.Fatalf("annotations at 100/0 %v", a)
	}
	if got := routertest.MustJSON(t, routertest.Get(t, c, nginx.IngressResource, "test", "podinfo-web").Object); got != user {
		t.Fatalf("the user's Ingress changed:\n%s\nwas\n%s", got, user)
	}
}

// A/B testing: canary-by-header with its value, and canary-by-cookie from the header "cookie",
// as Flagger writes them; the next split without Matched removes them.
func TestNginxMatched(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{routertest.NginxUserIngress})
	s := routertest.NginxSpec
	s.Match = []router.Match{
		{Headers: map[string]router.StringMatch{"x-canary": {Exact: "insider"}}},
		{Headers: map[string]router.StringMatch{"cookie": {Exact: "canary"}}},
	}
	r, _ := New("nginx", c, s)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100, Matched: true}); err != nil {
		t.Fatal(err)
	}
	a := annotations(t, c)
	for k, v := range map[string]string{"canary": "true", "canary-weight": "0", "canary-by-header": "x-canary", "canary-by-header-value": "insider", "canary-by-cookie": "canary"} {
		if a[prefix+k] != v {
			t.Errorf("annotation %s = %q, want %q (all: %v)", k, a[prefix+k], v, a)
		}
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100, Matched: true})
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100, Matched: true})
	routertest.MustDrift(t, r)
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	for k := range annotations(t, c) {
		if strings.HasPrefix(k, prefix+"canary-by") {
			t.Errorf("annotation %s left after A/B testing", k)
		}
	}
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 100, Mirrored: true}), "mirroring (analysis.mirror) is not available with mesh_provider nginx")

	// A regular expression (or a prefix) is canary-by-header-pattern, searched in the value.
	s.Match = []router.Match{{Headers: map[string]router.StringMatch{"user-agent": {Prefix: "Mozilla/5"}}}}
	r, _ = New("nginx", c, s)
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100, Matched: true}); err != nil {
		t.Fatal(err)
	}
	if a := annotations(t, c); a[prefix+"canary-by-header"] != "user-agent" || a[prefix+"canary-by-header-pattern"] != `^Mozilla/5` {
		t.Fatalf("annotations %v", a)
	}
}

// What ingress-nginx cannot hold is refused, before any traffic moves, rather than dropped.
func TestNginxRefusesMatchesItCannotHold(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		match []router.Match
		why   string
	}{
		{[]router.Match{{QueryParams: map[string]router.StringMatch{"beta": {Exact: "on"}}}}, "analysis.match[0] cannot be written for ingress-nginx: it has query_params"},
		{[]router.Match{{Headers: map[string]router.StringMatch{"a": {Exact: "1"}, "b": {Exact: "2"}}}}, "it has 2 headers, which would have to match together"},
		{[]router.Match{{Headers: map[string]router.StringMatch{"a": {Exact: "1"}}}, {Headers: map[string]router.StringMatch{"b": {Exact: "2"}}}},
			`analysis.match[1] cannot be written for ingress-nginx: another entry already names the header "a"`},
		{[]router.Match{{Headers: map[string]router.StringMatch{"Cookie": {Prefix: "x"}}}}, `the header "cookie" needs exact, the cookie's name`},
	} {
		c := routertest.FakeClients(t, []string{routertest.NginxUserIngress})
		s := routertest.NginxSpec
		s.Match = tc.match
		r, _ := New("nginx", c, s)
		routertest.WantErr(t, r.Reconcile(ctx), tc.why)
		if w := r.Warnings(ctx); len(w) != 1 || !strings.Contains(w[0], tc.why) {
			t.Errorf("warnings %v, want %q", w, tc.why)
		}
		if routertest.Exists(t, c, nginx.IngressResource, "test", "podinfo-web-canary") {
			t.Errorf("%v: canary Ingress created", tc.match)
		}
	}
}

func TestNginxErrorsAndFinalize(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, _ := New("nginx", c, routertest.NginxSpec)
	routertest.WantErr(t, r.Reconcile(ctx), "ingress_ref: Ingress test/podinfo-web not found")
	_, err := r.GetRoutes(ctx)
	routertest.WantErr(t, err, "Ingress test/podinfo-web-canary not found")
	routertest.MustDrift(t, r, "ingress_ref: Ingress test/podinfo-web not found")

	c = routertest.FakeClients(t, []string{strings.ReplaceAll(routertest.NginxUserIngress, "name: podinfo,", "name: web,")})
	r, _ = New("nginx", c, routertest.NginxSpec)
	routertest.WantErr(t, r.Reconcile(ctx), "ingress_ref: Ingress test/podinfo-web has no rule path whose backend is Service podinfo (the apex Service)")

	c = routertest.FakeClients(t, []string{routertest.NginxUserIngress})
	r, _ = New("nginx", c, routertest.NginxSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	// A canary Ingress someone turned into an ordinary one, or whose weight is no percentage.
	ing := routertest.Get(t, c, nginx.IngressResource, "test", "podinfo-web-canary")
	a := ing.GetAnnotations()
	a[prefix+"canary"] = "false"
	ing.SetAnnotations(a)
	routertest.Update(t, c, nginx.IngressResource, ing)
	_, err = r.GetRoutes(ctx)
	routertest.WantErr(t, err, `annotation nginx.ingress.kubernetes.io/canary is "false", not "true"`)
	routertest.MustDrift(t, r, `Ingress test/podinfo-web-canary: annotation nginx.ingress.kubernetes.io/canary is "false", not "true": ingress-nginx serves it as an ordinary Ingress`)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	ing = routertest.Get(t, c, nginx.IngressResource, "test", "podinfo-web-canary")
	a = ing.GetAnnotations()
	a[prefix+"canary-weight"] = "150"
	ing.SetAnnotations(a)
	routertest.Update(t, c, nginx.IngressResource, ing)
	_, err = r.GetRoutes(ctx)
	routertest.WantErr(t, err, `annotation nginx.ingress.kubernetes.io/canary-weight is "150", not a percentage`)

	// The spec drifts from the user's when someone edits it.
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	ing = routertest.Get(t, c, nginx.IngressResource, "test", "podinfo-web-canary")
	ing.Object["spec"].(map[string]any)["ingressClassName"] = "other"
	routertest.Update(t, c, nginx.IngressResource, ing)
	routertest.MustDrift(t, r, "Ingress test/podinfo-web-canary: spec.ingressClassName differs from ingress_ref Ingress test/podinfo-web")

	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if routertest.Exists(t, c, nginx.IngressResource, "test", "podinfo-web-canary") {
		t.Fatal("canary Ingress still exists")
	}
	if !routertest.Exists(t, c, nginx.IngressResource, "test", "podinfo-web") {
		t.Fatal("Finalize deleted the user's Ingress")
	}
}

// An Ingress named <ingress>-canary that the release did not write is refused and kept; a
// canary Ingress named in ingress_ref is refused.
func TestNginxRefusesForeignObjects(t *testing.T) {
	ctx := context.Background()
	foreign := strings.ReplaceAll(strings.ReplaceAll(routertest.NginxUserIngress, "name: podinfo-web\n", "name: podinfo-web-canary\n"), "name: podinfo,", "name: podinfo-canary,")
	c := routertest.FakeClients(t, []string{routertest.NginxUserIngress, foreign})
	r, _ := New("nginx", c, routertest.NginxSpec)
	routertest.WantErr(t, r.Reconcile(ctx), "not managed by canary_release")
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if !routertest.Exists(t, c, nginx.IngressResource, "test", "podinfo-web-canary") {
		t.Fatal("Finalize deleted an object it does not own")
	}

	c = routertest.FakeClients(t, []string{strings.ReplaceAll(routertest.NginxUserIngress, "owner: alice\n", "owner: alice\n    nginx.ingress.kubernetes.io/canary: \"true\"\n")})
	r, _ = New("nginx", c, routertest.NginxSpec)
	routertest.WantErr(t, r.Reconcile(ctx), "is itself a canary Ingress")
}

// The built-in queries are Flagger's, with {{ ingress }} bound to ingress_ref's name.
func TestNginxQueriesNameTheIngress(t *testing.T) {
	q := routertest.NginxSpec.Options.(nginx.Options).Queries()
	for _, metric := range []string{"request-success-rate", "request-duration"} {
		if !strings.Contains(q[metric], `namespace="{{ namespace }}",ingress="podinfo-web",canary!=""`) || strings.Contains(q[metric], "{{ ingress }}") {
			t.Errorf("%s: %s", metric, q[metric])
		}
	}
	if q := (nginx.Options{}).Queries(); !strings.Contains(q["request-duration"], `ingress="{{ ingress }}"`) {
		t.Errorf("without ingress_ref: %s", q["request-duration"])
	}
}
