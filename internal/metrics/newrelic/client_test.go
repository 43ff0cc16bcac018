package newrelic

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// nerdGraph answers as NerdGraph does, recording what it was asked.
func nerdGraph(t *testing.T, answer string) (*httptest.Server, *[]map[string]any, *[]string) {
	t.Helper()
	var bodies []map[string]any
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("request body: %v", err)
		}
		bodies = append(bodies, body)
		keys = append(keys, r.Header.Get("API-Key"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(answer))
	}))
	t.Cleanup(srv.Close)
	return srv, &bodies, &keys
}

func TestQueryPostsNRQLWithTheWindowAndReadsTheResult(t *testing.T) {
	srv, bodies, keys := nerdGraph(t, `{"data":{"actor":{"account":{"nrql":{"results":[{"result":98.5}]}}}}}`)
	c, err := New(Config{AccountID: 42, APIKey: "NRAK-secret", Address: srv.URL + "/graphql"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.ForInterval(30*time.Second).Query(context.Background(), "SELECT percentage(count(*), WHERE error IS false) FROM Transaction")
	if err != nil || got != 98.5 {
		t.Fatalf("Query = %v, %v; want 98.5", got, err)
	}
	vars := (*bodies)[0]["variables"].(map[string]any)
	if vars["accountId"] != float64(42) || vars["query"] != "SELECT percentage(count(*), WHERE error IS false) FROM Transaction SINCE 30 seconds ago" {
		t.Errorf("variables = %v", vars)
	}
	if !strings.Contains((*bodies)[0]["query"].(string), "nrql(query: $query)") || (*keys)[0] != "NRAK-secret" {
		t.Errorf("query %q with API-Key %q", (*bodies)[0]["query"], (*keys)[0])
	}
}

func TestGraphQLErrorsFailTheQueryWithoutTheKey(t *testing.T) {
	srv, _, _ := nerdGraph(t, `{"data":null,"errors":[{"message":"NRQL Syntax Error near NRAK-secret"}]}`)
	c, err := New(Config{AccountID: 1, APIKey: "NRAK-secret", Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Query(context.Background(), "SELEC x")
	if err == nil || !errors.Is(err, metrics.ErrQuery) || !strings.Contains(err.Error(), "NRQL Syntax Error") || strings.Contains(err.Error(), "NRAK-secret") {
		t.Fatalf("err = %v; want a query error naming NerdGraph's message, the key redacted", err)
	}
}

func TestNoRowAndNullAreNoValues(t *testing.T) {
	for _, answer := range []string{
		`{"data":{"actor":{"account":{"nrql":{"results":[]}}}}}`,
		`{"data":{"actor":{"account":{"nrql":{"results":[{"result":null}]}}}}}`,
	} {
		srv, _, _ := nerdGraph(t, answer)
		c, _ := New(Config{AccountID: 1, APIKey: "k", Address: srv.URL})
		if _, err := c.Query(context.Background(), "SELECT 1"); !errors.Is(err, metrics.ErrNoValues) {
			t.Errorf("%s: err = %v; want no values", answer, err)
		}
	}
}

func TestRegionPicksNerdGraphURL(t *testing.T) {
	for region, want := range map[string]string{"": "https://api.newrelic.com/graphql", "EU": "https://api.eu.newrelic.com/graphql",
		"jp": "https://api.jp.newrelic.com/graphql", "GOV": "https://gov-api.newrelic.com/graphql"} {
		c, err := New(Config{AccountID: 1, APIKey: "k", Region: region})
		if err != nil || c.url != want {
			t.Errorf("region %q: %v, %v; want %s", region, c, err, want)
		}
	}
	if _, err := New(Config{AccountID: 1, APIKey: "k", Region: "mars"}); err == nil || !strings.Contains(err.Error(), "US, EU, JP, GOV") {
		t.Errorf("region mars: %v", err)
	}
}
