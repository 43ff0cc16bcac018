package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Resources the routers read or write.
var (
	TrafficSplitResource   = schema.GroupVersionResource{Group: "split.smi-spec.io", Version: "v1alpha2", Resource: "trafficsplits"}
	ApisixRouteResource    = schema.GroupVersionResource{Group: "apisix.apache.org", Version: "v2", Resource: "apisixroutes"}
	UpstreamResource       = schema.GroupVersionResource{Group: "gloo.solo.io", Version: "v1", Resource: "upstreams"}
	UpstreamGroupResource  = schema.GroupVersionResource{Group: "gloo.solo.io", Version: "v1", Resource: "upstreamgroups"}
	RouteTableResource     = schema.GroupVersionResource{Group: "gateway.solo.io", Version: "v1", Resource: "routetables"}
	VirtualServiceResource = schema.GroupVersionResource{Group: "gateway.solo.io", Version: "v1", Resource: "virtualservices"}
)

// Istio resources, in the version Flagger writes (v1beta1; the CRDs serve v1 as well).
var (
	IstioVirtualServiceResource  = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1beta1", Resource: "virtualservices"}
	IstioDestinationRuleResource = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1beta1", Resource: "destinationrules"}
)

// GatewayResource is the Gateway API Gateway that a gatewayapi release's HTTPRoute attaches to.
var GatewayResource = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}

// FieldManager names this provider in managedFields.
const FieldManager = ManagedByValue

// ValidateWeights rejects splits that are not whole percentages summing to 100.
func ValidateWeights(w Weights) error {
	if w.Primary == 0 && w.Canary == 0 {
		return errors.New("invalid weights: primary and canary are both 0")
	}
	if w.Primary < 0 || w.Primary > 100 || w.Canary < 0 || w.Canary > 100 || w.Primary+w.Canary != 100 {
		return fmt.Errorf("invalid weights primary=%d canary=%d: each must be 0..100 and they must sum to 100", w.Primary, w.Canary)
	}
	return nil
}

// ConfigError is a problem in the user's configuration or referenced objects (as opposed
// to an API failure). Drift reports it as text; Reconcile returns it.
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

// ConfigErrorf is a ConfigError with a formatted message.
func ConfigErrorf(format string, args ...any) error {
	return &ConfigError{msg: fmt.Sprintf(format, args...)}
}

// OurLabels are put on every generated object.
func OurLabels(s Spec) map[string]string {
	return map[string]string{LabelManagedBy: ManagedByValue, LabelRelease: s.Name}
}

// Owned reports whether obj carries the release label of s.
func Owned(obj *unstructured.Unstructured, s Spec) bool {
	return obj.GetLabels()[LabelRelease] == s.Name
}

// leftBehind reports an object a destroyed release handed over to the user (see handover): it
// belongs to no release, and the next release of the same apex may take it over.
func leftBehind(obj *unstructured.Unstructured) bool {
	_, ok := obj.GetAnnotations()[AnnotationLeftBehind]
	return ok && obj.GetLabels()[LabelRelease] == ""
}

// NotOwnedError refuses to touch obj, which exists but belongs to no release or another one.
func NotOwnedError(kind string, obj *unstructured.Unstructured, s Spec) error {
	return fmt.Errorf("%s %s/%s already exists and is not managed by canary_release %q (missing label %s=%s)",
		kind, obj.GetNamespace(), obj.GetName(), s.Name, LabelRelease, s.Name)
}

// GetOptional reads an object once; it returns nil, nil when the object does not exist.
// Inside a WithRetry attempt; elsewhere use Fetch.
func GetOptional(ctx context.Context, c dynamic.Interface, gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, error) {
	obj, err := c.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}

// Fetch is GetOptional under the retry policy.
func Fetch(ctx context.Context, c dynamic.Interface, gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, error) {
	var obj *unstructured.Unstructured
	err := WithRetry(ctx, func() (err error) {
		obj, err = GetOptional(ctx, c, gvr, ns, name)
		return err
	})
	return obj, err
}

// DeleteOwned deletes an object this release generated; a missing object or one that
// someone else owns is left alone.
func DeleteOwned(ctx context.Context, c dynamic.Interface, gvr schema.GroupVersionResource, ns, name string, s Spec) error {
	return WithRetry(ctx, func() error {
		obj, err := GetOptional(ctx, c, gvr, ns, name)
		if err != nil || obj == nil || !Owned(obj, s) {
			return err
		}
		// The UID precondition keeps a retry from deleting an object created since the read.
		uid := obj.GetUID()
		opts := metav1.DeleteOptions{}
		if uid != "" {
			opts.Preconditions = &metav1.Preconditions{UID: &uid}
		}
		err = c.Resource(gvr).Namespace(ns).Delete(ctx, name, opts)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// Managed is one generated object that carries the weights (TrafficSplit, canary
// ApisixRoute, RouteTable, UpstreamGroup).
type Managed struct {
	Dynamic   dynamic.Interface
	Spec      Spec
	GVR       schema.GroupVersionResource
	Kind      string
	Name      string
	Namespace string
	// Render renders the desired spec for the given weights.
	Render func(Weights) map[string]any
	// ReadWeights reads the weights back from a live object.
	ReadWeights func(*unstructured.Unstructured) (Weights, error)
	// SetWeights puts w onto a live object and reports whether that changed it; nil means
	// rewrite, which needs Render.
	SetWeights func(live *unstructured.Unstructured, w Weights) (bool, error)
	// Labels and Annotations wanted on the object besides OurLabels.
	Labels, Annotations map[string]string
	// StampApex puts Spec's apex labels and annotations on the object too: it stands for the
	// apex Service (a TraefikService, HTTPProxy, VirtualService, HTTPRoute or RouteTable named
	// <apex>), as Flagger stamps service.apex on it. The release's own labels win.
	StampApex bool
	// Provider names the mesh_provider in errors; Can, the driver's capabilities, says which of
	// Weights' extras Render and SetWeights write. The rest are refused rather than silently
	// split by weight.
	Provider string
	Can      Capabilities
	// Last, when set, holds the object as the API server last returned it to this router.
	Last *HeldCache
	// TakeOver, when set, lets Reconcile take over an object of the same name that no release
	// and no other tool manages (a hand-written route, as Flagger overwrites it): it returns
	// why the object as rendered would not serve what the live one serves (a host, a gateway,
	// a backend it would drop), in which case it is refused; nil refuses every such object.
	TakeOver func(live, want map[string]any) error
}

// takeable reports an object that Reconcile may take over (see Managed.TakeOver), or why not.
func (m Managed) takeable(live *unstructured.Unstructured) error {
	labels := live.GetLabels()
	if m.TakeOver == nil || labels[LabelRelease] != "" || (labels[LabelManagedBy] != "" && labels[LabelManagedBy] != ManagedByValue) {
		return NotOwnedError(m.Kind, live, m.Spec)
	}
	liveSpec, _ := live.Object["spec"].(map[string]any)
	if err := m.TakeOver(liveSpec, m.Render(Weights{Primary: 100})); err != nil {
		return fmt.Errorf("%s %s/%s already exists and is not managed by canary_release %q; taking it over would rewrite its spec as the release's route, "+
			"which %v. Make the release's service settings cover it, or hand it over by hand (see the migration guide)", m.Kind, live.GetNamespace(), live.GetName(), m.Spec.Name, err)
	}
	return nil
}

// HeldCache is a weight object as the API server last returned it to a router: the next
// weight write starts from it instead of a read. Its resourceVersion makes the API server
// refuse that write (a Conflict, then a fresh read) if anyone changed the object since, so
// the write is as safe as a read-then-write and costs one request instead of two.
type HeldCache struct {
	obj *unstructured.Unstructured
	// read says obj came from a read (getRoutes), not from a write's response.
	read bool
}

// take returns the cached object and empties the cache: a failed write starts afresh.
func (c *HeldCache) take() *unstructured.Unstructured {
	obj, _ := c.takeRead()
	return obj
}

// takeRead is take that also tells whether the object came from a read.
func (c *HeldCache) takeRead() (*unstructured.Unstructured, bool) {
	if c == nil || c.obj == nil {
		return nil, false
	}
	obj, read := c.obj, c.read
	c.obj, c.read = nil, false
	return obj, read
}

// keep holds a write's response.
func (c *HeldCache) keep(obj *unstructured.Unstructured) {
	if c != nil && obj != nil {
		c.obj, c.read = obj.DeepCopy(), false
	}
}

// keepRead holds an object just read.
func (c *HeldCache) keepRead(obj *unstructured.Unstructured) {
	if c != nil && obj != nil {
		c.obj, c.read = obj.DeepCopy(), true
	}
}

// Ref names the object in messages: "<Kind> <namespace>/<name>".
func (m Managed) Ref() string { return m.Kind + " " + m.Namespace + "/" + m.Name }

func (m Managed) api() dynamic.ResourceInterface {
	return m.Dynamic.Resource(m.GVR).Namespace(m.Namespace)
}

func (m Managed) wantLabels() map[string]string {
	out := map[string]string{}
	if m.StampApex {
		maps.Copy(out, m.Spec.ApexLabels)
	}
	for k, v := range m.Labels {
		out[k] = v
	}
	for k, v := range OurLabels(m.Spec) {
		out[k] = v
	}
	return out
}

// wantAnnotations are the annotations Managed puts on the object; nil when none.
func (m Managed) wantAnnotations() map[string]string {
	if !m.StampApex || len(m.Spec.ApexAnnotations) == 0 {
		return m.Annotations
	}
	out := maps.Clone(m.Spec.ApexAnnotations)
	maps.Copy(out, m.Annotations)
	return out
}

func (m Managed) build(w Weights) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": m.Render(w)}}
	obj.SetAPIVersion(m.GVR.GroupVersion().String())
	obj.SetKind(m.Kind)
	obj.SetName(m.Name)
	obj.SetNamespace(m.Namespace)
	obj.SetLabels(m.wantLabels())
	if want := m.wantAnnotations(); len(want) > 0 {
		obj.SetAnnotations(want)
	}
	return obj
}

// Reconcile creates the object at 100/0, or rewrites everything but the weights. An object
// left behind by a destroyed release (see leftBehind) is taken over.
//
// A run reads the weights (recovery) just before it reconciles, so reconcile starts from the
// object that read returned, when it holds one: its resourceVersion makes the API server
// refuse a write over anyone else's change, and then reconcile reads afresh. A write's older
// response is no such proof, so it is read again.
func (m Managed) Reconcile(ctx context.Context) error {
	return WithRetry(ctx, func() error {
		live, fromCache := m.Last.takeRead()
		if !fromCache {
			var err error
			if live, err = GetOptional(ctx, m.Dynamic, m.GVR, m.Namespace, m.Name); err != nil {
				return fmt.Errorf("reading %s: %w", m.Ref(), err)
			}
		}
		if live == nil {
			_, err := m.api().Create(ctx, m.build(Weights{Primary: 100}), metav1.CreateOptions{FieldManager: FieldManager})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(m.GVR.GroupResource(), m.Name, err)
			}
			if err != nil {
				return fmt.Errorf("creating %s: %w", m.Ref(), err)
			}
			return nil
		}
		if !Owned(live, m.Spec) && !leftBehind(live) {
			if err := m.takeable(live); err != nil {
				return err
			}
		}
		w, err := m.ReadWeights(live)
		if err != nil {
			// Unreadable weights (or a left-behind object, which holds none): the safe split.
			w = Weights{Primary: 100}
		}
		held, err := m.update(ctx, live, m.rewrite(live, w))
		if fromCache && apierrors.IsNotFound(errors.Unwrap(err)) {
			// Deleted since it was read: the retry reads again, and creates it.
			return apierrors.NewConflict(m.GVR.GroupResource(), m.Name, err)
		}
		if err == nil && m.carried(held) {
			m.Last.keep(held)
		}
		return err
	})
}

// rewrite puts the desired spec with weights w, our labels and annotations onto live, and
// reports whether that changed it.
func (m Managed) rewrite(live *unstructured.Unstructured, w Weights) bool {
	changed := false
	want := m.Render(w)
	if !JSONEqual(live.Object["spec"], want) {
		live.Object["spec"] = want
		changed = true
	}
	if labels, ok := MergeStrings(live.GetLabels(), m.wantLabels()); ok {
		live.SetLabels(labels)
		changed = true
	}
	annotations, ok := MergeStrings(live.GetAnnotations(), m.wantAnnotations())
	if _, was := annotations[AnnotationLeftBehind]; was {
		delete(annotations, AnnotationLeftBehind)
		ok = true
	}
	if ok {
		live.SetAnnotations(annotations)
		changed = true
	}
	return changed
}

// update writes live when changed, and returns the object as the API server then holds it:
// the Update response, or live itself when nothing was written.
func (m Managed) update(ctx context.Context, live *unstructured.Unstructured, changed bool) (*unstructured.Unstructured, error) {
	if !changed {
		return live, nil
	}
	held, err := m.api().Update(ctx, live, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, fmt.Errorf("updating %s: %w", m.Ref(), err)
	}
	return held, nil
}

// SetRoutes writes w and verifies that the API server holds it.
func (m Managed) SetRoutes(ctx context.Context, w Weights) error {
	if err := ValidateWeights(w); err != nil {
		return err
	}
	if err := m.Can.Check(m.Provider, m.Spec, w); err != nil {
		return fmt.Errorf("%s: %w", m.Ref(), err)
	}
	set := m.SetWeights
	if set == nil {
		set = func(live *unstructured.Unstructured, w Weights) (bool, error) { return m.rewrite(live, w), nil } //nolint:unparam // the setWeights signature: other routers' setters fail
	}
	var held *unstructured.Unstructured
	err := WithRetry(ctx, func() error {
		live := m.Last.take()
		fromCache := live != nil
		if !fromCache {
			var err error
			if live, err = m.readOnce(ctx); err != nil {
				return err
			}
		}
		changed, err := set(live, w)
		if err != nil {
			return err
		}
		if fromCache && !changed {
			// Nothing to write, so nothing would check the copy against the API server's:
			// read the object, which the verification below then judges.
			if live, err = m.readOnce(ctx); err != nil {
				return err
			}
			if changed, err = set(live, w); err != nil {
				return err
			}
		}
		held, err = m.update(ctx, live, changed)
		return err
	})
	if err != nil {
		return err
	}
	if err := m.verify(ctx, held, w); err != nil {
		return err
	}
	if m.carried(held) {
		m.Last.keep(held)
	}
	return nil
}

// verify compares the split the API server holds with the one written, w. held is the write's
// response; when that does not carry the object, the object is read back.
func (m Managed) verify(ctx context.Context, held *unstructured.Unstructured, w Weights) error {
	if !m.carried(held) {
		live, err := m.read(ctx)
		if err != nil {
			return fmt.Errorf("reading back the weights written (%s): %w", SplitText(w), err)
		}
		held = live
	}
	got, err := m.ReadWeights(held)
	if err != nil {
		return fmt.Errorf("%s: wrote %s but the API server holds no readable split: %v", m.Ref(), SplitText(w), err)
	}
	if got != w {
		return fmt.Errorf("%s: wrote %s but the API server holds %s", m.Ref(), SplitText(w), SplitText(got))
	}
	return nil
}

// carried reports whether a write response holds the object itself (not nothing, nor a
// Status in its place).
func (m Managed) carried(obj *unstructured.Unstructured) bool {
	return obj != nil && obj.GetKind() == m.Kind && obj.GetName() == m.Name
}

// SplitText is w in words, for messages.
func SplitText(w Weights) string {
	out := fmt.Sprintf("primary=%d canary=%d", w.Primary, w.Canary)
	if w.Matched {
		out += " matched"
	}
	if w.Mirrored {
		out += " mirrored"
	}
	if w.Session != "" {
		out += " session=" + w.Session
	}
	if w.Expired != "" {
		out += " expired=" + w.Expired
	}
	return out
}

// GetRoutes reads the weights; the object read is kept for the next write (see HeldCache).
func (m Managed) GetRoutes(ctx context.Context) (Weights, error) {
	live, err := m.read(ctx)
	if err != nil {
		return Weights{}, err
	}
	if leftBehind(live) {
		// Handed over by a destroy that then stopped: no route of the release's any more
		// (the next Reconcile takes it over).
		return Weights{}, &NotFoundError{Ref: m.Ref() + " (left behind by a destroy)"}
	}
	m.Last.keepRead(live)
	w, err := m.ReadWeights(live)
	if err != nil {
		return Weights{}, fmt.Errorf("%s: %w", m.Ref(), err)
	}
	if w.Primary == 0 && w.Canary == 0 {
		return Weights{}, fmt.Errorf("%s: primary and canary weights are both 0", m.Ref())
	}
	return w, nil
}

// readOnce reads the object once; a missing object is an error.
func (m Managed) readOnce(ctx context.Context) (*unstructured.Unstructured, error) {
	live, err := GetOptional(ctx, m.Dynamic, m.GVR, m.Namespace, m.Name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", m.Ref(), err)
	}
	if live == nil {
		return nil, &NotFoundError{Ref: m.Ref()}
	}
	return live, nil
}

// read is readOnce under the retry policy.
func (m Managed) read(ctx context.Context) (*unstructured.Unstructured, error) {
	var live *unstructured.Unstructured
	err := WithRetry(ctx, func() (err error) {
		live, err = m.readOnce(ctx)
		return err
	})
	return live, err
}

// Drift compares the live object with what Reconcile would write, weights aside. diff words
// the differences between the wanted and the live spec; nil names the differing spec keys.
func (m Managed) Drift(ctx context.Context, diff func(want, live map[string]any) []string) ([]string, error) {
	live, err := Fetch(ctx, m.Dynamic, m.GVR, m.Namespace, m.Name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", m.Ref(), err)
	}
	if live == nil {
		return []string{m.Ref() + " is missing"}, nil
	}
	if leftBehind(live) {
		return []string{fmt.Sprintf("%s was left behind by a destroyed canary_release (annotation %s); apply takes it over",
			m.Ref(), AnnotationLeftBehind)}, nil
	}
	if !Owned(live, m.Spec) {
		if err := m.takeable(live); err != nil {
			// A route apply would refuse is drift to report, not a failure to read the cluster.
			return []string{err.Error()}, nil //nolint:nilerr // see above
		}
		return []string{fmt.Sprintf("%s exists without the label %s=%s; apply takes it over, rewriting its spec as the release's route", m.Ref(), LabelRelease, m.Spec.Name)}, nil
	}
	w, err := m.ReadWeights(live)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", m.Ref(), err)}, nil
	}
	liveSpec, _ := live.Object["spec"].(map[string]any)
	var out []string
	if diff != nil {
		for _, d := range diff(m.Render(w), liveSpec) {
			out = append(out, m.Ref()+": "+d)
		}
		return out, nil
	}
	for _, key := range DifferingKeys(m.Render(w), liveSpec) {
		out = append(out, fmt.Sprintf("%s: spec.%s differs from the generated one", m.Ref(), key))
	}
	return out, nil
}

// DifferingKeys lists the top-level keys whose values differ, sorted.
func DifferingKeys(a, b map[string]any) []string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		if !JSONEqual(a[k], b[k]) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// JSONEqual compares two unstructured values by their JSON form, so that int64 from the API
// server and float64 or int from elsewhere compare equal.
func JSONEqual(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// MergeStrings returns have with want's entries set, and whether that changed anything.
func MergeStrings(have, want map[string]string) (map[string]string, bool) {
	changed := false
	out := map[string]string{}
	for k, v := range have {
		out[k] = v
	}
	for k, v := range want {
		if cur, ok := out[k]; !ok || cur != v {
			out[k] = v
			changed = true
		}
	}
	return out, changed
}

// AsInt reads a JSON number held in an unstructured object.
func AsInt(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		return int(n), true
	case int:
		return n, true
	case int32:
		return int(n), true
	case float64:
		if n == float64(int64(n)) {
			return int(n), true
		}
	case json.Number:
		i, err := n.Int64()
		return int(i), err == nil
	}
	return 0, false
}

// DeepCopyMap is DeepCopy for an object.
func DeepCopyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, x := range m {
		out[k] = DeepCopy(x)
	}
	return out
}

// DeepCopy copies an unstructured value, turning Go ints into the int64 that
// unstructured objects must hold.
func DeepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		return DeepCopyMap(t)
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = DeepCopy(x)
		}
		return out
	case int:
		return int64(t)
	case int32:
		return int64(t)
	default:
		return t
	}
}

// StringMapToAny is m as an unstructured map.
func StringMapToAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// BackendWeight finds the entry of list whose nameKey equals name and returns its weight.
func BackendWeight(list []any, nameKey, name string) (int, bool) {
	for _, item := range list {
		m, _ := item.(map[string]any)
		if m == nil || m[nameKey] != name {
			continue
		}
		return AsInt(m["weight"])
	}
	return 0, false
}

// Without is m less key.
func Without(m map[string]any, key string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}
