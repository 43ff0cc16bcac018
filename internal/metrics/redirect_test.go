package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A backend that redirects to another host does not get its credential carried there: Go keeps
// a custom header such as an API key on a redirect to another host (it drops only
// Authorization and Cookie), so the redirect is not followed. One on the same host is.
func TestRedirectToAnotherHostKeepsTheCredential(t *testing.T) {
	const secret = "k3y-s3cret"
	var stolen atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stolen.Store(r.Header.Get("X-Api-Key"))
		_, _ = w.Write([]byte(`{"value": 1}`))
	}))
	defer other.Close()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.URL+"/steal", http.StatusFound)
		case "/moved":
			http.Redirect(w, r, "/here", http.StatusFound)
		default:
			_, _ = w.Write([]byte(`{"value": 2}`))
		}
	}))
	defer backend.Close()
	client, err := NewHTTPClient(HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}

	req, _ := http.NewRequest(http.MethodGet, backend.URL+"/away", nil)
	req.Header.Set("X-Api-Key", secret)
	_, err = Do(client, req, "vendor", secret)
	if got, _ := stolen.Load().(string); got != "" {
		t.Fatalf("the other host got the header X-Api-Key=%q", got)
	}
	if err == nil || !strings.Contains(err.Error(), "another host: not followed") || strings.Contains(err.Error(), secret) {
		t.Errorf("error %v, want the refused redirect named, without the key", err)
	}

	req, _ = http.NewRequest(http.MethodGet, backend.URL+"/moved", nil)
	req.Header.Set("X-Api-Key", secret)
	if _, err := Do(client, req, "vendor", secret); err != nil {
		t.Errorf("a redirect on the backend's own host: %v", err)
	}
}
