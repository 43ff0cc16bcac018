package metrics

import (
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDoKeepsCredentialsOutOfErrors: an answer that echoes the key, and a failed connection
// to a URL that carries one in its query, give query errors without the key.
func TestDoKeepsCredentialsOutOfErrors(t *testing.T) {
	const secret = "k3y-s3cret"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "invalid key "+r.Header.Get("X-Key"), http.StatusForbidden)
	}))
	defer srv.Close()
	client, err := NewHTTPClient(HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{srv.URL + "/q", "http://127.0.0.1:1/q?api_key=" + secret} {
		req, _ := http.NewRequest(http.MethodGet, target, nil)
		req.Header.Set("X-Key", secret)
		_, err := Do(client, req, "vendor", secret)
		if err == nil || !errors.Is(err, ErrQuery) || strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error %v, want a query error without the key", target, err)
		}
	}
}

func TestValue(t *testing.T) {
	if _, err := Value("v", math.NaN()); !errors.Is(err, ErrNoValues) {
		t.Errorf("NaN: %v", err)
	}
	if _, err := Value("v", math.Inf(1)); !errors.Is(err, ErrNotFinite) {
		t.Errorf("+Inf: %v", err)
	}
	if v, err := Value("v", 2.5); v != 2.5 || err != nil {
		t.Errorf("2.5: %v, %v", v, err)
	}
}
