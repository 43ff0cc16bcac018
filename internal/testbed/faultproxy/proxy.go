// Package faultproxy is a fault-injecting reverse proxy in front of kube-apiserver, for tests:
// clients reach the API server through it, and it fails the requests a test chooses, at the
// moments the test chooses, with the errors (or dropped connections) a real API server or
// network would produce.
package faultproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"regexp"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Action is what the proxy does to a request that a rule fires on.
type Action int

const (
	// Conflict answers 409 Conflict, as for a stale resourceVersion (apierrors.IsConflict).
	Conflict Action = iota + 1
	// InternalError answers 500 (apierrors.IsInternalError).
	InternalError
	// TooManyRequests answers 429 with Retry-After: 1 (apierrors.IsTooManyRequests); client-go
	// waits a second and retries on its own.
	TooManyRequests
	// ServiceUnavailable answers 503 (apierrors.IsServiceUnavailable).
	ServiceUnavailable
	// DropResponse forwards the request, so a write takes effect upstream, then closes the
	// client's connection before it sees the response. Meant for requests whose responses end;
	// on a watch it would wait for the stream to end.
	DropResponse
	// DropRequest closes the client's connection without forwarding the request.
	DropRequest
)

// String names the action for test messages.
func (a Action) String() string {
	switch a {
	case Conflict:
		return "Conflict"
	case InternalError:
		return "InternalError"
	case TooManyRequests:
		return "TooManyRequests"
	case ServiceUnavailable:
		return "ServiceUnavailable"
	case DropResponse:
		return "DropResponse"
	case DropRequest:
		return "DropRequest"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Rule chooses requests to fail and how.
type Rule struct {
	// Method is the HTTP method to match (GET, PUT, PATCH, POST, DELETE); empty matches any.
	Method string
	// Path is a regular expression matched against the URL path (not the query), e.g.
	// `/namespaces/t1/configmaps/podinfo-canary-release$`.
	Path string
	// After lets the first After matching requests through before the rule fires.
	After int
	// Times is how often the rule fires at most; 0 means without limit.
	Times int
	// Action is what happens to a request the rule fires on.
	Action Action
}

// RuleHandle reports on a rule added to a Proxy.
type RuleHandle struct {
	rule Rule
	path *regexp.Regexp
	// matched and hits are guarded by the proxy's mutex.
	matched int
	hits    int
	proxy   *Proxy
}

// Hits is how many requests the rule has failed so far.
func (h *RuleHandle) Hits() int {
	h.proxy.mu.Lock()
	defer h.proxy.mu.Unlock()
	return h.hits
}

// Proxy listens on 127.0.0.1 over plain HTTP and forwards to the API server with the upstream
// credentials, so its clients need none. Its methods are safe for concurrent use.
type Proxy struct {
	// URL is the proxy's address, http://127.0.0.1:port.
	URL string

	transport http.RoundTripper
	forward   *httputil.ReverseProxy
	srv       *http.Server
	served    chan struct{} // closed when Serve returns

	mu       sync.Mutex
	rules    []*RuleHandle
	requests map[requestKey]int
	closed   bool
	inflight sync.WaitGroup // handlers running; Close waits for them

	closeOnce sync.Once
}

type requestKey struct{ method, path string }

// Start starts a proxy to the API server that upstream reaches. Close it when done.
func Start(upstream *rest.Config) (*Proxy, error) {
	transport, err := rest.TransportFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: upstream transport: %w", err)
	}
	target, _, err := rest.DefaultServerUrlFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: upstream URL: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{
		URL:       "http://" + ln.Addr().String(),
		transport: transport,
		requests:  map[requestKey]int{},
		served:    make(chan struct{}),
	}
	p.forward = &httputil.ReverseProxy{
		// SetURL also sets the Host header, which TLS upstreams may check against their name.
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: transport,
		// Watches stream; pass every event on at once.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// A client that went away (a stopped watch, Close) is no failure to report.
			if errors.Is(err, context.Canceled) {
				return
			}
			http.Error(w, "faultproxy: upstream: "+err.Error(), http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve)}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// RESTConfig returns a config for in-process clients that reach the API server through the proxy.
func (p *Proxy) RESTConfig() *rest.Config {
	return &rest.Config{Host: p.URL}
}

// Kubeconfig writes a kubeconfig file that reaches the API server through the proxy, for
// processes such as the terraform CLI and the provider it runs. The file holds no credentials:
// the proxy adds them.
func (p *Proxy) Kubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["faultproxy"] = &clientcmdapi.Cluster{Server: p.URL}
	cfg.AuthInfos["faultproxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["faultproxy"] = &clientcmdapi.Context{Cluster: "faultproxy", AuthInfo: "faultproxy"}
	cfg.CurrentContext = "faultproxy"
	return clientcmd.WriteToFile(*cfg, path)
}

// Add installs a rule and returns its handle. Each rule counts the requests it matches on its
// own; of the rules due to fire on a request, the one added first fires. Add panics on an
// invalid Path or Action, which are mistakes in the test.
func (p *Proxy) Add(rule Rule) *RuleHandle {
	if rule.Action < Conflict || rule.Action > DropRequest {
		panic(fmt.Sprintf("faultproxy: invalid action %v", rule.Action))
	}
	h := &RuleHandle{rule: rule, path: regexp.MustCompile(rule.Path), proxy: p}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, h)
	return h
}

// Clear removes all rules; their handles keep their hit counts.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Requests counts the requests the proxy has received, failed or not, whose method is method
// (empty matches any) and whose URL path matches pathRegexp. It panics on an invalid pathRegexp.
func (p *Proxy) Requests(method, pathRegexp string) int {
	re := regexp.MustCompile(pathRegexp)
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for k, count := range p.requests {
		if (method == "" || method == k.method) && re.MatchString(k.path) {
			n += count
		}
	}
	return n
}

// Close stops the proxy: it closes every client connection, which cancels the requests in
// flight upstream (watches included), and returns once all of the proxy's goroutines have ended.
func (p *Proxy) Close() {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		_ = p.srv.Close()
		p.inflight.Wait()
		<-p.served
		// Keep-alive connections to upstream hold goroutines of their own.
		utilnet.CloseIdleConnectionsFor(p.transport)
	})
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	action, ok := p.admit(r)
	if !ok {
		hangUp(w, r)
		return
	}
	defer p.inflight.Done()
	switch action {
	case 0:
		p.forward.ServeHTTP(w, r)
	case DropResponse:
		p.forward.ServeHTTP(&discardResponse{header: http.Header{}}, r)
		hangUp(w, r)
	case DropRequest:
		hangUp(w, r)
	default:
		writeStatus(w, r, action)
	}
}

// admit counts the request and picks the action of the rule that fires on it, 0 for none. It
// reports false once the proxy is closing; otherwise the caller must call p.inflight.Done.
func (p *Proxy) admit(r *http.Request) (Action, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, false
	}
	p.inflight.Add(1)
	p.requests[requestKey{r.Method, r.URL.Path}]++
	var action Action
	for _, h := range p.rules {
		if h.rule.Method != "" && h.rule.Method != r.Method || !h.path.MatchString(r.URL.Path) {
			continue
		}
		h.matched++
		due := h.matched > h.rule.After && (h.rule.Times == 0 || h.hits < h.rule.Times)
		if due && action == 0 {
			h.hits++
			action = h.rule.Action
		}
	}
	return action, true
}

// hangUp closes the client's connection with no response, as a crashed server or a broken
// network would.
func hangUp(w http.ResponseWriter, r *http.Request) {
	// Read the rest of the body first: closing a socket with unread data sends a reset, and
	// the client may then fail while still sending rather than while waiting for the response.
	_, _ = io.Copy(io.Discard, r.Body)
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Cannot happen over HTTP/1; this panic makes the server drop the connection anyway.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// writeStatus answers with the Status body the API server would send, so client-go turns it
// into the matching apierrors error.
func writeStatus(w http.ResponseWriter, r *http.Request, action Action) {
	const injected = " (injected by faultproxy)"
	var statusErr *apierrors.StatusError
	switch action {
	case Conflict:
		resource, name := resourceOf(r.URL.Path)
		statusErr = apierrors.NewConflict(resource, name, errors.New(
			"the object has been modified; please apply your changes to the latest version and try again"+injected))
	case InternalError:
		statusErr = apierrors.NewInternalError(errors.New("internal error" + injected))
	case TooManyRequests:
		statusErr = apierrors.NewTooManyRequests("too many requests"+injected, 1)
		w.Header().Set("Retry-After", "1")
	case ServiceUnavailable:
		statusErr = apierrors.NewServiceUnavailable("service unavailable" + injected)
	}
	status := statusErr.ErrStatus
	status.Kind, status.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status)
}

// resourceOf reads the resource and object name from an API path, for the Conflict message:
// /apis/apps/v1/namespaces/ns/deployments/podinfo/scale gives deployments.apps and podinfo.
func resourceOf(path string) (schema.GroupResource, string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var gr schema.GroupResource
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gr.Group, parts = parts[1], parts[3:]
	default:
		return gr, ""
	}
	// /namespaces/ns is the namespace itself; /namespaces/ns/<resource>... is inside it.
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	gr.Resource = parts[0]
	if len(parts) > 1 {
		return gr, parts[1]
	}
	return gr, ""
}

// discardResponse takes the upstream response of a DropResponse request, which the client
// never sees.
type discardResponse struct{ header http.Header }

func (d *discardResponse) Header() http.Header         { return d.header }
func (d *discardResponse) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardResponse) WriteHeader(int)             {}
