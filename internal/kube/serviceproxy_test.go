package kube

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func TestServiceProxyURL(t *testing.T) {
	const api = "https://10.0.0.1:6443"
	cases := []struct {
		raw  string
		want string // "" means not a cluster Service
	}{
		// Flagger's usual two-label form.
		{"http://prometheus.monitoring:9090", api + "/api/v1/namespaces/monitoring/services/prometheus:9090/proxy/"},
		{"http://prometheus.monitoring:9090/api/v1/query?query=up", api + "/api/v1/namespaces/monitoring/services/prometheus:9090/proxy/api/v1/query?query=up"},
		{"http://podinfo-canary.test:9898/token", api + "/api/v1/namespaces/test/services/podinfo-canary:9898/proxy/token"},
		{"http://prometheus.monitoring", api + "/api/v1/namespaces/monitoring/services/prometheus:80/proxy/"},
		{"https://prometheus.monitoring", api + "/api/v1/namespaces/monitoring/services/https:prometheus:443/proxy/"},
		{"https://prometheus.monitoring:8443/x", api + "/api/v1/namespaces/monitoring/services/https:prometheus:8443/proxy/x"},
		// .svc and .svc.cluster.local forms, any case, trailing dot.
		{"http://osm-prometheus.osm-system.svc:7070", api + "/api/v1/namespaces/osm-system/services/osm-prometheus:7070/proxy/"},
		{"http://Prometheus.Monitoring.svc.cluster.local:9090/", api + "/api/v1/namespaces/monitoring/services/prometheus:9090/proxy/"},
		{"http://prometheus.monitoring.svc.cluster.local.:9090/", api + "/api/v1/namespaces/monitoring/services/prometheus:9090/proxy/"},
		// A namespace named like a TLD needs the .svc form.
		{"http://prometheus.dev.svc:9090", api + "/api/v1/namespaces/dev/services/prometheus:9090/proxy/"},
		// Escaped path segments survive.
		{"http://hook.test/a%2Fb?x=1&y=2", api + "/api/v1/namespaces/test/services/hook:80/proxy/a%2Fb?x=1&y=2"},

		// Not Services.
		{"http://localhost:9090", ""},
		{"http://prometheus:9090", ""},
		{"http://127.0.0.1:9090", ""},
		{"http://[::1]:9090", ""},
		{"http://example.com", ""},
		{"https://prometheus.io/docs", ""},
		{"http://prometheus.dev:9090", ""},
		{"http://printer.local", ""},
		{"http://grafana.internal", ""},
		{"http://prom.example.com:9090", ""},
		{"http://a.b.c.svc.cluster.local", ""},
		{"http://prometheus.monitoring.svc.other.domain", ""},
		{"http://under_score.test", ""},
		{"http://9lives.test", ""}, // a Service name must start with a letter
		{"ftp://prometheus.monitoring", ""},
	}
	for _, c := range cases {
		got, ok, err := ServiceProxyURL(api, c.raw)
		if err != nil {
			t.Errorf("%s: unexpected error %v", c.raw, err)
			continue
		}
		if ok != (c.want != "") || got != c.want {
			t.Errorf("%s:\n got  %q (ok=%v)\n want %q", c.raw, got, ok, c.want)
		}
	}
}

func TestServiceProxyURLKeepsAPIServerPathPrefix(t *testing.T) {
	got, ok, err := ServiceProxyURL("https://rancher.example.com/k8s/clusters/c-1/", "http://prometheus.monitoring:9090/api/v1/query")
	if err != nil || !ok {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	want := "https://rancher.example.com/k8s/clusters/c-1/api/v1/namespaces/monitoring/services/prometheus:9090/proxy/api/v1/query"
	if got != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestServiceProxyURLErrors(t *testing.T) {
	if _, _, err := ServiceProxyURL("https://api", "http://%zz"); err == nil {
		t.Error("invalid URL accepted")
	}
	if _, _, err := ServiceProxyURL("not a url", "http://prometheus.monitoring"); err == nil {
		t.Error("invalid API server URL accepted")
	}
	// An invalid API server URL does not matter for URLs that are not proxied.
	if _, ok, err := ServiceProxyURL("not a url", "http://example.com"); err != nil || ok {
		t.Errorf("ok=%v err=%v", ok, err)
	}
}

func TestServiceProxyTransport(t *testing.T) {
	type seen struct{ path, query, auth, custom, method, body string }
	record := func(into *seen) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			*into = seen{r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Authorization"), r.Header.Get("X-Custom"), r.Method, string(b)}
			_, _ = io.WriteString(w, "ok")
		}
	}
	var viaAPI, direct seen
	apiServer := httptest.NewServer(record(&viaAPI))
	defer apiServer.Close()
	other := httptest.NewServer(record(&direct))
	defer other.Close()

	rt, err := NewServiceProxyTransport(&rest.Config{Host: apiServer.URL, BearerToken: "kube-token"}, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: rt}

	req, _ := http.NewRequest(http.MethodPost, "http://prometheus.monitoring:9090/api/v1/query?query=up", strings.NewReader("a=b"))
	req.Header.Set("Authorization", "Bearer prometheus-token")
	req.Header.Set("X-Custom", "yes")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := seen{"/api/v1/namespaces/monitoring/services/prometheus:9090/proxy/api/v1/query", "query=up", "Bearer kube-token", "yes", "POST", "a=b"}
	if viaAPI != want {
		t.Errorf("through the API server:\n got  %+v\n want %+v", viaAPI, want)
	}
	if req.Header.Get("Authorization") != "Bearer prometheus-token" {
		t.Error("the caller's request was modified")
	}

	req, _ = http.NewRequest(http.MethodGet, other.URL+"/hook?x=1", nil)
	req.Header.Set("Authorization", "Bearer own")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want = seen{"/hook", "x=1", "Bearer own", "", "GET", ""}
	if direct != want {
		t.Errorf("direct:\n got  %+v\n want %+v", direct, want)
	}
}

func TestServiceProxyTransportWithoutKubeIsDirect(t *testing.T) {
	rt, err := NewServiceProxyTransport(nil, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	if rt != http.DefaultTransport {
		t.Fatalf("got %T, want the direct transport", rt)
	}
}
