package meshsim

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

func TestSplitSummingTo90IsLogged(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil),
		[]runtime.Object{trafficSplit("podinfo", "podinfo", "podinfo-canary", 10, "podinfo-primary", 80)})...)
	// 2.5 s of 100 ms ticks: the entry repeats once a second, not once a tick.
	f.sim.Tick(f.now)
	for range 25 {
		f.now = f.now.Add(100 * time.Millisecond)
		f.sim.Tick(f.now)
	}
	got := f.sim.Invariants(ns)
	if len(got) != 3 {
		t.Fatalf("%d entries, want 3 (at 0 s, 1 s and 2 s): %v", len(got), got)
	}
	want := InvariantEntry{Namespace: ns, Object: "TrafficSplit/podinfo", Message: "weights sum to 90, not 100"}
	for i, e := range got {
		if e.Namespace != want.Namespace || e.Object != want.Object || e.Message != want.Message {
			t.Fatalf("entry %d = %+v, want %+v", i, e, want)
		}
		if i > 0 && e.Time.Sub(got[i-1].Time) < time.Second {
			t.Fatalf("entries %v and %v less than a second apart", got[i-1].Time, e.Time)
		}
	}

	// The file gets the same entries, one JSON object a line.
	var lines []InvariantEntry
	scanner := bufio.NewScanner(strings.NewReader(f.invOut.String()))
	for scanner.Scan() {
		var e InvariantEntry
		if err := json.Unmarshal(scanner.Bytes(), &e); err != nil {
			t.Fatalf("log line %q: %v", scanner.Text(), err)
		}
		lines = append(lines, e)
	}
	if len(lines) != 3 || lines[0].Message != want.Message || !lines[0].Time.Equal(got[0].Time) {
		t.Fatalf("log file entries %v, want the 3 entries above", lines)
	}
	if !strings.Contains(f.invOut.String(), `"object":"TrafficSplit/podinfo"`) {
		t.Fatalf("log file does not use the documented field names: %s", f.invOut.String())
	}
}

func TestHTTPEndpoints(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil),
		[]runtime.Object{trafficSplit("podinfo", "podinfo", "podinfo-canary", 10, "podinfo-primary", 90)})...)
	f.run(1) // canary has no pods: traffic sent there is logged
	srv := httptest.NewServer(f.sim.Handler())
	defer srv.Close()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	code, body := get("/metrics")
	if code != 200 || !strings.Contains(body, `osm_request_total{destination_kind="Deployment",destination_name="podinfo-primary"`) ||
		!strings.Contains(body, `osm_request_duration_ms_bucket{`) {
		t.Errorf("/metrics = %d, body lacks the OSM series:\n%s", code, body)
	}

	var entries []InvariantEntry
	code, body = get("/invariants?namespace=test")
	if err := json.Unmarshal([]byte(body), &entries); err != nil || code != 200 {
		t.Fatalf("/invariants = %d %q: %v", code, body, err)
	}
	if len(entries) == 0 || entries[0].Message != "traffic sent to Service test/podinfo-canary, which has no Ready pods" {
		t.Fatalf("/invariants?namespace=test = %v", entries)
	}
	if code, body := get("/invariants?namespace=other"); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("/invariants for a quiet namespace = %d %q, want []", code, body)
	}
}
