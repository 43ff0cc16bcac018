package gloo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// upstreamCopiedFields are copied from upstream_ref into the generated Upstreams when they
// are created (Flagger's list); only loadBalancerConfig is kept in sync afterwards.
var upstreamCopiedFields = []string{
	"sslConfig", "circuitBreakers", "connectionConfig", "loadBalancerConfig", "useHttp2",
	"initialStreamWindowSize", "initialConnectionWindowSize", "httpProxyHostname",
}

// glooRouter writes two Upstreams (gloo.solo.io/v1) for the -primary and -canary Services
// and one weighted object that the user's VirtualService routes to: a RouteTable
// (gateway.solo.io/v1, Flagger >= 1.6) or an UpstreamGroup (gloo.solo.io/v1, older Flagger).
type glooRouter struct {
	c                   router.Clients
	s                   router.Spec
	mode                string
	upstream            *router.Ref // upstream_ref, or nil
	can                 router.Capabilities
	primaryUp, canaryUp string
	// apexUp is the Upstream of the apex Service that Finalize leaves behind; Gloo discovery
	// would give it the same name.
	apexUp string
	// last is the weight object as the API server last returned it (see router.HeldCache).
	last *router.HeldCache
}

func newRouter(c router.Clients, s router.Spec, can router.Capabilities) router.Router {
	o, _ := s.Options.(Options)
	mode := o.Mode
	if mode == "" {
		mode = ModeRouteTable
	}
	return &glooRouter{
		c: c, s: s, mode: mode, upstream: o.UpstreamRef, can: can, last: &router.HeldCache{},
		primaryUp: fmt.Sprintf("%s-%s-primaryupstream-%d", s.Namespace, s.Apex, s.Port),
		canaryUp:  fmt.Sprintf("%s-%s-canaryupstream-%d", s.Namespace, s.Apex, s.Port),
		apexUp:    fmt.Sprintf("%s-%s-%d", s.Namespace, s.Apex, s.Port),
	}
}

func (r *glooRouter) checkMode() error {
	if r.mode != ModeRouteTable && r.mode != ModeUpstreamGroup {
		return fmt.Errorf("unknown gloo.mode %q: allowed values are %s and %s", r.mode, ModeRouteTable, ModeUpstreamGroup)
	}
	return nil
}

// weighted is the RouteTable or UpstreamGroup of the current mode.
func (r *glooRouter) weighted() router.Managed {
	dest := func(upstream string, weight int) any {
		return map[string]any{
			"destination": map[string]any{"upstream": map[string]any{"name": upstream, "namespace": r.s.Namespace}},
			// Written even when 0: the CRD field is a nullable integer and an explicit 0
			// says what the split is.
			"weight": int64(weight),
		}
	}
	dests := func(w router.Weights) []any { return []any{dest(r.primaryUp, w.Primary), dest(r.canaryUp, w.Canary)} }
	m := router.Managed{Dynamic: r.c.Dynamic, Spec: r.s, Name: r.s.Apex, Namespace: r.s.Namespace, Provider: "gloo", Last: r.last}
	if r.mode == ModeUpstreamGroup {
		// An UpstreamGroup is only a weighted list of destinations: it cannot match requests,
		// whatever the driver declares for the route_table mode.
		m.Provider = "gloo in upstream_group mode"
		m.GVR, m.Kind = router.UpstreamGroupResource, "UpstreamGroup"
		m.Render = func(w router.Weights) map[string]any { return map[string]any{"destinations": dests(w)} }
		m.ReadWeights = func(obj *unstructured.Unstructured) (router.Weights, error) {
			list, _, _ := unstructured.NestedSlice(obj.Object, "spec", "destinations")
			return r.destinationWeights(list)
		}
		return m
	}
	m.GVR, m.Kind, m.Can, m.StampApex = router.RouteTableResource, "RouteTable", r.can, true
	m.Render = func(w router.Weights) map[string]any {
		weighted := map[string]any{
			"inheritablePathMatchers": true,
			"routeAction":             map[string]any{"multi": map[string]any{"destinations": dests(w)}},
		}
		// Gloo takes the first route that matches, so the A/B route goes first.
		if ab := r.abRoute(w); ab != nil {
			return map[string]any{"routes": []any{ab, weighted}}
		}
		return map[string]any{"routes": []any{weighted}}
	}
	m.ReadWeights = func(obj *unstructured.Unstructured) (router.Weights, error) {
		routes, _, _ := unstructured.NestedSlice(obj.Object, "spec", "routes")
		matched := false
		for _, route := range routes {
			rm, _ := route.(map[string]any)
			if r.isABRoute(rm) {
				matched = true
			}
		}
		for _, route := range routes {
			rm, _ := route.(map[string]any)
			list, _, _ := unstructured.NestedSlice(rm, "routeAction", "multi", "destinations")
			if w, err := r.destinationWeights(list); err == nil {
				w.Matched = matched
				return w, nil
			}
		}
		return router.Weights{}, fmt.Errorf("no route with a multi destination to Upstream %s", r.primaryUp)
	}
	return m
}

// abRoute is the route that sends the requests matching Spec.Match to the canary Upstream
// (A/B testing), or nil. Its matchers keep the parent's path (inheritablePathMatchers) and add
// the headers and query parameters; one matcher per condition, as Gloo ORs them.
func (r *glooRouter) abRoute(w router.Weights) map[string]any {
	if !w.Matched || len(r.s.Match) == 0 {
		return nil
	}
	matchers := make([]any, 0, len(r.s.Match))
	for _, m := range r.s.Match {
		matcher := map[string]any{}
		if hs := glooStringMatchers(m.Headers); len(hs) > 0 {
			matcher["headers"] = hs
		}
		if qs := glooStringMatchers(m.QueryParams); len(qs) > 0 {
			matcher["queryParameters"] = qs
		}
		matchers = append(matchers, matcher)
	}
	return map[string]any{
		"matchers":                matchers,
		"inheritablePathMatchers": true,
		"routeAction": map[string]any{"single": map[string]any{
			"upstream": map[string]any{"name": r.canaryUp, "namespace": r.s.Namespace},
		}},
	}
}

// isABRoute recognises the route abRoute writes: matchers and the canary Upstream alone.
func (r *glooRouter) isABRoute(route map[string]any) bool {
	matchers, _, _ := unstructured.NestedSlice(route, "matchers")
	up, _, _ := unstructured.NestedString(route, "routeAction", "single", "upstream", "name")
	return len(matchers) > 0 && up == r.canaryUp
}

// glooStringMatchers renders header or query parameter conditions, sorted by name. Gloo
// matches a value exactly or, with regex: true, as a whole-value regular expression; prefix
// and suffix become such regular expressions.
func glooStringMatchers(conds map[string]router.StringMatch) []any {
	out := make([]any, 0, len(conds))
	for _, name := range slices.Sorted(maps.Keys(conds)) {
		c := conds[name]
		m := map[string]any{"name": name}
		if c.Exact != "" {
			m["value"] = c.Exact
		} else {
			m["value"], m["regex"] = c.Pattern(true), true
		}
		out = append(out, m)
	}
	return out
}

// destinationWeights reads the primary destination's weight; canary is the rest, as in
// Flagger. A missing weight is 0 (Gloo's wire form omits it).
func (r *glooRouter) destinationWeights(list []any) (router.Weights, error) {
	if len(list) < 2 {
		return router.Weights{}, fmt.Errorf("want 2 destinations, found %d", len(list))
	}
	for _, d := range list {
		dm, _ := d.(map[string]any)
		name, _, _ := unstructured.NestedString(dm, "destination", "upstream", "name")
		if name != r.primaryUp {
			continue
		}
		p := 0
		if v, ok := dm["weight"]; ok && v != nil {
			var isInt bool
			if p, isInt = router.AsInt(v); !isInt || p < 0 || p > 100 {
				return router.Weights{}, fmt.Errorf("destination %s has weight %v", r.primaryUp, v)
			}
		}
		return router.Weights{Primary: p, Canary: 100 - p}, nil
	}
	return router.Weights{}, fmt.Errorf("no destination for Upstream %s", r.primaryUp)
}

// other is the weighted object of the other mode, removed when the mode changes.
func (r *glooRouter) other() router.Managed {
	o := *r
	if r.mode == ModeUpstreamGroup {
		o.mode = ModeRouteTable
	} else {
		o.mode = ModeUpstreamGroup
	}
	return o.weighted()
}

func (r *glooRouter) upstreamRef() string {
	ns := r.upstream.Namespace
	if ns == "" {
		ns = r.s.Namespace
	}
	return "upstream_ref: Upstream " + ns + "/" + r.upstream.Name
}

// readUpstreamRef returns nil when no upstream_ref is set.
func (r *glooRouter) readUpstreamRef(ctx context.Context) (*unstructured.Unstructured, error) {
	if r.upstream == nil || r.upstream.Name == "" {
		return nil, nil
	}
	ns := r.upstream.Namespace
	if ns == "" {
		ns = r.s.Namespace
	}
	obj, err := router.Fetch(ctx, r.c.Dynamic, router.UpstreamResource, ns, r.upstream.Name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", r.upstreamRef(), err)
	}
	if obj == nil {
		return nil, router.ConfigErrorf("%s not found", r.upstreamRef())
	}
	return obj, nil
}

// upstreamKube is the spec.kube of a generated Upstream.
func (r *glooRouter) upstreamKube(ctx context.Context, service string) (map[string]any, error) {
	var svc *corev1.Service
	err := router.WithRetry(ctx, func() (err error) {
		svc, err = r.c.Kube.CoreV1().Services(r.s.Namespace).Get(ctx, service, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("the Service %s/%s was not found: it must exist before the Gloo Upstreams are generated", r.s.Namespace, service)
	}
	if err != nil {
		return nil, fmt.Errorf("reading Service %s/%s: %w", r.s.Namespace, service, err)
	}
	return map[string]any{
		"serviceName":      service,
		"serviceNamespace": r.s.Namespace,
		"servicePort":      int64(r.s.Port),
		"selector":         router.StringMapToAny(svc.Spec.Selector),
	}, nil
}

func (r *glooRouter) reconcileUpstream(ctx context.Context, name, service string, ref *unstructured.Unstructured) error {
	kube, err := r.upstreamKube(ctx, service)
	if err != nil {
		return err
	}
	api := r.c.Dynamic.Resource(router.UpstreamResource).Namespace(r.s.Namespace)
	return router.WithRetry(ctx, func() error {
		live, err := router.GetOptional(ctx, r.c.Dynamic, router.UpstreamResource, r.s.Namespace, name)
		if err != nil {
			return fmt.Errorf("reading Upstream %s/%s: %w", r.s.Namespace, name, err)
		}
		if live == nil {
			spec := map[string]any{"kube": kube}
			labels := map[string]string{}
			if ref != nil {
				refSpec, _ := ref.Object["spec"].(map[string]any)
				for _, f := range upstreamCopiedFields {
					if v, ok := refSpec[f]; ok {
						spec[f] = router.DeepCopy(v)
					}
				}
				for k, v := range ref.GetLabels() {
					labels[k] = v
				}
			}
			for k, v := range router.OurLabels(r.s) {
				labels[k] = v
			}
			obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
			obj.SetAPIVersion(router.UpstreamResource.GroupVersion().String())
			obj.SetKind("Upstream")
			obj.SetName(name)
			obj.SetNamespace(r.s.Namespace)
			obj.SetLabels(labels)
			_, err := api.Create(ctx, obj, metav1.CreateOptions{FieldManager: router.FieldManager})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(router.UpstreamResource.GroupResource(), name, err)
			}
			if err != nil {
				return fmt.Errorf("creating Upstream %s/%s: %w", r.s.Namespace, name, err)
			}
			return nil
		}
		if !router.Owned(live, r.s) {
			return router.NotOwnedError("Upstream", live, r.s)
		}
		changed := false
		if liveKube, _, _ := unstructured.NestedFieldNoCopy(live.Object, "spec", "kube"); !router.JSONEqual(liveKube, kube) {
			_ = unstructured.SetNestedField(live.Object, kube, "spec", "kube")
			changed = true
		}
		if ref != nil && r.loadBalancerDiffers(live, ref) {
			if lb, ok, _ := unstructured.NestedFieldCopy(ref.Object, "spec", "loadBalancerConfig"); ok {
				_ = unstructured.SetNestedField(live.Object, lb, "spec", "loadBalancerConfig")
			} else {
				unstructured.RemoveNestedField(live.Object, "spec", "loadBalancerConfig")
			}
			changed = true
		}
		if labels, ok := router.MergeStrings(live.GetLabels(), router.OurLabels(r.s)); ok {
			live.SetLabels(labels)
			changed = true
		}
		if !changed {
			return nil
		}
		if _, err := api.Update(ctx, live, metav1.UpdateOptions{FieldManager: router.FieldManager}); err != nil {
			return fmt.Errorf("updating Upstream %s/%s: %w", r.s.Namespace, name, err)
		}
		return nil
	})
}

func (r *glooRouter) loadBalancerDiffers(live, ref *unstructured.Unstructured) bool {
	a, _, _ := unstructured.NestedFieldNoCopy(live.Object, "spec", "loadBalancerConfig")
	b, _, _ := unstructured.NestedFieldNoCopy(ref.Object, "spec", "loadBalancerConfig")
	return !router.JSONEqual(a, b)
}

func (r *glooRouter) upstreams() [][2]string {
	return [][2]string{{r.primaryUp, r.s.Apex + "-primary"}, {r.canaryUp, r.s.Apex + "-canary"}}
}

func (r *glooRouter) Reconcile(ctx context.Context) error {
	if err := r.checkMode(); err != nil {
		return err
	}
	if r.s.Port <= 0 {
		return fmt.Errorf("the Gloo router needs the service port (got %d)", r.s.Port)
	}
	ref, err := r.readUpstreamRef(ctx)
	if err != nil {
		return err
	}
	for _, u := range r.upstreams() {
		if err := r.reconcileUpstream(ctx, u[0], u[1], ref); err != nil {
			return err
		}
	}
	if err := r.weighted().Reconcile(ctx); err != nil {
		return err
	}
	// A changed gloo.mode leaves the other object behind; it would still route traffic.
	o := r.other()
	return router.DeleteOwned(ctx, r.c.Dynamic, o.GVR, o.Namespace, o.Name, r.s)
}

func (r *glooRouter) SetRoutes(ctx context.Context, w router.Weights) error {
	if err := r.checkMode(); err != nil {
		return err
	}
	return r.weighted().SetRoutes(ctx, w)
}

func (r *glooRouter) GetRoutes(ctx context.Context) (router.Weights, error) {
	if err := r.checkMode(); err != nil {
		return router.Weights{}, err
	}
	return r.weighted().GetRoutes(ctx)
}

func (r *glooRouter) Drift(ctx context.Context) ([]string, error) {
	if err := r.checkMode(); err != nil {
		return nil, err
	}
	var out []string
	ref, err := r.readUpstreamRef(ctx)
	var cfg *router.ConfigError
	if errors.As(err, &cfg) {
		out = append(out, cfg.Error())
	} else if err != nil {
		return nil, err
	}
	for _, u := range r.upstreams() {
		where := "Upstream " + r.s.Namespace + "/" + u[0]
		live, err := router.Fetch(ctx, r.c.Dynamic, router.UpstreamResource, r.s.Namespace, u[0])
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", where, err)
		}
		if live == nil {
			out = append(out, where+" is missing")
			continue
		}
		if !router.Owned(live, r.s) {
			out = append(out, router.NotOwnedError("Upstream", live, r.s).Error())
			continue
		}
		if kube, err := r.upstreamKube(ctx, u[1]); err == nil {
			if liveKube, _, _ := unstructured.NestedFieldNoCopy(live.Object, "spec", "kube"); !router.JSONEqual(liveKube, kube) {
				out = append(out, where+": spec.kube differs from the generated one")
			}
		}
		if ref != nil && r.loadBalancerDiffers(live, ref) {
			out = append(out, fmt.Sprintf("%s: loadBalancerConfig differs from %s", where, r.upstreamRef()))
		}
	}
	d, err := r.weighted().Drift(ctx, nil)
	if err != nil {
		return nil, err
	}
	return append(out, d...), nil
}

// Finalize leaves the route to the user instead of deleting it: the user's VirtualService
// names RouteTable <apex> (or UpstreamGroup <apex>), and deleting that object would leave the
// route with nowhere to go. It rewrites the object of either mode that this release owns to
// send everything to the apex Service, which the engine has pointed at the serving pods:
//   - RouteTable <apex>: one route whose single destination is Upstream <ns>-<apex>-<port>;
//   - UpstreamGroup <apex>: that Upstream as its one destination, weight 100.
//
// Upstream <ns>-<apex>-<port> is created on the apex Service and port, without a selector so
// that it follows whatever the apex selects, and with the other settings of the generated
// primary Upstream; an existing Upstream of that name is used if it leads to the same Service
// and port. (A Kubernetes destination would need no Upstream, but Gloo turns those off by
// default: settings.gloo.disableKubernetesDestinations.) What is left behind carries no release
// labels and the annotation AnnotationLeftBehind; a later canary_release of the same apex takes
// the RouteTable or UpstreamGroup over. The generated -primary and -canary Upstreams are deleted
// once the API server holds the rewritten object, which no longer names them.
// A release that owns its workload (a manifest) deletes both instead: the workload goes too.
func (r *glooRouter) Finalize(ctx context.Context) error {
	o := *r
	for _, mode := range []string{ModeRouteTable, ModeUpstreamGroup} {
		o.mode = mode
		if r.s.OwnsWorkload {
			// The workload goes too: a left-behind route would lead to nothing.
			m := o.weighted()
			if err := router.DeleteOwned(ctx, m.Dynamic, m.GVR, m.Namespace, m.Name, r.s); err != nil {
				return fmt.Errorf("deleting %s: %w", m.Ref(), err)
			}
			continue
		}
		if err := o.handOver(ctx); err != nil {
			return err
		}
	}
	for _, u := range r.upstreams() {
		if err := router.DeleteOwned(ctx, r.c.Dynamic, router.UpstreamResource, r.s.Namespace, u[0], r.s); err != nil {
			return fmt.Errorf("deleting Upstream %s/%s: %w", r.s.Namespace, u[0], err)
		}
	}
	return nil
}

// handOver rewrites the weighted object of r.mode, if this release owns it, into its
// left-behind form (see Finalize) and checks that the API server holds that form.
func (r *glooRouter) handOver(ctx context.Context) error {
	m := r.weighted()
	live, err := router.Fetch(ctx, m.Dynamic, m.GVR, m.Namespace, m.Name)
	if err != nil {
		return fmt.Errorf("reading %s: %w", m.Ref(), err)
	}
	if live == nil || !router.Owned(live, r.s) {
		return nil // nothing of ours for a route to name
	}
	if err := r.leaveApexUpstream(ctx); err != nil {
		return err
	}
	return m.HandOver(ctx, router.Handover{
		Spec: r.leftBehindSpec(), Dest: r.apexUp, Destinations: UpstreamsNamed,
		Note: "destroyed canary_release " + r.s.Name + "; delete this object after repointing your VirtualService",
	})
}

// leftBehindSpec is the spec of the weighted object of r.mode once handed over.
func (r *glooRouter) leftBehindSpec() map[string]any {
	up := map[string]any{"name": r.apexUp, "namespace": r.s.Namespace}
	if r.mode == ModeUpstreamGroup {
		return map[string]any{"destinations": []any{
			map[string]any{"destination": map[string]any{"upstream": up}, "weight": int64(100)},
		}}
	}
	return map[string]any{"routes": []any{map[string]any{
		"inheritablePathMatchers": true,
		"routeAction":             map[string]any{"single": map[string]any{"upstream": up}},
	}}}
}

// UpstreamsNamed lists the Upstreams a RouteTable's route actions or an UpstreamGroup's
// destinations name, in order.
func UpstreamsNamed(obj *unstructured.Unstructured) []string {
	var out []string
	add := func(dest map[string]any, fields ...string) {
		if name, ok, _ := unstructured.NestedString(dest, fields...); ok {
			out = append(out, name)
		}
	}
	addAll := func(dests []any) {
		for _, d := range dests {
			dm, _ := d.(map[string]any)
			add(dm, "destination", "upstream", "name")
		}
	}
	if obj.GetKind() == "UpstreamGroup" {
		dests, _, _ := unstructured.NestedSlice(obj.Object, "spec", "destinations")
		addAll(dests)
		return out
	}
	routes, _, _ := unstructured.NestedSlice(obj.Object, "spec", "routes")
	for _, route := range routes {
		rm, _ := route.(map[string]any)
		add(rm, "routeAction", "single", "upstream", "name")
		dests, _, _ := unstructured.NestedSlice(rm, "routeAction", "multi", "destinations")
		addAll(dests)
	}
	return out
}

// leaveApexUpstream makes Upstream <ns>-<apex>-<port> lead to the apex Service (see Finalize).
func (r *glooRouter) leaveApexUpstream(ctx context.Context) error {
	where := "Upstream " + r.s.Namespace + "/" + r.apexUp
	api := r.c.Dynamic.Resource(router.UpstreamResource).Namespace(r.s.Namespace)
	return router.WithRetry(ctx, func() error {
		live, err := router.GetOptional(ctx, r.c.Dynamic, router.UpstreamResource, r.s.Namespace, r.apexUp)
		if err != nil {
			return fmt.Errorf("reading %s: %w", where, err)
		}
		if live != nil {
			if !r.leadsToApex(live) {
				return fmt.Errorf("%s exists but does not lead to Service %s/%s port %d, so the Gloo route cannot be handed over to it; "+
					"delete or fix it and destroy again", where, r.s.Namespace, r.s.Apex, r.s.Port)
			}
			return nil
		}
		// The settings (connection, TLS, load balancing) the primary was served with.
		primary, err := router.GetOptional(ctx, r.c.Dynamic, router.UpstreamResource, r.s.Namespace, r.primaryUp)
		if err != nil {
			return fmt.Errorf("reading Upstream %s/%s: %w", r.s.Namespace, r.primaryUp, err)
		}
		obj := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
		if primary != nil && router.Owned(primary, r.s) {
			obj.Object["spec"] = router.DeepCopy(primary.Object["spec"])
			obj.SetLabels(router.WithoutReleaseLabels(primary.GetLabels()))
		}
		if err := unstructured.SetNestedField(obj.Object, map[string]any{
			"serviceName": r.s.Apex, "serviceNamespace": r.s.Namespace, "servicePort": int64(r.s.Port),
		}, "spec", "kube"); err != nil {
			return err
		}
		obj.SetAPIVersion(router.UpstreamResource.GroupVersion().String())
		obj.SetKind("Upstream")
		obj.SetName(r.apexUp)
		obj.SetNamespace(r.s.Namespace)
		obj.SetAnnotations(router.WithLeftBehind(nil, fmt.Sprintf("destroyed canary_release %s; the left-behind %s routes to Service %s through it; "+
			"delete it once nothing routes to it", r.s.Name, r.weighted().Ref(), r.s.Apex)))
		_, err = api.Create(ctx, obj, metav1.CreateOptions{FieldManager: router.FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return apierrors.NewConflict(router.UpstreamResource.GroupResource(), r.apexUp, err)
		}
		if err != nil {
			return fmt.Errorf("creating %s: %w", where, err)
		}
		return nil
	})
}

// leadsToApex reports whether an Upstream's spec.kube is the apex Service and port.
func (r *glooRouter) leadsToApex(up *unstructured.Unstructured) bool {
	svc, _, _ := unstructured.NestedString(up.Object, "spec", "kube", "serviceName")
	ns, _, _ := unstructured.NestedString(up.Object, "spec", "kube", "serviceNamespace")
	port, _, _ := unstructured.NestedFieldNoCopy(up.Object, "spec", "kube", "servicePort")
	p, _ := router.AsInt(port)
	if ns == "" {
		ns = up.GetNamespace()
	}
	return svc == r.s.Apex && ns == r.s.Namespace && p == int(r.s.Port)
}

// Warnings tells the user when no VirtualService (or delegating RouteTable) sends traffic to
// the generated object: the canary would then get no traffic at all. Silent when
// VirtualServices cannot be listed (no CRD, no permission).
func (r *glooRouter) Warnings(ctx context.Context) []string {
	if r.checkMode() != nil {
		return nil
	}
	vss, err := r.c.Dynamic.Resource(router.VirtualServiceResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	for _, vs := range vss.Items {
		routes, _, _ := unstructured.NestedSlice(vs.Object, "spec", "virtualHost", "routes")
		if r.anyRouteReaches(routes, vs.GetNamespace()) {
			return nil
		}
	}
	// Route tables can delegate further; ours may sit below another one.
	if rts, err := r.c.Dynamic.Resource(router.RouteTableResource).List(ctx, metav1.ListOptions{}); err == nil {
		for _, rt := range rts.Items {
			if rt.GetNamespace() == r.s.Namespace && rt.GetName() == r.s.Apex {
				continue
			}
			routes, _, _ := unstructured.NestedSlice(rt.Object, "spec", "routes")
			if r.anyRouteReaches(routes, rt.GetNamespace()) {
				return nil
			}
		}
	}
	if r.mode == ModeUpstreamGroup {
		return []string{fmt.Sprintf("no Gloo VirtualService routes to UpstreamGroup %s/%s: add a route with "+
			"routeAction.upstreamGroup {name: %s, namespace: %s}, otherwise the canary receives no traffic",
			r.s.Namespace, r.s.Apex, r.s.Apex, r.s.Namespace)}
	}
	return []string{fmt.Sprintf("no Gloo VirtualService delegates to RouteTable %s/%s: add a route with "+
		"delegateAction.ref {name: %s, namespace: %s}, otherwise the canary receives no traffic",
		r.s.Namespace, r.s.Apex, r.s.Apex, r.s.Namespace)}
}

// anyRouteReaches reports whether one of routes (of an object in namespace owner) points at
// the generated RouteTable or UpstreamGroup. A reference without a namespace means owner.
func (r *glooRouter) anyRouteReaches(routes []any, owner string) bool {
	is := func(ref map[string]any) bool {
		if ref == nil || ref["name"] != r.s.Apex {
			return false
		}
		ns, _ := ref["namespace"].(string)
		if ns == "" {
			ns = owner
		}
		return ns == r.s.Namespace
	}
	for _, route := range routes {
		rm, _ := route.(map[string]any)
		if r.mode == ModeUpstreamGroup {
			ug, _, _ := unstructured.NestedMap(rm, "routeAction", "upstreamGroup")
			if is(ug) {
				return true
			}
			continue
		}
		da, _, _ := unstructured.NestedMap(rm, "delegateAction")
		if da == nil {
			continue
		}
		ref, _ := da["ref"].(map[string]any)
		if is(ref) || is(da) {
			return true
		}
		if sel, ok := da["selector"].(map[string]any); ok && r.selectorMatches(sel, owner) {
			return true
		}
	}
	return false
}

// selectorMatches applies a delegateAction.selector to the generated RouteTable. Selectors
// with expressions are assumed to match rather than risk a false warning.
func (r *glooRouter) selectorMatches(sel map[string]any, owner string) bool {
	namespaces, _, _ := unstructured.NestedStringSlice(sel, "namespaces")
	if len(namespaces) == 0 {
		namespaces = []string{owner}
	}
	nsOK := false
	for _, ns := range namespaces {
		if ns == "*" || ns == r.s.Namespace {
			nsOK = true
		}
	}
	if !nsOK {
		return false
	}
	if exprs, _, _ := unstructured.NestedSlice(sel, "expressions"); len(exprs) > 0 {
		return true
	}
	labels, _, _ := unstructured.NestedStringMap(sel, "labels")
	ours := router.OurLabels(r.s)
	for k, v := range labels {
		if ours[k] != v {
			return false
		}
	}
	return true
}
