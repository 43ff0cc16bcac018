package faultproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	namespace   = "t1"
	cmName      = "podinfo-canary-release"
	cmPath      = "/api/v1/namespaces/" + namespace + "/configmaps/" + cmName
	cmPathRegex = "/configmaps/" + cmName + "$"
	listPath    = "/api/v1/namespaces/" + namespace + "/configmaps"
	token       = "upstream-secret"
)

// fakeAPIServer serves one ConfigMap (GET, PUT) and a watch on its collection that sends two
// events and then stays open. It demands the bearer token, so requests that reach it prove
// the proxy added the upstream credentials.
type fakeAPIServer struct {
	*httptest.Server
	watchEnded chan struct{} // closed when the watch handler returns

	mu   sync.Mutex
	cm   corev1.ConfigMap
	seen map[string]int // "METHOD path" → count
}

func startFakeAPIServer(t *testing.T) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{
		watchEnded: make(chan struct{}),
		seen:       map[string]int{},
		cm: corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: namespace, ResourceVersion: "1"},
			Data:       map[string]string{"step": "0"},
		},
	}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+token {
		writeJSON(w, http.StatusUnauthorized, apierrors.NewUnauthorized("no token").ErrStatus)
		return
	}
	f.mu.Lock()
	f.seen[r.Method+" "+r.URL.Path]++
	f.mu.Unlock()
	switch {
	case r.URL.Path == cmPath && r.Method == http.MethodGet:
		f.mu.Lock()
		cm := f.cm
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, cm)
	case r.URL.Path == cmPath && r.Method == http.MethodPut:
		// client-go sends built-in types as protobuf.
		var cm corev1.ConfigMap
		body, err := io.ReadAll(r.Body)
		if err == nil {
			_, _, err = scheme.Codecs.UniversalDeserializer().Decode(body, nil, &cm)
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, apierrors.NewBadRequest(err.Error()).ErrStatus)
			return
		}
		f.mu.Lock()
		rv, _ := strconv.Atoi(f.cm.ResourceVersion)
		cm.TypeMeta = f.cm.TypeMeta
		cm.ResourceVersion = strconv.Itoa(rv + 1)
		f.cm = cm
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, cm)
	case r.URL.Path == listPath && r.URL.Query().Get("watch") == "true":
		defer close(f.watchEnded)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		f.mu.Lock()
		cm := f.cm
		f.mu.Unlock()
		for _, typ := range []watch.EventType{watch.Added, watch.Modified} {
			_ = json.NewEncoder(w).Encode(map[string]any{"type": typ, "object": cm})
			w.(http.Flusher).Flush()
		}
		// Stay open as a real watch does: only flushing gets the events to the client.
		<-r.Context().Done()
	default:
		writeJSON(w, http.StatusNotFound, apierrors.NewNotFound(corev1.Resource("configmaps"), r.URL.Path).ErrStatus)
	}
}

func (f *fakeAPIServer) saw(method, path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[method+" "+path]
}

func (f *fakeAPIServer) data() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cm.Data["step"]
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	if s, ok := v.(metav1.Status); ok {
		s.Kind, s.APIVersion = "Status", "v1"
		v = s
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// setup starts a fake API server, a proxy in front of it, and a clientset through the proxy.
func setup(t *testing.T) (*fakeAPIServer, *Proxy, kubernetes.Interface) {
	t.Helper()
	upstream := startFakeAPIServer(t)
	p, err := Start(&rest.Config{Host: upstream.URL, BearerToken: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close) // runs before the upstream's Close, which waits for open requests
	cs, err := kubernetes.NewForConfig(p.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return upstream, p, cs
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// update sets the ConfigMap's step through cs.
func update(ctx context.Context, cs kubernetes.Interface, step int) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: namespace},
		Data:       map[string]string{"step": strconv.Itoa(step)},
	}
	_, err := cs.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

func isAPIStatus(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}

func TestPassesRequestsThroughWithoutRules(t *testing.T) {
	upstream, p, cs := setup(t)
	ctx := ctxFor(t)

	// The fake upstream must really reject requests without the token, or passing through
	// would not show that the proxy adds credentials.
	resp, err := http.Get(upstream.URL + cmPath)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("fake upstream without token: status %d, want 401", resp.StatusCode)
	}

	cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, cmName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if cm.Data["step"] != "0" {
		t.Fatalf("get: data %v", cm.Data)
	}
	if err := update(ctx, cs, 1); err != nil {
		t.Fatalf("update: %v", err)
	}
	if got := upstream.data(); got != "1" {
		t.Fatalf("upstream step = %q, want 1", got)
	}
	if n := upstream.saw(http.MethodPut, cmPath); n != 1 {
		t.Fatalf("upstream saw %d PUTs, want 1", n)
	}
	if n := p.Requests(http.MethodGet, cmPathRegex); n != 1 {
		t.Fatalf("Requests(GET) = %d, want 1", n)
	}
	if n := p.Requests(http.MethodPut, cmPathRegex); n != 1 {
		t.Fatalf("Requests(PUT) = %d, want 1", n)
	}
	if n := p.Requests("", "/configmaps/"); n != 2 {
		t.Fatalf("Requests(any) = %d, want 2", n)
	}
}

func TestConflictFiresTimesThenPasses(t *testing.T) {
	upstream, p, cs := setup(t)
	ctx := ctxFor(t)
	rule := p.Add(Rule{Method: http.MethodPut, Path: cmPathRegex, Times: 2, Action: Conflict})

	for i := 1; i <= 2; i++ {
		err := update(ctx, cs, i)
		if !apierrors.IsConflict(err) {
			t.Fatalf("update %d: err = %v, want a conflict", i, err)
		}
		// The rule is for PUT only.
		if _, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, cmName, metav1.GetOptions{}); err != nil {
			t.Fatalf("get after update %d: %v", i, err)
		}
	}
	if err := update(ctx, cs, 3); err != nil {
		t.Fatalf("update 3: %v", err)
	}
	if got := rule.Hits(); got != 2 {
		t.Fatalf("Hits = %d, want 2", got)
	}
	if n := upstream.saw(http.MethodPut, cmPath); n != 1 {
		t.Fatalf("upstream saw %d PUTs, want only the third", n)
	}
	if n := p.Requests(http.MethodPut, cmPathRegex); n != 3 {
		t.Fatalf("Requests(PUT) = %d, want 3", n)
	}
}

func TestStatusActionsDecodeAsAPIErrors(t *testing.T) {
	for _, tc := range []struct {
		action Action
		is     func(error) bool
	}{
		{Conflict, apierrors.IsConflict},
		{InternalError, apierrors.IsInternalError},
		{TooManyRequests, apierrors.IsTooManyRequests},
		{ServiceUnavailable, apierrors.IsServiceUnavailable},
	} {
		t.Run(tc.action.String(), func(t *testing.T) {
			upstream, p, cs := setup(t)
			ctx := ctxFor(t)
			p.Add(Rule{Path: cmPathRegex, Action: tc.action})
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: namespace}}
			// No retries: client-go would otherwise wait out the 429's Retry-After.
			err := cs.CoreV1().RESTClient().Put().Namespace(namespace).Resource("configmaps").Name(cmName).
				Body(cm).MaxRetries(0).Do(ctx).Error()
			if !tc.is(err) {
				t.Fatalf("err = %v (%T), want %v", err, err, tc.action)
			}
			// client-go makes an error of the same kind from a bare status code; the message
			// shows it decoded the proxy's Status body.
			if !strings.Contains(err.Error(), "injected by faultproxy") {
				t.Fatalf("err = %v, want the Status message from the proxy", err)
			}
			if tc.action == TooManyRequests {
				if secs, ok := apierrors.SuggestsClientDelay(err); !ok || secs != 1 {
					t.Fatalf("SuggestsClientDelay = %d, %v; want 1, true", secs, ok)
				}
			}
			if n := upstream.saw(http.MethodPut, cmPath); n != 0 {
				t.Fatalf("upstream saw %d PUTs, want 0", n)
			}
		})
	}
}

func TestClientGoRetriesTooManyRequests(t *testing.T) {
	upstream, p, cs := setup(t)
	ctx := ctxFor(t)
	rule := p.Add(Rule{Method: http.MethodPut, Path: cmPathRegex, Times: 1, Action: TooManyRequests})
	if err := update(ctx, cs, 1); err != nil {
		t.Fatalf("update: %v, want client-go to retry after Retry-After", err)
	}
	if rule.Hits() != 1 || upstream.saw(http.MethodPut, cmPath) != 1 {
		t.Fatalf("hits %d, upstream PUTs %d; want 1, 1", rule.Hits(), upstream.saw(http.MethodPut, cmPath))
	}
}

func TestAfterSkipsFirstMatches(t *testing.T) {
	upstream, p, cs := setup(t)
	ctx := ctxFor(t)
	rule := p.Add(Rule{Method: http.MethodPut, Path: cmPathRegex, After: 1, Times: 1, Action: Conflict})

	if err := update(ctx, cs, 1); err != nil {
		t.Fatalf("update 1: %v, want it let through", err)
	}
	if err := update(ctx, cs, 2); !apierrors.IsConflict(err) {
		t.Fatalf("update 2: err = %v, want a conflict", err)
	}
	if err := update(ctx, cs, 3); err != nil {
		t.Fatalf("update 3: %v", err)
	}
	if rule.Hits() != 1 {
		t.Fatalf("Hits = %d, want 1", rule.Hits())
	}
	if n := upstream.saw(http.MethodPut, cmPath); n != 2 {
		t.Fatalf("upstream saw %d PUTs, want 2", n)
	}
}

func TestFirstAddedDueRuleFires(t *testing.T) {
	_, p, cs := setup(t)
	ctx := ctxFor(t)
	conflict := p.Add(Rule{Path: cmPathRegex, Times: 1, Action: Conflict})
	internal := p.Add(Rule{Path: cmPathRegex, Times: 1, Action: InternalError})

	if err := update(ctx, cs, 1); !apierrors.IsConflict(err) {
		t.Fatalf("update 1: err = %v, want a conflict", err)
	}
	if err := update(ctx, cs, 2); !apierrors.IsInternalError(err) {
		t.Fatalf("update 2: err = %v, want an internal error", err)
	}
	if err := update(ctx, cs, 3); err != nil {
		t.Fatalf("update 3: %v", err)
	}
	if conflict.Hits() != 1 || internal.Hits() != 1 {
		t.Fatalf("hits %d, %d; want 1, 1", conflict.Hits(), internal.Hits())
	}
}

func TestClearRemovesRules(t *testing.T) {
	_, p, cs := setup(t)
	ctx := ctxFor(t)
	rule := p.Add(Rule{Method: http.MethodPut, Path: cmPathRegex, Action: InternalError})
	for i := 1; i <= 2; i++ {
		if err := update(ctx, cs, i); !apierrors.IsInternalError(err) {
			t.Fatalf("update %d: err = %v, want an internal error", i, err)
		}
	}
	p.Clear()
	if err := update(ctx, cs, 3); err != nil {
		t.Fatalf("update after Clear: %v", err)
	}
	if rule.Hits() != 2 {
		t.Fatalf("Hits = %d, want 2", rule.Hits())
	}
}

func TestDropResponseForwardsThenHangsUp(t *testing.T) {
	upstream, p, cs := setup(t)
	ctx := ctxFor(t)
	rule := p.Add(Rule{Method: http.MethodPut, Path: cmPathRegex, Times: 1, Action: DropResponse})

	err := update(ctx, cs, 7)
	if err == nil || isAPIStatus(err) {
		t.Fatalf("update: err = %v, want a transport error", err)
	}
	if got := upstream.data(); got != "7" {
		t.Fatalf("upstream step = %q, want the dropped write (7) applied", got)
	}
	if n := p.Requests(http.MethodPut, cmPathRegex); n != 1 {
		t.Fatalf("proxy saw %d PUTs, want 1 (no retry)", n)
	}
	if rule.Hits() != 1 {
		t.Fatalf("Hits = %d, want 1", rule.Hits())
	}
	// The proxy keeps serving after a hang-up.
	cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, cmName, metav1.GetOptions{})
	if err != nil || cm.Data["step"] != "7" {
		t.Fatalf("get after drop: %v, %v", cm, err)
	}
}

func TestDropRequestNeverReachesUpstream(t *testing.T) {
	upstream, p, cs := setup(t)
	ctx := ctxFor(t)
	rule := p.Add(Rule{Method: http.MethodPut, Path: cmPathRegex, Times: 1, Action: DropRequest})

	err := update(ctx, cs, 7)
	if err == nil || isAPIStatus(err) {
		t.Fatalf("update: err = %v, want a transport error", err)
	}
	if n := upstream.saw(http.MethodPut, cmPath); n != 0 {
		t.Fatalf("upstream saw %d PUTs, want 0", n)
	}
	if got := upstream.data(); got != "0" {
		t.Fatalf("upstream step = %q, want unchanged 0", got)
	}
	if rule.Hits() != 1 {
		t.Fatalf("Hits = %d, want 1", rule.Hits())
	}
}

func TestWatchStreamsThrough(t *testing.T) {
	_, _, cs := setup(t)
	ctx := ctxFor(t)
	w, err := cs.CoreV1().ConfigMaps(namespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, want := range []watch.EventType{watch.Added, watch.Modified} {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed before %s", want)
			}
			cm, isCM := ev.Object.(*corev1.ConfigMap)
			if ev.Type != want || !isCM || cm.Name != cmName {
				t.Fatalf("event %s %T, want %s of the ConfigMap", ev.Type, ev.Object, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event within 5s: the proxy holds back the stream", want)
		}
	}
}

func TestCloseEndsOpenWatches(t *testing.T) {
	upstream, p, cs := setup(t)
	ctx := ctxFor(t)
	w, err := cs.CoreV1().ConfigMaps(namespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	<-w.ResultChan()

	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	for name, ch := range map[string]<-chan struct{}{
		"proxy Close":       closed,
		"upstream watch":    upstream.watchEnded,
		"client watch chan": drained(w.ResultChan()),
	} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not end within 5s of Close", name)
		}
	}
}

// drained reads events until the channel closes, then closes the returned channel.
func drained(events <-chan watch.Event) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for range events {
		}
		close(done)
	}()
	return done
}

func TestKubeconfigReachesUpstreamThroughProxy(t *testing.T) {
	_, p, _ := setup(t)
	ctx := ctxFor(t)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := p.Kubeconfig(path); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != p.URL || cfg.BearerToken != "" {
		t.Fatalf("kubeconfig host %q token %q; want %q and no token", cfg.Host, cfg.BearerToken, p.URL)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Add(Rule{Method: http.MethodGet, Path: cmPathRegex, Times: 1, Action: ServiceUnavailable})
	if _, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, cmName, metav1.GetOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("first get: err = %v, want service unavailable", err)
	}
	if _, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, cmName, metav1.GetOptions{}); err != nil {
		t.Fatalf("second get: %v", err)
	}
}

func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/t1/configmaps/podinfo":                             "configmaps podinfo",
		"/apis/apps/v1/namespaces/t1/deployments/podinfo/scale":                "deployments.apps podinfo",
		"/apis/split.smi-spec.io/v1alpha2/namespaces/t1/trafficsplits/podinfo": "trafficsplits.split.smi-spec.io podinfo",
		"/api/v1/namespaces/t1":                                                "namespaces t1",
		"/apis/apps/v1/namespaces/t1/deployments":                              "deployments.apps ",
		"/healthz": " ",
	} {
		gr, name := resourceOf(path)
		if got := fmt.Sprintf("%s %s", gr, name); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}
