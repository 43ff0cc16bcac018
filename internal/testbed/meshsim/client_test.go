package meshsim

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

// fakeProxy stands in for Traefik: it answers as the mode says and remembers the Host it saw.
type fakeProxy struct {
	mode atomic.Value // "404", "pod", "502", "reset"
	host atomic.Value
}

func (p *fakeProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.host.Store(r.Host)
	switch p.mode.Load() {
	case "pod":
		w.Header().Set(HeaderPod, "podinfo-primary-5d8f-0")
		w.Header().Set(HeaderImage, "podinfo:6.0.0")
		w.WriteHeader(http.StatusOK)
	case "502":
		http.Error(w, "Bad Gateway", http.StatusBadGateway)
	case "reset":
		panic(http.ErrAbortHandler)
	default:
		http.NotFound(w, r)
	}
}

// The client sends real requests with the route's Host through the proxy; once a pod has
// answered on the route, an answer no pod gave is an invariant entry naming the route and what
// the client saw, and the pods' answers are counted by image and by the split at sending time.
func TestClientJudgesAnswersThroughProxy(t *testing.T) {
	proxy := &fakeProxy{}
	proxy.mode.Store("404")
	server := httptest.NewServer(proxy)
	t.Cleanup(server.Close)

	f := newFixture(t, RouterGVRs, objects(
		podinfoServices(map[string]string{AnnotationRPS: "50"}),
		deployment("podinfo-primary", 2, true, nil),
		[]runtime.Object{ingressRoute(toTraefikService), traefikService(90, 10)},
	)...)
	f.sim.cfg.ProxyAddress = strings.TrimPrefix(server.URL, "http://")
	f.sim.cfg.Tick = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.sim.runClient(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	sent := func() int64 {
		for _, cr := range f.sim.ClientRoutes(ns) {
			return cr.Sent
		}
		return 0
	}
	// Before any pod answered, the proxy may not know the route yet: nothing is judged.
	f.waitFor("requests through the proxy", func() bool { return sent() >= 5 })
	if got := proxy.host.Load(); got != "app.example.com" {
		t.Errorf("the proxy saw Host %v, want app.example.com", got)
	}
	if got := f.sim.Invariants(ns); len(got) != 0 {
		t.Fatalf("entries before the route was ever answered: %v", got)
	}

	proxy.mode.Store("pod")
	f.waitFor("answers counted", func() bool {
		routes := f.sim.ClientRoutes(ns)
		return len(routes) == 1 && routes[0].Answered["podinfo:6.0.0"] >= 5 &&
			routes[0].BySplit["podinfo-primary=90,podinfo-canary=10"]["podinfo:6.0.0"] >= 5
	})
	if got := f.sim.Invariants(ns); len(got) != 0 {
		t.Fatalf("entries while pods answered: %v", got)
	}

	for _, tc := range []struct{ mode, saw string }{
		{"502", "client: GET http://app.example.com/ through the proxy: 502 from the proxy, not from a pod (no X-Canary-Pod header)"},
		{"reset", "client: GET http://app.example.com/ through the proxy: error "},
	} {
		proxy.mode.Store(tc.mode)
		f.waitFor("an entry for "+tc.mode, func() bool {
			for _, e := range f.sim.Invariants(ns) {
				// The canary's Service has weight 10 and no pod: the entry names it.
				if e.Object == "IngressRoute/podinfo" && strings.HasPrefix(e.Message, tc.saw) &&
					strings.HasSuffix(e.Message, ClientEmptyServices+ns+"/podinfo-canary") {
					return true
				}
			}
			return false
		})
	}
}
