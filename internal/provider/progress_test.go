package provider

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-log/tflogtest"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// entriesOf decodes the JSON log lines of one subsystem.
func entriesOf(t *testing.T, out *bytes.Buffer, module string) []map[string]any {
	t.Helper()
	all, err := tflogtest.MultilineJSONDecode(out)
	if err != nil {
		t.Fatal(err)
	}
	var entries []map[string]any
	for _, e := range all {
		if e["@module"] == module {
			entries = append(entries, e)
		}
	}
	return entries
}

// A progress line is a log line of the rollout subsystem with the release's fields, the
// credentials masked; a query is a DEBUG line with the rendered query.
func TestProgressLogsStructuredLines(t *testing.T) {
	var out bytes.Buffer
	c := &clients{secrets: []string{"s3cret-token"}}
	ctx := c.runContext(tflogtest.RootLogger(context.Background(), &out))
	report := c.progressReporter(ctx)
	v := 99.5
	report(rollout.Progress{Kind: rollout.ProgressCheck, Namespace: "test", Name: "podinfo", Phase: rollout.PhaseProgressing, Weight: 10,
		Metric: "request-success-rate", Value: &v, Range: "[min 99]", Message: "metric request-success-rate = 99.50 (s3cret-token)"})
	report(rollout.Progress{Kind: rollout.ProgressQuery, Namespace: "test", Name: "podinfo", Phase: rollout.PhaseProgressing, Weight: 10,
		Metric: "request-success-rate", Query: "sum(rate(x[1m]))", Value: &v, Message: "query of metric request-success-rate returned 99.5"})
	entries := entriesOf(t, &out, "provider.rollout")
	if len(entries) != 2 {
		t.Fatalf("%d rollout log lines, want 2: %v", len(entries), entries)
	}
	check, query := entries[0], entries[1]
	want := map[string]any{"@level": "info", "namespace": "test", "name": "podinfo", "phase": "Progressing", "weight": float64(10),
		"kind": "check", "metric": "request-success-rate", "value": 99.5, "range": "[min 99]"}
	for k, v := range want {
		if check[k] != v {
			t.Errorf("check line %s = %v, want %v (line %v)", k, check[k], v, check)
		}
	}
	if msg, _ := check["@message"].(string); strings.Contains(msg, "s3cret-token") {
		t.Errorf("the credential reached the log: %q", msg)
	}
	if query["@level"] != "debug" || query["query"] != "sum(rate(x[1m]))" || query["kind"] != "query" {
		t.Errorf("query line = %v, want a debug line with the query", query)
	}
}

// Each API write a run makes is a DEBUG line of the kubernetes subsystem, each read a TRACE
// line; requests outside a run are not logged there.
func TestAPIRequestsAreLogged(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer srv.Close()
	var out bytes.Buffer
	c := &clients{}
	root := tflogtest.RootLogger(context.Background(), &out)
	ctx := c.runContext(root)
	client := &http.Client{Transport: loggingTransport{next: http.DefaultTransport}}
	for _, call := range []struct {
		ctx    context.Context
		method string
	}{{ctx, http.MethodPut}, {ctx, http.MethodGet}, {root, http.MethodPost}} {
		req, _ := http.NewRequestWithContext(call.ctx, call.method, srv.URL+"/api/v1/namespaces/test/configmaps/podinfo-canary-release", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	entries := entriesOf(t, &out, "provider.kubernetes")
	if len(entries) != 2 {
		t.Fatalf("%d kubernetes log lines, want 2 (the run's PUT and GET): %v", len(entries), entries)
	}
	if e := entries[0]; e["@level"] != "debug" || e["method"] != "PUT" || e["path"] != "/api/v1/namespaces/test/configmaps/podinfo-canary-release" || e["status"] != float64(200) {
		t.Errorf("write line = %v, want DEBUG with the method, the path and the status", e)
	}
	if e := entries[1]; e["@level"] != "trace" || e["method"] != "GET" {
		t.Errorf("read line = %v, want TRACE", e)
	}
}

// terminal_progress wins over CANARY_TERMINAL_PROGRESS, which wins over the default (on); a
// value that is not a boolean is an error naming the variable.
func TestTerminalProgressSetting(t *testing.T) {
	off, on := false, true
	for _, tc := range []struct {
		attribute *bool
		env       string
		want      bool
		err       bool
	}{
		{want: true},
		{env: "false", want: false},
		{env: "0", want: false},
		{env: "true", want: true},
		{attribute: &on, env: "false", want: true},
		{attribute: &off, want: false},
		{env: "nope", err: true},
	} {
		t.Setenv(envTerminalProgress, tc.env)
		got, err := terminalProgress(tc.attribute)
		if (err != nil) != tc.err || (err == nil && got != tc.want) {
			t.Errorf("attribute %v, %s=%q: %v, %v; want %v (error %v)", tc.attribute, envTerminalProgress, tc.env, got, err, tc.want, tc.err)
		}
		if err != nil && !strings.Contains(err.Error(), envTerminalProgress) {
			t.Errorf("error %q does not name %s", err, envTerminalProgress)
		}
	}
}
