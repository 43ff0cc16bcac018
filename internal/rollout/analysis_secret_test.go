package rollout

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

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
	a := analyzer{rel: testRelease(Analysis{}), http: srv.Client()}

	err := a.callHook(context.Background(), Webhook{Name: "slack", URL: srv.URL + "/services/" + token + "?key=" + token, Timeout: time.Second}, PhaseProgressing, "abc")
	if err == nil {
		t.Fatal("a 403 must fail the hook")
	}
	msg := err.Error()
	if strings.Contains(msg, token) || strings.ContainsAny(msg, "\n\x1b") {
		t.Errorf("message leaks the URL or raw body: %q", msg)
	}
	if !strings.HasPrefix(msg, "status 403: invalid token for /…") || len(msg) > 200 {
		t.Errorf("message = %q, want the status and a short excerpt of the answer", msg)
	}

	// A webhook that cannot be reached: net/http would quote the whole URL.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://user:pw@" + l.Addr().String()
	l.Close()
	err = a.callHook(context.Background(), Webhook{Name: "slack", URL: closed + "/hooks/" + token, Timeout: time.Second}, PhaseProgressing, "abc")
	if err == nil || strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "pw") {
		t.Fatalf("error = %v, want one without the URL's token or password", err)
	}
	if !strings.Contains(err.Error(), "Post http://"+l.Addr().String()+": ") {
		t.Errorf("error = %v, want it to name the endpoint", err)
	}
}
