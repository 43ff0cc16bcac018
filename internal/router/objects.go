package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// fieldManager names this provider in managedFields.
const fieldManager = ManagedByValue

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

// configError is a problem in the user's configuration or referenced objects (as opposed
// to an API failure). Drift reports it as text; Reconcile returns it.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

func configErrorf(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...)}
}

// ourLabels are put on every generated object.
func ourLabels(s Spec) map[string]string {
	return map[string]string{LabelManagedBy: ManagedByValue, LabelRelease: s.Name}
}

func owned(obj *unstructured.Unstructured, s Spec) bool {
	return obj.GetLabels()[LabelRelease] == s.Name
}

// leftBehind reports an object a destroyed release handed over to the user (see handover): it
// belongs to no release, and the next release of the same apex may take it over.
func leftBehind(obj *unstructured.Unstructured) bool {
	_, ok := obj.GetAnnotations()[AnnotationLeftBehind]
	return ok && obj.GetLabels()[LabelRelease] == ""
}

func notOwnedError(kind string, obj *unstructured.Unstructured, s Spec) error {
	return fmt.Errorf("%s %s/%s already exists and is not managed by canary_release %q (missing label %s=%s)",
		kind, obj.GetNamespace(), obj.GetName(), s.Name, LabelRelease, s.Name)
}

// getOptional reads an object once; it returns nil, nil when the object does not exist.
// Inside a withRetry attempt; elsewhere use fetch.
func getOptional(ctx context.Context, c dynamic.Interface, gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, error) {
	obj, err := c.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}

// fetch is getOptional under the retry policy.
func fetch(ctx context.Context, c dynamic.Interface, gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, error) {
	var obj *unstructured.Unstructured
	err := withRetry(ctx, func() (err error) {
		obj, err = getOptional(ctx, c, gvr, ns, name)
		return err
	})
	return obj, err
}

// deleteOwned deletes an object this release generated; a missing object or one that
// someone else owns is left alone.
func deleteOwned(ctx context.Context, c dynamic.Interface, gvr schema.GroupVersionResource, ns, name string, s Spec) error {
	return withRetry(ctx, func() error {
		obj, err := getOptional(ctx, c, gvr, ns, name)
		if err != nil || obj == nil || !owned(obj, s) {
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

// managed is one generated object that carries the weights (TrafficSplit, canary
// ApisixRoute, RouteTable, UpstreamGroup).
type managed struct {
	c         dynamic.Interface
	s         Spec
	gvr       schema.GroupVersionResource
	kind      string
	name      string
	namespace string
	// spec renders the desired spec for the given weights.
	spec func(Weights) map[string]any
	// weights reads the weights back from a live object.
	weights func(*unstructured.Unstructured) (Weights, error)
	// setWeights puts w onto a live object and reports whether that changed it; nil means
	// rewrite, which needs spec.
	setWeights func(live *unstructured.Unstructured, w Weights) (bool, error)
	// labels and annotations wanted on the object besides ourLabels.
	labels, annotations map[string]string
	// provider names the mesh_provider in errors; can says which of Weights' extras spec and
	// setWeights write. Other routers refuse them rather than silently split by weight.
	provider string
	can      Capabilities
	// last, when set, holds the object as the API server last returned it to this router.
	last *heldCache
}

// heldCache is a weight object as the API server last returned it to a router: the next
// weight write starts from it instead of a read. Its resourceVersion makes the API server
// refuse that write (a Conflict, then a fresh read) if anyone changed the object since, so
// the write is as safe as a read-then-write and costs one request instead of two.
type heldCache struct {
	obj *unstructured.Unstructured
	// read says obj came from a read (getRoutes), not from a write's response.
	read bool
}

// take returns the cached object and empties the cache: a failed write starts afresh.
func (c *heldCache) take() *unstructured.Unstructured {
	obj, _ := c.takeRead()
	return obj
}

// takeRead is take that also tells whether the object came from a read.
func (c *heldCache) takeRead() (*unstructured.Unstructured, bool) {
	if c == nil || c.obj == nil {
		return nil, false
	}
	obj, read := c.obj, c.read
	c.obj, c.read = nil, false
	return obj, read
}

// keep holds a write's response.
func (c *heldCache) keep(obj *unstructured.Unstructured) {
	if c != nil && obj != nil {
		c.obj, c.read = obj.DeepCopy(), false
	}
}

// keepRead holds an object just read.
func (c *heldCache) keepRead(obj *unstructured.Unstructured) {
	if c != nil && obj != nil {
		c.obj, c.read = obj.DeepCopy(), true
	}
}

func (m managed) ref() string { return m.kind + " " + m.namespace + "/" + m.name }

func (m managed) api() dynamic.ResourceInterface { return m.c.Resource(m.gvr).Namespace(m.namespace) }

func (m managed) wantLabels() map[string]string {
	out := map[string]string{}
	for k, v := range m.labels {
		out[k] = v
	}
	for k, v := range ourLabels(m.s) {
		out[k] = v
	}
	return out
}

func (m managed) build(w Weights) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": m.spec(w)}}
	obj.SetAPIVersion(m.gvr.GroupVersion().String())
	obj.SetKind(m.kind)
	obj.SetName(m.name)
	obj.SetNamespace(m.namespace)
	obj.SetLabels(m.wantLabels())
	if len(m.annotations) > 0 {
		obj.SetAnnotations(m.annotations)
	}
	return obj
}

// reconcile creates the object at 100/0, or rewrites everything but the weights. An object
// left behind by a destroyed release (see leftBehind) is taken over.
//
// A run reads the weights (recovery) just before it reconciles, so reconcile starts from the
// object that read returned, when it holds one: its resourceVersion makes the API server
// refuse a write over anyone else's change, and then reconcile reads afresh. A write's older
// response is no such proof, so it is read again.
func (m managed) reconcile(ctx context.Context) error {
	return withRetry(ctx, func() error {
		live, fromCache := m.last.takeRead()
		if !fromCache {
			var err error
			if live, err = getOptional(ctx, m.c, m.gvr, m.namespace, m.name); err != nil {
				return fmt.Errorf("reading %s: %w", m.ref(), err)
			}
		}
		if live == nil {
			_, err := m.api().Create(ctx, m.build(Weights{Primary: 100}), metav1.CreateOptions{FieldManager: fieldManager})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(m.gvr.GroupResource(), m.name, err)
			}
			if err != nil {
				return fmt.Errorf("creating %s: %w", m.ref(), err)
			}
			return nil
		}
		if !owned(live, m.s) && !leftBehind(live) {
			return notOwnedError(m.kind, live, m.s)
		}
		w, err := m.weights(live)
		if err != nil {
			// Unreadable weights (or a left-behind object, which holds none): the safe split.
			w = Weights{Primary: 100}
		}
		held, err := m.update(ctx, live, m.rewrite(live, w))
		if fromCache && apierrors.IsNotFound(errors.Unwrap(err)) {
			// Deleted since it was read: the retry reads again, and creates it.
			return apierrors.NewConflict(m.gvr.GroupResource(), m.name, err)
		}
		if err == nil && m.carried(held) {
			m.last.keep(held)
		}
		return err
	})
}

// rewrite puts the desired spec with weights w, our labels and annotations onto live, and
// reports whether that changed it.
func (m managed) rewrite(live *unstructured.Unstructured, w Weights) bool {
	changed := false
	want := m.spec(w)
	if !jsonEqual(live.Object["spec"], want) {
		live.Object["spec"] = want
		changed = true
	}
	if labels, ok := mergeStrings(live.GetLabels(), m.wantLabels()); ok {
		live.SetLabels(labels)
		changed = true
	}
	annotations, ok := mergeStrings(live.GetAnnotations(), m.annotations)
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
func (m managed) update(ctx context.Context, live *unstructured.Unstructured, changed bool) (*unstructured.Unstructured, error) {
	if !changed {
		return live, nil
	}
	held, err := m.api().Update(ctx, live, metav1.UpdateOptions{FieldManager: fieldManager})
	if err != nil {
		return nil, fmt.Errorf("updating %s: %w", m.ref(), err)
	}
	return held, nil
}

// setRoutes writes w and verifies that the API server holds it.
func (m managed) setRoutes(ctx context.Context, w Weights) error {
	if err := ValidateWeights(w); err != nil {
		return err
	}
	if err := m.can.check(m.provider, m.s, w); err != nil {
		return fmt.Errorf("%s: %w", m.ref(), err)
	}
	set := m.setWeights
	if set == nil {
		set = func(live *unstructured.Unstructured, w Weights) (bool, error) { return m.rewrite(live, w), nil } //nolint:unparam // the setWeights signature: other routers' setters fail
	}
	var held *unstructured.Unstructured
	err := withRetry(ctx, func() error {
		live := m.last.take()
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
		m.last.keep(held)
	}
	return nil
}

// verify compares the split the API server holds with the one written, w. held is the write's
// response; when that does not carry the object, the object is read back.
func (m managed) verify(ctx context.Context, held *unstructured.Unstructured, w Weights) error {
	if !m.carried(held) {
		live, err := m.read(ctx)
		if err != nil {
			return fmt.Errorf("reading back the weights written (%s): %w", split(w), err)
		}
		held = live
	}
	got, err := m.weights(held)
	if err != nil {
		return fmt.Errorf("%s: wrote %s but the API server holds no readable split: %v", m.ref(), split(w), err)
	}
	if got != w {
		return fmt.Errorf("%s: wrote %s but the API server holds %s", m.ref(), split(w), split(got))
	}
	return nil
}

// carried reports whether a write response holds the object itself (not nothing, nor a
// Status in its place).
func (m managed) carried(obj *unstructured.Unstructured) bool {
	return obj != nil && obj.GetKind() == m.kind && obj.GetName() == m.name
}

func split(w Weights) string {
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
	return out
}

// getRoutes reads the weights; the object read is kept for the next write (see heldCache).
func (m managed) getRoutes(ctx context.Context) (Weights, error) {
	live, err := m.read(ctx)
	if err != nil {
		return Weights{}, err
	}
	m.last.keepRead(live)
	w, err := m.weights(live)
	if err != nil {
		return Weights{}, fmt.Errorf("%s: %w", m.ref(), err)
	}
	if w.Primary == 0 && w.Canary == 0 {
		return Weights{}, fmt.Errorf("%s: primary and canary weights are both 0", m.ref())
	}
	return w, nil
}

// readOnce reads the object once; a missing object is an error.
func (m managed) readOnce(ctx context.Context) (*unstructured.Unstructured, error) {
	live, err := getOptional(ctx, m.c, m.gvr, m.namespace, m.name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", m.ref(), err)
	}
	if live == nil {
		return nil, &NotFoundError{Ref: m.ref()}
	}
	return live, nil
}

// read is readOnce under the retry policy.
func (m managed) read(ctx context.Context) (*unstructured.Unstructured, error) {
	var live *unstructured.Unstructured
	err := withRetry(ctx, func() (err error) {
		live, err = m.readOnce(ctx)
		return err
	})
	return live, err
}

// drift compares the live object with what reconcile would write, weights aside. diff words
// the differences between the wanted and the live spec; nil names the differing spec keys.
func (m managed) drift(ctx context.Context, diff func(want, live map[string]any) []string) ([]string, error) {
	live, err := fetch(ctx, m.c, m.gvr, m.namespace, m.name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", m.ref(), err)
	}
	if live == nil {
		return []string{m.ref() + " is missing"}, nil
	}
	if leftBehind(live) {
		return []string{fmt.Sprintf("%s was left behind by a destroyed canary_release (annotation %s); apply takes it over",
			m.ref(), AnnotationLeftBehind)}, nil
	}
	if !owned(live, m.s) {
		return []string{notOwnedError(m.kind, live, m.s).Error()}, nil
	}
	w, err := m.weights(live)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", m.ref(), err)}, nil
	}
	liveSpec, _ := live.Object["spec"].(map[string]any)
	var out []string
	if diff != nil {
		for _, d := range diff(m.spec(w), liveSpec) {
			out = append(out, m.ref()+": "+d)
		}
		return out, nil
	}
	for _, key := range differingKeys(m.spec(w), liveSpec) {
		out = append(out, fmt.Sprintf("%s: spec.%s differs from the generated one", m.ref(), key))
	}
	return out, nil
}

// differingKeys lists the top-level keys whose values differ, sorted.
func differingKeys(a, b map[string]any) []string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		if !jsonEqual(a[k], b[k]) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// jsonEqual compares two unstructured values by their JSON form, so that int64 from the API
// server and float64 or int from elsewhere compare equal.
func jsonEqual(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// mergeStrings returns have with want's entries set, and whether that changed anything.
func mergeStrings(have, want map[string]string) (map[string]string, bool) {
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

// asInt reads a JSON number held in an unstructured object.
func asInt(v any) (int, bool) {
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

// deepCopy copies an unstructured value, turning Go ints into the int64 that
// unstructured objects must hold.
// deepCopyMap is deepCopy for an object.
func deepCopyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, x := range m {
		out[k] = deepCopy(x)
	}
	return out
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		return deepCopyMap(t)
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = deepCopy(x)
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

func stringMapToAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
