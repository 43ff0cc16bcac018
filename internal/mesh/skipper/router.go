package skipper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Skipper's annotations, and the predicates Flagger puts first in the generated Ingress's.
const (
	AnnotationBackendWeights = "zalando.org/backend-weights"
	AnnotationPredicate      = "zalando.org/skipper-predicate"
	// PredicateWin gives the generated routes more weight than the user's routes for the same
	// host and path, so that Skipper picks them.
	PredicateWin = "Weight(100)"
	// PredicateOff disables the generated routes, leaving the requests to the user's routes.
	PredicateOff = "False()"
)

// annotations not copied from the user's Ingress: they describe that object, not ours.
var skipAnnotations = map[string]bool{"kubectl.kubernetes.io/last-applied-configuration": true}

// skipperRouter leaves the user's Ingress (ingress_ref) untouched and writes, as Flagger's
// Skipper router does, <ingress>-canary: a copy of it in which every path to the apex Service
// leads to <apex>-primary, followed by the same path to <apex>-canary, with the split in
// zalando.org/backend-weights ({"<apex>-canary":c,"<apex>-primary":p}) and Weight(100) first in
// zalando.org/skipper-predicate so that its routes win over the user's.
//
// At canary weight 0 the predicate starts with False() instead: the generated routes are off
// and the user's Ingress serves through the apex Service, which selects the primary's pods.
// Flagger writes False() at every weight write of 0 (so after every promotion and rollback) but
// creates the Ingress with Weight(100); this router keeps the predicate a function of the
// weights alone, which sends the requests to the same pods.
type skipperRouter struct {
	c               router.Clients
	s               router.Spec
	can             router.Capabilities
	primary, canary string
	ingress         string
	// last is the generated Ingress as the API server last returned it (see router.HeldCache).
	last *router.HeldCache
}

func newRouter(c router.Clients, s router.Spec, can router.Capabilities) router.Router {
	r := &skipperRouter{c: c, s: s, can: can, primary: s.Apex + "-primary", canary: s.Apex + "-canary", last: &router.HeldCache{}}
	if o, ok := s.Options.(Options); ok && o.IngressRef != nil {
		r.ingress = o.IngressRef.Name
	}
	return r
}

func (r *skipperRouter) userRef() string {
	return "ingress_ref: Ingress " + r.s.Namespace + "/" + r.ingress
}

// canaryName is the generated Ingress's name.
func (r *skipperRouter) canaryName() string { return r.ingress + "-canary" }

// userIngress reads the user's Ingress, which must send at least one path to the apex Service.
func (r *skipperRouter) userIngress(ctx context.Context) (*unstructured.Unstructured, error) {
	if r.ingress == "" {
		return nil, router.ConfigErrorf("ingress_ref is required for mesh_provider skipper: it names the Ingress whose paths send traffic to Service %s", r.s.Apex)
	}
	ing, err := router.Fetch(ctx, r.c.Dynamic, IngressResource, r.s.Namespace, r.ingress)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", r.userRef(), err)
	}
	if ing == nil {
		return nil, router.ConfigErrorf("%s not found", r.userRef())
	}
	for _, rule := range maps(ing.Object, "spec", "rules") {
		for _, p := range maps(rule, "http", "paths") {
			if serviceName(p) == r.s.Apex {
				return ing, nil
			}
		}
	}
	return nil, router.ConfigErrorf("%s has no http path whose backend is Service %s (the apex Service)", r.userRef(), r.s.Apex)
}

// generatedSpec is the user's Ingress spec with each path to the apex sent to the primary,
// and a copy of it to the canary appended to the rule's paths.
func (r *skipperRouter) generatedSpec(user map[string]any) map[string]any {
	spec := router.DeepCopyMap(user)
	rules, _ := spec["rules"].([]any)
	for _, item := range rules {
		rule, _ := item.(map[string]any)
		http, _ := rule["http"].(map[string]any)
		paths, _ := http["paths"].([]any)
		var canaries []any
		for _, p := range paths {
			pm, _ := p.(map[string]any)
			if serviceName(pm) != r.s.Apex {
				continue
			}
			setServiceName(pm, r.primary)
			c := router.DeepCopyMap(pm)
			setServiceName(c, r.canary)
			canaries = append(canaries, c)
		}
		if len(canaries) > 0 {
			http["paths"] = append(paths, canaries...)
		}
	}
	return spec
}

// object describes the generated Ingress for the user's Ingress: its spec, labels and
// annotations, with the weights' annotations for the split written.
func (r *skipperRouter) object(user *unstructured.Unstructured) router.Managed {
	base := map[string]string{}
	for k, v := range user.GetAnnotations() {
		if !skipAnnotations[k] {
			base[k] = v
		}
	}
	userPredicate := base[AnnotationPredicate]
	annotations := map[string]string{}
	userSpec, _ := user.Object["spec"].(map[string]any)
	m := r.generated()
	m.Labels, m.Annotations = user.GetLabels(), annotations
	// Managed writes Annotations right after it renders the spec for the split it writes
	// (creation and Reconcile alike), so rendering also puts that split's annotations there.
	m.Render = func(w router.Weights) map[string]any {
		clear(annotations)
		for k, v := range base {
			annotations[k] = v
		}
		for k, v := range r.weightAnnotations(w, userPredicate) {
			annotations[k] = v
		}
		return r.generatedSpec(userSpec)
	}
	return m
}

// weightAnnotations are the backend weights of w and the predicate that goes with them, in
// front of the rest of the predicate.
func (r *skipperRouter) weightAnnotations(w router.Weights, predicate string) map[string]string {
	// encoding/json sorts map keys: {"<apex>-canary":c,"<apex>-primary":p}, as Flagger writes it.
	weights, _ := json.Marshal(map[string]int{r.primary: w.Primary, r.canary: w.Canary})
	first := PredicateWin
	if w.Canary == 0 {
		first = PredicateOff
	}
	return map[string]string{AnnotationBackendWeights: string(weights), AnnotationPredicate: withFirst(first, predicate)}
}

// withFirst puts predicate first among the && terms of raw, dropping the terms the router
// writes itself.
func withFirst(predicate, raw string) string {
	terms := []string{predicate}
	for _, t := range strings.Split(raw, "&&") {
		t = strings.TrimSpace(t)
		if t == "" || t == PredicateWin || t == PredicateOff {
			continue
		}
		terms = append(terms, t)
	}
	return strings.Join(terms, " && ")
}

// generated addresses the generated Ingress for reading and writing weights only.
func (r *skipperRouter) generated() router.Managed {
	return router.Managed{
		Dynamic: r.c.Dynamic, Spec: r.s, GVR: IngressResource, Kind: "Ingress",
		Name: r.canaryName(), Namespace: r.s.Namespace, ReadWeights: r.weights, SetWeights: r.setWeights,
		Provider: "skipper", Can: r.can, Last: r.last,
	}
}

func (r *skipperRouter) Reconcile(ctx context.Context) error {
	user, err := r.userIngress(ctx)
	if err != nil {
		return err
	}
	return r.object(user).Reconcile(ctx)
}

// SetRoutes rewrites the annotations of the generated Ingress alone, without reading the user's
// Ingress, so that a rollback still works if that Ingress changed or went away.
func (r *skipperRouter) SetRoutes(ctx context.Context, w router.Weights) error {
	return r.generated().SetRoutes(ctx, w)
}

// setWeights puts w's annotations onto the live generated Ingress.
func (r *skipperRouter) setWeights(live *unstructured.Unstructured, w router.Weights) (bool, error) {
	annotations, changed := router.MergeStrings(live.GetAnnotations(), r.weightAnnotations(w, live.GetAnnotations()[AnnotationPredicate]))
	if changed {
		live.SetAnnotations(annotations)
	}
	return changed, nil
}

func (r *skipperRouter) GetRoutes(ctx context.Context) (router.Weights, error) {
	return r.generated().GetRoutes(ctx)
}

// weights reads zalando.org/backend-weights. Skipper treats weights as ratios, but this router
// (like Flagger) writes whole percents summing to 100, and reads nothing else.
func (r *skipperRouter) weights(obj *unstructured.Unstructured) (router.Weights, error) {
	raw, ok := obj.GetAnnotations()[AnnotationBackendWeights]
	if !ok {
		return router.Weights{}, fmt.Errorf("no annotation %s", AnnotationBackendWeights)
	}
	var weights map[string]float64
	if err := json.Unmarshal([]byte(raw), &weights); err != nil {
		return router.Weights{}, fmt.Errorf("annotation %s is not a JSON object of weights: %v", AnnotationBackendWeights, err)
	}
	side := func(name string) (int, error) {
		v, ok := weights[name]
		if !ok || v != float64(int(v)) || v < 0 || v > 100 {
			return 0, fmt.Errorf("annotation %s %s has no whole weight 0..100 for %s", AnnotationBackendWeights, raw, name)
		}
		return int(v), nil
	}
	p, err := side(r.primary)
	if err != nil {
		return router.Weights{}, err
	}
	c, err := side(r.canary)
	if err != nil {
		return router.Weights{}, err
	}
	return router.Weights{Primary: p, Canary: c}, nil
}

// Drift compares the generated Ingress with the copy of the user's Ingress Reconcile would
// write: its rules and the annotations copied from it.
func (r *skipperRouter) Drift(ctx context.Context) ([]string, error) {
	user, err := r.userIngress(ctx)
	var cfg *router.ConfigError
	if errors.As(err, &cfg) {
		return []string{cfg.Error()}, nil
	}
	if err != nil {
		return nil, err
	}
	m := r.object(user)
	source := r.s.Namespace + "/" + r.ingress
	out, err := m.Drift(ctx, func(want, live map[string]any) []string {
		var out []string
		for _, key := range router.DifferingKeys(want, live) {
			out = append(out, fmt.Sprintf("spec.%s differs from the copy of ingress_ref %s", key, source))
		}
		return out
	})
	if err != nil || len(out) > 0 {
		return out, err
	}
	// The spec matches, so the object exists and is ours; m.Drift rendered the annotations for
	// the live split.
	live, err := router.Fetch(ctx, r.c.Dynamic, IngressResource, r.s.Namespace, r.canaryName())
	if err != nil || live == nil {
		return out, err
	}
	have := live.GetAnnotations()
	var keys []string
	for k, v := range m.Annotations {
		if have[k] != v {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s: annotation %s differs from the one generated from ingress_ref %s", m.Ref(), k, source))
	}
	return out, nil
}

func (r *skipperRouter) Finalize(ctx context.Context) error {
	if r.ingress == "" {
		return nil
	}
	return router.DeleteOwned(ctx, r.c.Dynamic, IngressResource, r.s.Namespace, r.canaryName(), r.s)
}

func (r *skipperRouter) Warnings(context.Context) []string { return nil }

// serviceName is the Service an Ingress path's backend names ("" for a resource backend).
func serviceName(path map[string]any) string {
	name, _, _ := unstructured.NestedString(path, "backend", "service", "name")
	return name
}

func setServiceName(path map[string]any, name string) {
	_ = unstructured.SetNestedField(path, name, "backend", "service", "name")
}

func maps(obj map[string]any, fields ...string) []map[string]any {
	raw, _, _ := unstructured.NestedFieldNoCopy(obj, fields...)
	list, _ := raw.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, item := range list {
		if m, ok := item.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
