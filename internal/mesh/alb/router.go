package alb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// The AWS Load Balancer Controller's annotations the router reads and writes.
const (
	annotationPrefix = "alb.ingress.kubernetes.io/"
	groupNameKey     = annotationPrefix + "group.name"
	groupOrderKey    = annotationPrefix + "group.order"
	actionsPrefix    = annotationPrefix + "actions."
	conditionsPrefix = annotationPrefix + "conditions."
	// legacyClassKey is the ingress class annotation older Ingresses carry instead of
	// spec.ingressClassName.
	legacyClassKey = "kubernetes.io/ingress.class"
	// useAnnotation is the backend port name that sends a path to the action of the same name.
	useAnnotation = "use-annotation"
	// minGroupOrder is the lowest group.order the controller accepts.
	minGroupOrder = -1000
)

// albRouter leaves the user's Ingress (ingress_ref) untouched and writes a second Ingress,
// <ingress>-<apex>-canary, in the same IngressGroup: a copy of the user's paths to the apex
// Service whose backend is the action <apex> (port name use-annotation), a forward action
// between the target groups of <apex>-primary and <apex>-canary with their weights, as Argo
// Rollouts writes it. Its group.order is one below the user's Ingress's, so that the ALB
// evaluates its rules first. A/B testing puts, ahead of each path, one copy per analysis.match
// entry whose action <apex>-ab-<i> forwards to the canary alone under that entry's conditions.
type albRouter struct {
	c       router.Clients
	s       router.Spec
	can     router.Capabilities
	ingress string
	// matches are the conditions of each analysis.match entry; matchErr says why one cannot
	// be written as ALB conditions.
	matches  [][]any
	matchErr error
	last     *router.HeldCache
}

func newRouter(c router.Clients, s router.Spec, can router.Capabilities) router.Router {
	r := &albRouter{c: c, s: s, can: can, last: &router.HeldCache{}}
	if o, ok := s.Options.(Options); ok && o.IngressRef != nil {
		r.ingress = o.IngressRef.Name
	}
	for i, m := range s.Match {
		conds, err := matchConditions(i, m)
		if err != nil {
			r.matchErr = err
			break
		}
		r.matches = append(r.matches, conds)
	}
	return r
}

func (r *albRouter) primary() string { return r.s.Apex + "-primary" }
func (r *albRouter) canary() string  { return r.s.Apex + "-canary" }

// action is the name of the weighted forward action; abAction that of analysis.match[i]'s.
func (r *albRouter) action() string        { return r.s.Apex }
func (r *albRouter) abAction(i int) string { return fmt.Sprintf("%s-ab-%d", r.s.Apex, i) }
func (r *albRouter) isABAction(name string) bool {
	_, err := strconv.Atoi(strings.TrimPrefix(name, r.s.Apex+"-ab-"))
	return strings.HasPrefix(name, r.s.Apex+"-ab-") && err == nil
}

func (r *albRouter) userRef() string {
	return "ingress_ref: Ingress " + r.s.Namespace + "/" + r.ingress
}

// generatedName is the generated Ingress's name.
func (r *albRouter) generatedName() string { return r.ingress + "-" + r.s.Apex + "-canary" }

// source is what the generated Ingress copies from the user's.
type source struct {
	// spec holds the rules with the paths to the apex (their backends set by apply), and the
	// user's ingressClassName and tls.
	spec map[string]any
	// annotations are the user's alb.ingress.kubernetes.io ones that describe the load
	// balancer and its target groups (not its actions, conditions or order), the class
	// annotation, and the generated group.order.
	annotations map[string]string
	// conditions are the user's conditions on the apex's paths (conditions.<apex>), which
	// every generated action keeps.
	conditions []any
	// port is the apex backend's port, by number or name; the primary and canary Services
	// have the apex's ports.
	port string
}

// read reads the user's Ingress into what the generated one copies.
func (r *albRouter) read(ctx context.Context) (*source, error) {
	if r.ingress == "" {
		return nil, router.ConfigErrorf("ingress_ref is required for mesh_provider alb: it names the Ingress whose IngressGroup and rule to Service %s the generated Ingress copies", r.s.Apex)
	}
	ing, err := router.Fetch(ctx, r.c.Dynamic, IngressResource, r.s.Namespace, r.ingress)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", r.userRef(), err)
	}
	if ing == nil {
		return nil, router.ConfigErrorf("%s not found", r.userRef())
	}
	ann := ing.GetAnnotations()
	if ann[groupNameKey] == "" {
		return nil, router.ConfigErrorf("%s has no annotation %s: the generated Ingress can only share its load balancer through an IngressGroup",
			r.userRef(), groupNameKey)
	}
	order := 0
	if v, ok := ann[groupOrderKey]; ok {
		if order, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
			return nil, router.ConfigErrorf("%s: annotation %s is %q, not an integer", r.userRef(), groupOrderKey, v)
		}
	}
	if order <= minGroupOrder {
		return nil, router.ConfigErrorf("%s: annotation %s is %d, which leaves no lower order for the generated Ingress, whose rules must come first",
			r.userRef(), groupOrderKey, order)
	}
	src := &source{annotations: map[string]string{groupOrderKey: strconv.Itoa(order - 1)}}
	for k, v := range ann {
		if k == legacyClassKey || strings.HasPrefix(k, annotationPrefix) &&
			!strings.HasPrefix(k, actionsPrefix) && !strings.HasPrefix(k, conditionsPrefix) && k != groupOrderKey {
			src.annotations[k] = v
		}
	}
	if v := ann[conditionsPrefix+r.s.Apex]; v != "" {
		if err := json.Unmarshal([]byte(v), &src.conditions); err != nil {
			return nil, router.ConfigErrorf("%s: annotation %s%s is not a JSON list of conditions: %v", r.userRef(), conditionsPrefix, r.s.Apex, err)
		}
	}
	userSpec, _ := ing.Object["spec"].(map[string]any)
	rules, _, _ := unstructured.NestedSlice(ing.Object, "spec", "rules")
	var out []any
	for _, item := range rules {
		rule, _ := item.(map[string]any)
		paths, _, _ := unstructured.NestedSlice(rule, "http", "paths")
		var kept []any
		for _, p := range paths {
			pm, _ := p.(map[string]any)
			svc, _, _ := unstructured.NestedMap(pm, "backend", "service")
			if svc["name"] != r.s.Apex {
				continue
			}
			if src.port == "" {
				src.port = servicePort(svc)
			}
			copied := map[string]any{}
			for _, k := range []string{"path", "pathType"} {
				if v, ok := pm[k]; ok {
					copied[k] = v
				}
			}
			kept = append(kept, copied)
		}
		if len(kept) == 0 {
			continue
		}
		generated := map[string]any{"http": map[string]any{"paths": kept}}
		if host, ok := rule["host"]; ok {
			generated["host"] = host
		}
		out = append(out, generated)
	}
	if len(out) == 0 {
		return nil, router.ConfigErrorf("%s has no rule path whose backend is Service %s (the apex Service)", r.userRef(), r.s.Apex)
	}
	if src.port == "" {
		src.port = strconv.Itoa(int(r.s.Port))
	}
	src.spec = map[string]any{"rules": out}
	for _, k := range []string{"ingressClassName", "tls"} {
		if v, ok := userSpec[k]; ok {
			src.spec[k] = router.DeepCopy(v)
		}
	}
	return src, nil
}

// servicePort is an Ingress backend's port as an action's servicePort: its number or name.
func servicePort(svc map[string]any) string {
	if n, ok, _ := unstructured.NestedInt64(svc, "port", "number"); ok {
		return strconv.FormatInt(n, 10)
	}
	name, _, _ := unstructured.NestedString(svc, "port", "name")
	return name
}

// managed is the generated Ingress as Reconcile writes it from src. The weights live in
// annotations, which router.Managed writes from Annotations: Render fills that map for the
// weights it renders before Managed reads it (it renders the spec first).
func (r *albRouter) managed(src *source) router.Managed {
	annotations := maps.Clone(src.annotations)
	m := r.generated()
	m.Annotations = annotations
	m.Render = func(w router.Weights) map[string]any {
		spec := router.DeepCopyMap(src.spec)
		ann := maps.Clone(src.annotations)
		r.apply(spec, ann, w, src.port, src.conditions)
		for k := range annotations {
			if _, ok := ann[k]; !ok {
				delete(annotations, k)
			}
		}
		maps.Copy(annotations, ann)
		return spec
	}
	return m
}

// generated addresses the generated Ingress; weights are set on the live object alone, so a
// rollback works whatever became of the user's Ingress.
func (r *albRouter) generated() router.Managed {
	return router.Managed{
		Dynamic: r.c.Dynamic, Spec: r.s, GVR: IngressResource, Kind: "Ingress",
		Name: r.generatedName(), Namespace: r.s.Namespace, Provider: "alb", Can: r.can, Last: r.last,
		ReadWeights: r.weights, SetWeights: r.setWeights,
	}
}

// apply puts w onto a generated spec and its annotations: the weighted action, and the A/B
// paths and actions w.Matched asks for (removing any it does not).
func (r *albRouter) apply(spec map[string]any, ann map[string]string, w router.Weights, port string, userConds []any) {
	for k := range ann {
		if name, ok := strings.CutPrefix(k, actionsPrefix); ok && r.isABAction(name) {
			delete(ann, k)
		}
		if name, ok := strings.CutPrefix(k, conditionsPrefix); ok && r.isABAction(name) {
			delete(ann, k)
		}
	}
	ann[actionsPrefix+r.action()] = forward(r.primary(), w.Primary, r.canary(), w.Canary, port)
	if len(userConds) > 0 {
		ann[conditionsPrefix+r.action()] = mustJSON(userConds)
	}
	rules, _ := spec["rules"].([]any)
	for _, item := range rules {
		rule, _ := item.(map[string]any)
		paths, _, _ := unstructured.NestedSlice(rule, "http", "paths")
		var out []any
		for _, p := range paths {
			pm, _ := p.(map[string]any)
			if r.isABAction(backendName(pm)) {
				continue
			}
			if w.Matched {
				for i := range r.matches {
					out = append(out, withBackend(pm, r.abAction(i)))
				}
			}
			out = append(out, withBackend(pm, r.action()))
		}
		_ = unstructured.SetNestedSlice(rule, out, "http", "paths")
	}
	if !w.Matched {
		return
	}
	for i, conds := range r.matches {
		ann[actionsPrefix+r.abAction(i)] = forward(r.primary(), 0, r.canary(), 100, port)
		all := make([]any, 0, len(userConds)+len(conds))
		for _, c := range userConds {
			all = append(all, router.DeepCopy(c))
		}
		ann[conditionsPrefix+r.abAction(i)] = mustJSON(append(all, conds...))
	}
}

func backendName(path map[string]any) string {
	name, _, _ := unstructured.NestedString(path, "backend", "service", "name")
	return name
}

// withBackend is a copy of path sent to the action name.
func withBackend(path map[string]any, name string) map[string]any {
	out := router.DeepCopyMap(path)
	out["backend"] = map[string]any{"service": map[string]any{"name": name, "port": map[string]any{"name": useAnnotation}}}
	return out
}

// setWeights puts w onto the live generated Ingress, its own paths and its action's port
// kept, without reading the user's Ingress.
func (r *albRouter) setWeights(live *unstructured.Unstructured, w router.Weights) (bool, error) {
	if w.Matched && r.matchErr != nil {
		return false, r.matchErr
	}
	current, err := parseAction(live.GetAnnotations()[actionsPrefix+r.action()])
	if err != nil {
		return false, fmt.Errorf("%s: annotation %s%s: %v; apply again to regenerate it", r.generated().Ref(), actionsPrefix, r.action(), err)
	}
	portText := strconv.Itoa(int(r.s.Port))
	for _, tg := range current.ForwardConfig.TargetGroups {
		if tg.ServiceName == r.primary() && tg.port() != "" {
			portText = tg.port()
		}
	}
	var userConds []any
	if v := live.GetAnnotations()[conditionsPrefix+r.action()]; v != "" {
		_ = json.Unmarshal([]byte(v), &userConds)
	}
	spec, _ := live.Object["spec"].(map[string]any)
	spec = router.DeepCopyMap(spec)
	ann := maps.Clone(live.GetAnnotations())
	if ann == nil {
		ann = map[string]string{}
	}
	r.apply(spec, ann, w, portText, userConds)
	changed := !router.JSONEqual(live.Object["spec"], spec) || !maps.Equal(live.GetAnnotations(), ann)
	live.Object["spec"] = spec
	live.SetAnnotations(ann)
	return changed, nil
}

// weights reads the split from the weighted action; Matched is the presence of A/B paths.
func (r *albRouter) weights(obj *unstructured.Unstructured) (router.Weights, error) {
	key := actionsPrefix + r.action()
	a, err := parseAction(obj.GetAnnotations()[key])
	if err != nil {
		return router.Weights{}, fmt.Errorf("annotation %s: %v", key, err)
	}
	w := router.Weights{Primary: -1, Canary: -1}
	for _, tg := range a.ForwardConfig.TargetGroups {
		switch tg.ServiceName {
		case r.primary():
			w.Primary = tg.Weight
		case r.canary():
			w.Canary = tg.Weight
		}
	}
	if w.Primary < 0 || w.Canary < 0 || w.Primary+w.Canary != 100 {
		return router.Weights{}, fmt.Errorf("annotation %s must forward to target groups %s and %s with weights summing to 100", key, r.primary(), r.canary())
	}
	rules, _, _ := unstructured.NestedSlice(obj.Object, "spec", "rules")
	for _, item := range rules {
		rule, _ := item.(map[string]any)
		paths, _, _ := unstructured.NestedSlice(rule, "http", "paths")
		for _, p := range paths {
			if pm, _ := p.(map[string]any); r.isABAction(backendName(pm)) {
				w.Matched = true
			}
		}
	}
	return w, nil
}

func (r *albRouter) Reconcile(ctx context.Context) error {
	if r.matchErr != nil {
		return r.matchErr
	}
	src, err := r.read(ctx)
	if err != nil {
		return err
	}
	return r.managed(src).Reconcile(ctx)
}

func (r *albRouter) SetRoutes(ctx context.Context, w router.Weights) error {
	return r.generated().SetRoutes(ctx, w)
}

func (r *albRouter) GetRoutes(ctx context.Context) (router.Weights, error) {
	return r.generated().GetRoutes(ctx)
}

// Drift compares the generated Ingress with what the user's Ingress makes of it: the spec,
// then the annotations the router writes, for the live weights.
func (r *albRouter) Drift(ctx context.Context) ([]string, error) {
	var cfg *router.ConfigError
	if errors.As(r.matchErr, &cfg) {
		return []string{cfg.Error()}, nil
	}
	src, err := r.read(ctx)
	if errors.As(err, &cfg) {
		return []string{cfg.Error()}, nil
	}
	if err != nil {
		return nil, err
	}
	m := r.managed(src)
	from := r.s.Namespace + "/" + r.ingress
	out, err := m.Drift(ctx, func(want, live map[string]any) []string {
		var diffs []string
		for _, key := range router.DifferingKeys(want, live) {
			diffs = append(diffs, fmt.Sprintf("spec.%s differs from what ingress_ref %s makes of it", key, from))
		}
		return diffs
	})
	if err != nil || len(out) > 0 {
		return out, err
	}
	live, err := router.Fetch(ctx, r.c.Dynamic, IngressResource, r.s.Namespace, r.generatedName())
	if err != nil || live == nil {
		return out, err
	}
	// Unreadable weights are no drift of the annotations; Reconcile writes 100/0 then.
	w, werr := r.weights(live)
	if werr != nil {
		w = router.Weights{Primary: 100}
	}
	m.Render(w)
	have := live.GetAnnotations()
	for _, k := range sortedKeys(m.Annotations) {
		if have[k] != m.Annotations[k] {
			out = append(out, fmt.Sprintf("%s: annotation %s differs from what ingress_ref %s makes of it", m.Ref(), k, from))
		}
	}
	return out, nil
}

func (r *albRouter) Finalize(ctx context.Context) error {
	if r.ingress == "" {
		return nil
	}
	return router.DeleteOwned(ctx, r.c.Dynamic, IngressResource, r.s.Namespace, r.generatedName(), r.s)
}

func (r *albRouter) Warnings(context.Context) []string { return nil }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
