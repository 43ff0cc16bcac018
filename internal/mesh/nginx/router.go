package nginx

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// The canary annotations ingress-nginx reads on a canary Ingress (default prefix).
const (
	annotationPrefix    = "nginx.ingress.kubernetes.io/"
	annCanary           = annotationPrefix + "canary"
	annWeight           = annotationPrefix + "canary-weight"
	annWeightTotal      = annotationPrefix + "canary-weight-total"
	annByHeader         = annotationPrefix + "canary-by-header"
	annByHeaderValue    = annotationPrefix + "canary-by-header-value"
	annByHeaderPattern  = annotationPrefix + "canary-by-header-pattern"
	annByCookie         = annotationPrefix + "canary-by-cookie"
	annLastApplied      = "kubectl.kubernetes.io/last-applied-configuration"
	cookieHeader        = "cookie"
	canarySuffix        = "-canary"
	ingressRefAttribute = "ingress_ref"
	matchAttribute      = "analysis.match"
	canaryEnabledValue  = "true"
	defaultWeightTotal  = 100
	ingressKind         = "Ingress"
	providerName        = "nginx"
)

// matchAnnotationKeys are the annotations that route requests to the canary whatever the weight.
var matchAnnotationKeys = []string{annByHeader, annByHeaderValue, annByHeaderPattern, annByCookie}

// nginxRouter leaves the user's Ingress (ingress_ref) untouched and writes a second Ingress,
// <ingress>-canary: a copy of its spec in which the paths that lead to the apex Service lead
// to <apex>-canary, marked canary: "true". ingress-nginx merges it into the user's Ingress's
// locations of the same host and path, and sends them canary-weight percent of the requests,
// or those that carry the canary-by-header (-value, -pattern) header or a canary-by-cookie
// cookie set to "always". Unlike Flagger, which flips canary to "false" at weight 0, the copy
// stays a canary at weight 0: as an ordinary Ingress it would duplicate the user's hosts and
// paths, which ingress-nginx's admission webhook then refuses on the user's next edit, and
// whose oldest wins.
type nginxRouter struct {
	c       router.Clients
	s       router.Spec
	can     router.Capabilities
	ingress string // the user's Ingress
	// last is the canary Ingress as the API server last returned it (see router.HeldCache).
	last *router.HeldCache
}

func newRouter(c router.Clients, s router.Spec, can router.Capabilities) router.Router {
	r := &nginxRouter{c: c, s: s, can: can, last: &router.HeldCache{}}
	if o, ok := s.Options.(Options); ok {
		r.ingress = o.ingressName()
	}
	return r
}

func (r *nginxRouter) userRef() string {
	return fmt.Sprintf("%s: Ingress %s/%s", ingressRefAttribute, r.s.Namespace, r.ingress)
}

func (r *nginxRouter) canaryName() string { return r.ingress + canarySuffix }

// userIngress reads the user's Ingress, which must lead some path to the apex Service and
// must not itself be a canary.
func (r *nginxRouter) userIngress(ctx context.Context) (*unstructured.Unstructured, error) {
	if r.ingress == "" {
		return nil, router.ConfigErrorf("%s is required for mesh_provider nginx: it names the Ingress whose rules send traffic to Service %s",
			ingressRefAttribute, r.s.Apex)
	}
	ing, err := router.Fetch(ctx, r.c.Dynamic, IngressResource, r.s.Namespace, r.ingress)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", r.userRef(), err)
	}
	if ing == nil {
		return nil, router.ConfigErrorf("%s not found", r.userRef())
	}
	if ing.GetAnnotations()[annCanary] == canaryEnabledValue {
		return nil, router.ConfigErrorf("%s is itself a canary Ingress (annotation %s: \"true\"); name the Ingress the canary is to sit beside",
			r.userRef(), annCanary)
	}
	if !leadsTo(ing.Object, r.s.Apex) {
		return nil, router.ConfigErrorf("%s has no rule path whose backend is Service %s (the apex Service)", r.userRef(), r.s.Apex)
	}
	return ing, nil
}

// leadsTo reports an Ingress spec with a rule path whose backend is Service name.
func leadsTo(obj map[string]any, name string) bool {
	found := false
	eachBackendService(obj, func(svc map[string]any) {
		if svc["name"] == name {
			found = true
		}
	})
	return found
}

// eachBackendService calls f with the backend.service of every rule path of an Ingress.
func eachBackendService(obj map[string]any, f func(svc map[string]any)) {
	rules, _, _ := unstructured.NestedSlice(obj, "spec", "rules")
	for _, rule := range rules {
		rm, _ := rule.(map[string]any)
		paths, _, _ := unstructured.NestedSlice(rm, "http", "paths")
		for _, p := range paths {
			pm, _ := p.(map[string]any)
			if svc, _, _ := unstructured.NestedMap(pm, "backend", "service"); svc != nil {
				f(svc)
			}
		}
	}
}

// canarySpec is the user's spec with every rule path that leads to the apex leading to the
// canary Service instead (Flagger's copy: TLS, class and the other paths as they are).
func (r *nginxRouter) canarySpec(user *unstructured.Unstructured) map[string]any {
	spec, _ := router.DeepCopy(user.Object["spec"]).(map[string]any)
	if spec == nil {
		spec = map[string]any{}
	}
	rules, _ := spec["rules"].([]any)
	for _, rule := range rules {
		rm, _ := rule.(map[string]any)
		paths, _, _ := unstructured.NestedFieldNoCopy(rm, "http", "paths")
		list, _ := paths.([]any)
		for _, p := range list {
			pm, _ := p.(map[string]any)
			backend, _ := pm["backend"].(map[string]any)
			if svc, _ := backend["service"].(map[string]any); svc != nil && svc["name"] == r.s.Apex {
				svc["name"] = r.s.Apex + canarySuffix
			}
		}
	}
	return spec
}

// copiedAnnotations are the user's annotations the canary Ingress carries, as Flagger copies
// them: all but ingress-nginx's canary ones and kubectl's record of the user's object; and
// canary: "true".
func copiedAnnotations(user *unstructured.Unstructured) map[string]string {
	out := map[string]string{}
	for k, v := range user.GetAnnotations() {
		if !strings.HasPrefix(k, annCanary) && k != annLastApplied {
			out[k] = v
		}
	}
	out[annCanary] = canaryEnabledValue
	return out
}

// object is the canary Ingress for Reconcile and Drift: it needs the user's Ingress.
func (r *nginxRouter) object(ctx context.Context) (router.Managed, error) {
	user, err := r.userIngress(ctx)
	if err != nil {
		return router.Managed{}, err
	}
	if _, err := matchAnnotations(r.s.Match); err != nil {
		return router.Managed{}, err
	}
	m := r.generated()
	m.Labels, m.Annotations = user.GetLabels(), copiedAnnotations(user)
	spec := r.canarySpec(user)
	m.Render = func(router.Weights) map[string]any { return router.DeepCopyMap(spec) }
	return m, nil
}

// generated addresses the canary Ingress for reading and writing weights only, without the
// user's Ingress, so that a rollback still works if that Ingress changed or went away.
func (r *nginxRouter) generated() router.Managed {
	return router.Managed{
		Dynamic: r.c.Dynamic, Spec: r.s, GVR: IngressResource, Kind: ingressKind,
		Name: r.canaryName(), Namespace: r.s.Namespace, ReadWeights: weights, SetWeights: r.setWeights,
		Provider: providerName, Can: r.can, Last: r.last,
	}
}

// Reconcile creates the canary Ingress, or brings its spec, labels and copied annotations in
// line with the user's Ingress, keeping its weight and match annotations. A new one has
// canary: "true" and no canary-weight, which ingress-nginx reads as 0.
func (r *nginxRouter) Reconcile(ctx context.Context) error {
	m, err := r.object(ctx)
	if err != nil {
		return err
	}
	return m.Reconcile(ctx)
}

func (r *nginxRouter) SetRoutes(ctx context.Context, w router.Weights) error {
	return r.generated().SetRoutes(ctx, w)
}

func (r *nginxRouter) GetRoutes(ctx context.Context) (router.Weights, error) {
	return r.generated().GetRoutes(ctx)
}

// setWeights writes w as the canary annotations: canary-weight always (0 under A/B testing,
// as Flagger leaves it), the header and cookie annotations of analysis.match only when
// w.Matched.
func (r *nginxRouter) setWeights(live *unstructured.Unstructured, w router.Weights) (bool, error) {
	have := live.GetAnnotations()
	want := maps.Clone(have)
	if want == nil {
		want = map[string]string{}
	}
	for _, k := range matchAnnotationKeys {
		delete(want, k)
	}
	want[annCanary] = canaryEnabledValue
	want[annWeight] = strconv.Itoa(w.Canary)
	if w.Matched {
		ab, err := matchAnnotations(r.s.Match)
		if err != nil {
			return false, err
		}
		maps.Copy(want, ab)
	}
	if maps.Equal(have, want) {
		return false, nil
	}
	live.SetAnnotations(want)
	return true, nil
}

// weights reads the split from the canary annotations: canary-weight percent to the canary (0
// when absent, as ingress-nginx reads it), and Matched when a header or cookie sends requests
// to the canary.
func weights(obj *unstructured.Unstructured) (router.Weights, error) {
	a := obj.GetAnnotations()
	if a[annCanary] != canaryEnabledValue {
		return router.Weights{}, fmt.Errorf("annotation %s is %q, not \"true\": ingress-nginx serves it as an ordinary Ingress", annCanary, a[annCanary])
	}
	if total, ok := a[annWeightTotal]; ok && total != strconv.Itoa(defaultWeightTotal) {
		return router.Weights{}, fmt.Errorf("annotation %s is %q: the weights are percentages, out of %d", annWeightTotal, total, defaultWeightTotal)
	}
	canary := 0
	if raw, ok := a[annWeight]; ok {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 || n > 100 {
			return router.Weights{}, fmt.Errorf("annotation %s is %q, not a percentage", annWeight, raw)
		}
		canary = n
	}
	_, byHeader := a[annByHeader]
	_, byCookie := a[annByCookie]
	return router.Weights{Primary: 100 - canary, Canary: canary, Matched: byHeader || byCookie}, nil
}

// matchAnnotations renders analysis.match as ingress-nginx's canary annotations, as Flagger
// does: the header "cookie" names a cookie (canary-by-cookie: requests whose cookie of that
// name is "always" go to the canary), any other header becomes canary-by-header with its exact
// value (canary-by-header-value) or a regular expression (canary-by-header-pattern, searched in
// the value). ingress-nginx holds one of each, so what they cannot say is refused rather than
// dropped, as Flagger drops it.
func matchAnnotations(matches []router.Match) (map[string]string, error) {
	out := map[string]string{}
	for i, m := range matches {
		refuse := func(why string) error {
			return router.ConfigErrorf("%s[%d] cannot be written for ingress-nginx: %s. ingress-nginx routes by one header "+
				"(exact or regex) and one cookie: each entry holds exactly one header and no query_params, one entry at most names a header "+
				"other than \"cookie\", and one at most the header \"cookie\" with exact = the name of a cookie whose value \"always\" "+
				"sends the request to the canary", matchAttribute, i, why)
		}
		if len(m.QueryParams) > 0 {
			return nil, refuse("it has query_params")
		}
		if len(m.Headers) != 1 {
			return nil, refuse(fmt.Sprintf("it has %d headers, which would have to match together", len(m.Headers)))
		}
		name := slices.Collect(maps.Keys(m.Headers))[0]
		sm := m.Headers[name]
		if strings.EqualFold(name, cookieHeader) {
			if _, dup := out[annByCookie]; dup {
				return nil, refuse("another entry already names the cookie")
			}
			if sm.Exact == "" {
				return nil, refuse("the header \"cookie\" needs exact, the cookie's name")
			}
			out[annByCookie] = sm.Exact
			continue
		}
		if _, dup := out[annByHeader]; dup {
			return nil, refuse(fmt.Sprintf("another entry already names the header %q", out[annByHeader]))
		}
		out[annByHeader] = name
		if sm.Exact != "" {
			out[annByHeaderValue] = sm.Exact
		} else {
			out[annByHeaderPattern] = sm.Pattern(false)
		}
	}
	return out, nil
}

func (r *nginxRouter) Drift(ctx context.Context) ([]string, error) {
	m, err := r.object(ctx)
	var cfg *router.ConfigError
	if errors.As(err, &cfg) {
		return []string{cfg.Error()}, nil
	}
	if err != nil {
		return nil, err
	}
	source := r.s.Namespace + "/" + r.ingress
	return m.Drift(ctx, func(want, live map[string]any) []string {
		var out []string
		for _, key := range router.DifferingKeys(want, live) {
			out = append(out, fmt.Sprintf("spec.%s differs from %s Ingress %s", key, ingressRefAttribute, source))
		}
		return out
	})
}

func (r *nginxRouter) Finalize(ctx context.Context) error {
	if r.ingress == "" {
		return nil
	}
	return router.DeleteOwned(ctx, r.c.Dynamic, IngressResource, r.s.Namespace, r.canaryName(), r.s)
}

// Warnings tells at plan time what analysis.match ingress-nginx cannot hold (the apply refuses
// it before any traffic moves).
func (r *nginxRouter) Warnings(context.Context) []string {
	if _, err := matchAnnotations(r.s.Match); err != nil {
		return []string{err.Error()}
	}
	return nil
}
