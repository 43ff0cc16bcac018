package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// countingProxy forwards to one upstream and counts the requests by kind. The bench puts one
// in front of the API server and one in front of Prometheus for the scale scenarios, so the
// counts are the provider's own requests, not those of the controllers, kwok or other tests
// that share the stack (which the servers' own metrics would include).
type countingProxy struct {
	URL    string
	mu     sync.Mutex
	counts map[string]int
	srv    *http.Server
}

// requestKind names a request for the breakdown: the verb ("GET", "LIST", "WATCH", "POST",
// "PUT", ...) and the resource, with its subresource ("PUT deployments/scale"), for the API
// server; the path for anything else.
func requestKind(r *http.Request, api bool) string {
	if !api {
		return r.URL.Path
	}
	parts := resourcePath(strings.Split(strings.Trim(r.URL.Path, "/"), "/"))
	resource := ""
	switch len(parts) {
	case 0:
	case 1, 2:
		resource = parts[0]
	default:
		resource = parts[0] + "/" + parts[2]
	}
	verb := r.Method
	if r.Method == http.MethodGet {
		switch {
		case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
			verb = "WATCH"
		case len(parts) == 1:
			verb = "LIST"
		}
	}
	return strings.TrimSpace(verb + " " + resource)
}

// resourcePath strips /api/v1, /apis/group/version and namespaces/ns from a request path, so
// that what is left is resource[/name[/subresource]]: /api/v1/namespaces/ns/pods is a list,
// /api/v1/namespaces/ns/pods/x one object. A path that is neither gives nil.
func resourcePath(parts []string) []string {
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return nil
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	return parts
}

func startProxy(upstream *url.URL, transport http.RoundTripper, api bool) (*countingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{URL: "http://" + ln.Addr().String(), counts: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.Transport = transport
	// Watches stream; flush every event at once.
	rp.FlushInterval = -1
	// A provider process that exits cancels its open watches; that is no error worth a line.
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if !errors.Is(err, context.Canceled) {
			progress("proxy %s %s: %v", r.Method, r.URL.Path, err)
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.counts[requestKind(r, api)]++
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// startAPIProxy fronts the API server; the bench's credentials are added on the way out.
func startAPIProxy(cfg *rest.Config) (*countingProxy, error) {
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	return startProxy(u, transport, true)
}

// snapshot returns a copy of the counts.
func (p *countingProxy) snapshot() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.counts))
	for k, v := range p.counts {
		out[k] = v
	}
	return out
}

func (p *countingProxy) close() { _ = p.srv.Shutdown(context.Background()) }

// delta is after − before, per kind and in total.
func delta(before, after map[string]int) (map[string]int, int) {
	out := map[string]int{}
	total := 0
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
			total += d
		}
	}
	return out, total
}

// writeProxyKubeconfig writes a kubeconfig that reaches the API server through the proxy,
// which adds the credentials, so the file holds none.
func writeProxyKubeconfig(path, proxyURL string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["bench"] = &clientcmdapi.Cluster{Server: proxyURL}
	cfg.AuthInfos["bench"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "bench"}
	cfg.CurrentContext = "bench"
	return clientcmd.WriteToFile(*cfg, path)
}
