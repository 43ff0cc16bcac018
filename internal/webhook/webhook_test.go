package webhook

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var payload = Payload{Name: "podinfo", Namespace: "test", Phase: "Progressing", Checksum: "abc"}

// A webhook's failure reaches the status, the Terraform state and the apply's error: neither
// the token in its URL nor a long or multi-line answer may go with it.
func TestWebhookFailuresKeepTheURLSecret(t *testing.T) {
	const token = "T000-s3cret"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		// Some services echo the request back.
		_, _ = w.Write([]byte("invalid token for " + r.URL.String() + "\n\x1b[31m" + strings.Repeat("x", 1000)))
	}))
	defer srv.Close()
	c := Client{HTTP: srv.Client()}

	err := c.Call(context.Background(), Hook{URL: srv.URL + "/services/" + token + "?key=" + token, Timeout: time.Second}, payload)
	if err == nil {
		t.Fatal("a 403 must fail the hook")
	}
	msg := err.Error()
	if strings.Contains(msg, token) || strings.ContainsAny(msg, "\n\x1b") {
		t.Errorf("message leaks the URL or raw body: %q", msg)
	}
	if !strings.HasPrefix(msg, "status 403: invalid token for /…") || len([]rune(msg)) > 300 {
		t.Errorf("message = %q, want the status and a short excerpt of the answer", msg)
	}

	// A webhook that cannot be reached: net/http would quote the whole URL.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://user:pw@" + l.Addr().String()
	l.Close()
	err = c.Call(context.Background(), Hook{URL: closed + "/hooks/" + token, Timeout: time.Second}, payload)
	if err == nil || strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "pw") {
		t.Fatalf("error = %v, want one without the URL's token or password", err)
	}
	if !strings.Contains(err.Error(), "Post http://"+l.Addr().String()+": ") {
		t.Errorf("error = %v, want it to name the endpoint", err)
	}
}

// A webhook reached through the API server's service proxy and refused by RBAC: the message
// names the missing permission.
func TestWebhookRefusedByTheServiceProxyNamesThePermission(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"services \"loadtester:80\" is forbidden: User \"system:serviceaccount:ci:terraform\" cannot create resource \"services/proxy\" in API group \"\" in the namespace \"test\"","reason":"Forbidden","details":{"name":"loadtester:80","kind":"services"},"code":403}`))
	}))
	defer srv.Close()
	c := Client{HTTP: srv.Client()}
	err := c.Call(context.Background(), Hook{URL: srv.URL + "/", Timeout: time.Second}, payload)
	if err == nil || !strings.Contains(err.Error(), `cannot create resource "services/proxy" in API group "" in the namespace "test"`) {
		t.Fatalf("error = %v, want the API server's message naming the permission", err)
	}
}

// retries retries a 500 and then succeeds; without retries the same answer fails the check.
func TestHookRetries(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	c := Client{HTTP: srv.Client()}
	h := Hook{URL: srv.URL, Timeout: time.Second, Retries: 2}
	if err := c.Call(context.Background(), h, payload); err != nil || calls.Load() != 3 {
		t.Fatalf("error %v after %d calls, want success on the third", err, calls.Load())
	}
	calls.Store(0)
	h.Retries = 0
	if err := c.Call(context.Background(), h, payload); err == nil || calls.Load() != 1 {
		t.Fatalf("error %v after %d calls, want one failed call", err, calls.Load())
	}
}

// disable_tls reaches a webhook whose certificate is not trusted.
func TestHookDisableTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer srv.Close()
	c := Client{HTTP: http.DefaultClient}
	h := Hook{URL: srv.URL, Timeout: time.Second}
	if err := c.Call(context.Background(), h, payload); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("error = %v, want an untrusted certificate refused", err)
	}
	h.DisableTLS = true
	if err := c.Call(context.Background(), h, payload); err != nil {
		t.Fatalf("disable_tls: %v", err)
	}
}
