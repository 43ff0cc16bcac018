package kube

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/publicsuffix"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
)

// ServiceProxyURL maps a URL whose host names a cluster Service to the API server's
// service-proxy URL for it, so that Prometheus or a webhook inside the cluster can be reached
// from wherever Terraform runs. ok is false (and mapped empty) for any other URL.
//
// A host names a cluster Service when it is one of:
//
//	<service>.<namespace>.svc
//	<service>.<namespace>.svc.cluster.local
//	<service>.<namespace>            (Flagger's usual form, e.g. prometheus.monitoring:9090)
//
// The two-label form is ambiguous with public names such as example.com, so it counts as a
// Service only when its last label is not an ICANN top-level domain (com, org, io, dev, ...)
// and not one of the special-use names local, localhost or internal. Write the .svc form for a
// namespace that happens to be called like a TLD. IP addresses, single labels (localhost,
// prometheus) and any other host are never Services. The labels must be valid Service and
// namespace names. The port defaults to 80 for http and 443 for https.
func ServiceProxyURL(apiServerURL, rawURL string) (mapped string, ok bool, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", false, fmt.Errorf("invalid URL %q: %w", rawURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", false, nil
	}
	svc, ns, isService := serviceHost(u.Hostname())
	if !isService {
		return "", false, nil
	}
	api, err := url.Parse(apiServerURL)
	if err != nil || api.Scheme == "" || api.Host == "" {
		return "", false, fmt.Errorf("invalid API server URL %q", apiServerURL)
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	// The proxy subresource names the Service as [scheme:]name:port; plain http is the default.
	target := svc + ":" + port
	if u.Scheme == "https" {
		target = "https:" + target
	}
	tail := u.EscapedPath()
	if tail == "" {
		tail = "/"
	}
	escaped := strings.TrimRight(api.EscapedPath(), "/") +
		"/api/v1/namespaces/" + ns + "/services/" + target + "/proxy" + tail
	path, err := url.PathUnescape(escaped)
	if err != nil {
		return "", false, fmt.Errorf("invalid URL path in %q: %w", rawURL, err)
	}
	out := url.URL{Scheme: api.Scheme, Host: api.Host, Path: path, RawPath: escaped, RawQuery: u.RawQuery}
	return out.String(), true, nil
}

// IsServiceURL reports whether rawURL's host names a cluster Service (see ServiceProxyURL).
func IsServiceURL(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	_, _, ok := serviceHost(u.Hostname())
	return ok
}

// serviceHost reports whether host names a cluster Service, and which (see ServiceProxyURL).
func serviceHost(host string) (svc, ns string, ok bool) {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" || net.ParseIP(host) != nil {
		return "", "", false
	}
	labels := strings.Split(host, ".")
	switch {
	case len(labels) == 3 && labels[2] == "svc":
	case len(labels) == 5 && strings.Join(labels[2:], ".") == "svc.cluster.local":
	case len(labels) == 2 && !isPublicOrSpecialTLD(labels[1]):
	default:
		return "", "", false
	}
	svc, ns = labels[0], labels[1]
	if len(validation.IsDNS1035Label(svc)) > 0 || len(validation.IsDNS1123Label(ns)) > 0 {
		return "", "", false
	}
	return svc, ns, true
}

func isPublicOrSpecialTLD(label string) bool {
	switch label {
	case "local", "localhost", "internal":
		return true
	}
	suffix, icann := publicsuffix.PublicSuffix(label)
	return icann && suffix == label
}

// NewServiceProxyTransport returns a RoundTripper that sends requests for cluster Services
// (see ServiceProxyURL) through the API server with the credentials of cfg, and every other
// request through direct (http.DefaultTransport when nil).
func NewServiceProxyTransport(cfg *rest.Config, direct http.RoundTripper) (http.RoundTripper, error) {
	if direct == nil {
		direct = http.DefaultTransport
	}
	if cfg == nil {
		return direct, nil
	}
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("API server URL: %w", err)
	}
	viaAPI, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("API server transport: %w", err)
	}
	return &serviceProxyTransport{apiServer: base.String(), viaAPI: viaAPI, direct: direct}, nil
}

type serviceProxyTransport struct {
	apiServer string
	viaAPI    http.RoundTripper
	direct    http.RoundTripper
}

func (t *serviceProxyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	mapped, ok, err := ServiceProxyURL(t.apiServer, req.URL.String())
	if err != nil {
		return nil, err
	}
	if !ok {
		return t.direct.RoundTrip(req)
	}
	u, err := url.Parse(mapped)
	if err != nil {
		return nil, err
	}
	out := req.Clone(req.Context())
	out.URL = u
	out.Host = ""
	// The API server authenticates with the Authorization header and consumes it, so the
	// backend's own credentials cannot pass through the proxy; the kube credentials must win.
	out.Header.Del("Authorization")
	return t.viaAPI.RoundTrip(out)
}

// StatusMessage is the message of a Kubernetes Status object, such as the service proxy's
// refusal that names a missing permission, or "" for any other body.
func StatusMessage(body []byte) string {
	var status struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &status) != nil || status.Kind != "Status" {
		return ""
	}
	return status.Message
}
