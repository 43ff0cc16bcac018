package meshsim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

func TestParseLoadTest(t *testing.T) {
	hey := func(cmd string) webhookPayload {
		return webhookPayload{Name: "podinfo", Namespace: "test", Metadata: map[string]string{"cmd": cmd}}
	}
	for _, tc := range []struct {
		name    string
		payload webhookPayload
		target  string
		d       time.Duration
		rps     float64
		err     string
	}{
		{name: "Flagger's docs", payload: hey("hey -z 1m -q 10 -c 2 http://podinfo-canary.test:9898/"),
			target: "test/podinfo-canary", d: time.Minute, rps: 20},
		{name: "flag=value, quoted header, full DNS name, path to hey", payload: hey(`/usr/bin/hey -z=30s -q 5 -c 4 -h2 -H 'X-Canary: always yes' -m GET http://podinfo-canary.other.svc.cluster.local:9898/api`),
			target: "other/podinfo-canary", d: 30 * time.Second, rps: 20},
		{name: "bare Service in the payload's namespace, -c defaults to 50", payload: hey("hey -z 10s -q 1 http://podinfo-canary/"),
			target: "test/podinfo-canary", d: 10 * time.Second, rps: 50},
		{name: "-n requests at the rate", payload: hey("hey -n 100 -q 10 -c 2 http://podinfo-canary.test/"),
			target: "test/podinfo-canary", d: 5 * time.Second, rps: 20},
		{name: "longer than the task timeout", payload: hey("hey -z 3h -q 1 -c 1 http://podinfo-canary.test/"),
			target: "test/podinfo-canary", d: time.Hour, rps: 1},
		{name: "short form", payload: webhookPayload{Name: "podinfo", Namespace: "test", Metadata: map[string]string{"target": "podinfo-canary.test", "duration": "30s", "rps": "20"}},
			target: "test/podinfo-canary", d: 30 * time.Second, rps: 20},

		{name: "no metadata", payload: webhookPayload{Name: "podinfo", Namespace: "test"}, err: "metadata needs cmd"},
		{name: "blocking task", payload: webhookPayload{Metadata: map[string]string{"type": "bash", "cmd": "curl x"}}, err: `metadata.type "bash"`},
		{name: "not hey", payload: hey("curl -s http://podinfo-canary.test:9898/"), err: "only hey commands"},
		{name: "no rate", payload: hey("hey -z 1m http://podinfo-canary.test:9898/"), err: "set -q"},
		{name: "no URL", payload: hey("hey -z 1m -q 1"), err: "has no URL"},
		{name: "flag without value", payload: hey("hey -q 1 http://podinfo-canary.test/ -z"), err: "-z needs a value"},
		{name: "bad duration", payload: hey("hey -z soon -q 1 http://podinfo-canary.test/"), err: `-z "soon"`},
		{name: "external host", payload: hey("hey -z 1m -q 1 http://app.example.com/"), err: "not a cluster Service name"},
		{name: "unclosed quote", payload: hey(`hey -H 'X: y -q 1 http://podinfo-canary.test/`), err: "unclosed quote"},
		{name: "short form without rps", payload: webhookPayload{Metadata: map[string]string{"target": "podinfo-canary.test", "duration": "30s"}}, err: "metadata.rps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt, err := parseLoadTest(tc.payload)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if lt.Target != tc.target || lt.Duration != tc.d || lt.RPS != tc.rps {
				t.Fatalf("target %s, duration %v, rps %v; want %s, %v, %v", lt.Target, lt.Duration, lt.RPS, tc.target, tc.d, tc.rps)
			}
		})
	}
}

// loadTester serves the simulator's HTTP endpoints to a test.
type loadTester struct {
	t   *testing.T
	url string
}

func newLoadTester(f *fixture) *loadTester {
	srv := httptest.NewServer(f.sim.Handler())
	f.t.Cleanup(srv.Close)
	return &loadTester{t: f.t, url: srv.URL + "/loadtest"}
}

// post sends a webhook payload whose metadata is the given key, value pairs.
func (l *loadTester) post(name string, metadata ...string) (int, string) {
	l.t.Helper()
	p := webhookPayload{Name: name, Namespace: ns, Phase: "Progressing", Checksum: "abc", Metadata: map[string]string{}}
	for i := 0; i+1 < len(metadata); i += 2 {
		p.Metadata[metadata[i]] = metadata[i+1]
	}
	body, _ := json.Marshal(p)
	resp, err := http.Post(l.url, "application/json", bytes.NewReader(body))
	if err != nil {
		l.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func (l *loadTester) list() []LoadTest {
	l.t.Helper()
	resp, err := http.Get(l.url)
	if err != nil {
		l.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []LoadTest
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		l.t.Fatalf("GET /loadtest = %d: %v", resp.StatusCode, err)
	}
	return out
}

const heyCanary = "hey -z 5s -q 5 -c 2 http://podinfo-canary.test:9898/"

func TestLoadTestIsDeduplicated(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil), deployment("podinfo", 1, true, nil))...)
	l := newLoadTester(f)

	code, body := l.post("podinfo", "cmd", heyCanary)
	if code != http.StatusAccepted || !strings.Contains(body, `"started":true`) || !strings.Contains(body, `"target":"test/podinfo-canary"`) {
		t.Fatalf("first POST = %d %s", code, body)
	}
	// The webhook is called every analysis interval: the same test is not started again.
	code, body = l.post("podinfo", "cmd", heyCanary)
	if code != http.StatusAccepted || !strings.Contains(body, `"started":false`) {
		t.Fatalf("second POST = %d %s, want 202 with started false", code, body)
	}
	// Another release or another command is another test.
	l.post("other", "cmd", heyCanary)
	l.post("podinfo", "cmd", strings.Replace(heyCanary, "-q 5", "-q 6", 1))
	if got := l.list(); len(got) != 3 || got[0].Name != "other" || got[1].Command == got[2].Command {
		t.Fatalf("GET /loadtest = %+v, want three tests", got)
	}

	if code, body := l.post("podinfo", "cmd", "curl http://podinfo-canary.test/"); code != http.StatusBadRequest || !strings.Contains(body, "only hey") {
		t.Fatalf("POST with curl = %d %s, want 400", code, body)
	}
	resp, err := http.Post(l.url, "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("POST with a broken payload = %d, want 400", resp.StatusCode)
	}

	// Once a test has run its course, the same payload starts it again.
	f.run(6)
	if got := l.list(); len(got) != 0 {
		t.Fatalf("after their 5s: %+v still running", got)
	}
	if code, body := l.post("podinfo", "cmd", heyCanary); code != http.StatusAccepted || !strings.Contains(body, `"started":true`) {
		t.Fatalf("POST after the end = %d %s, want a new test", code, body)
	}
}

// Test traffic goes straight to the canary Service's pods while the TrafficSplit keeps every
// user request on the primary, the way a blue/green analysis runs; it ends after the duration.
func TestLoadTestReachesTheCanaryPodsOnly(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil),
		deployment("podinfo", 2, true, map[string]string{AnnotationErrorRate: "0.5"}),
		[]runtime.Object{trafficSplit("podinfo", "podinfo", "podinfo-primary", 100, "podinfo-canary", 0)})...)
	l := newLoadTester(f)
	f.run(1)
	l.post("podinfo", "cmd", heyCanary) // 10 requests a second for 5 seconds
	tester, users := "source_name="+LoadTesterName, "source_name="+SourceName
	canary := func(sel ...string) float64 {
		return f.sum(MetricOSMRequests, match(append(osmDest("podinfo"), sel...)...))
	}

	f.run(2)
	if got := canary(tester); got != 20 {
		t.Fatalf("after 2s the canary answered %v test requests, want 20", got)
	}
	if got := canary(users); got != 0 {
		t.Fatalf("the canary answered %v user requests through a 100/0 split", got)
	}
	for _, pod := range []string{"podinfo-5d8f-0", "podinfo-5d8f-1"} {
		if got := canary(tester, "destination_pod="+pod); got != 10 {
			t.Errorf("pod %s answered %v test requests, want 10", pod, got)
		}
	}
	// The built-in OSM success-rate query reads the canary pods' answers.
	if got := f.successRate(MetricOSMRequests, "response_code", osmDest("podinfo")...); got != 50 {
		t.Errorf("canary success rate = %v, want 50", got)
	}
	if got := f.series(MetricOSMDuration, match(append(osmDest("podinfo"), tester)...)); len(got) != 2 {
		t.Errorf("%d duration series for the canary pods, want 2", len(got))
	}
	if got := l.list(); len(got) != 1 || got[0].Answered != 20 || got[0].OK != 10 || got[0].Started.IsZero() {
		t.Errorf("GET /loadtest = %+v, want one test with 20 answers, 10 OK", got)
	}

	f.run(3)
	if got := canary(tester); got != 50 {
		t.Fatalf("after 5s the canary answered %v test requests, want 50", got)
	}
	if got := l.list(); len(got) != 0 {
		t.Fatalf("GET /loadtest after the duration = %+v, want none", got)
	}
	// The next tick no longer declares the tester's series.
	f.run(1)
	if got := f.series(MetricOSMRequests, match(tester)); len(got) != 0 {
		t.Fatalf("%d test series left after the test ended", len(got))
	}
	if got := f.sim.Invariants(ns); len(got) != 0 {
		t.Errorf("invariant entries: %v", got)
	}
}

// Test traffic to a Service without Ready pods fails, but is not user traffic: the canary
// Service of a scaled-down canary is no invariant violation.
func TestLoadTestWithoutReadyPodsFailsQuietly(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, false, nil))...)
	l := newLoadTester(f)
	f.run(1)
	l.post("podinfo", "target", "podinfo-canary.test", "duration", "10s", "rps", "10")
	f.run(2)

	if got := f.sum(MetricOSMRequests, match(append(osmDest("podinfo"), "response_code=503")...)); got != 20 {
		t.Errorf("503s on the not Ready canary pod = %v, want 20", got)
	}
	if got := l.list(); len(got) != 1 || got[0].Unavailable != 20 || got[0].Answered != 0 {
		t.Errorf("GET /loadtest = %+v, want 20 unavailable", got)
	}
	if got := f.sim.Invariants(""); len(got) != 0 {
		t.Errorf("test traffic logged as invariant violations: %v", got)
	}
}

func TestServiceOf(t *testing.T) {
	for host, want := range map[string]types.NamespacedName{
		"podinfo-canary.test":                   {Namespace: "test", Name: "podinfo-canary"},
		"podinfo-canary.test.svc":               {Namespace: "test", Name: "podinfo-canary"},
		"podinfo-canary.test.svc.cluster.local": {Namespace: "test", Name: "podinfo-canary"},
		"podinfo-canary":                        {Namespace: "caller", Name: "podinfo-canary"},
	} {
		if got, err := serviceOf(host, "caller"); err != nil || got != want {
			t.Errorf("serviceOf(%q) = %v, %v; want %v", host, got, err, want)
		}
	}
}
