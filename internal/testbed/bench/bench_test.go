package main

import (
	"math"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{137, 137.2, 136.9, 140, 1}, 137},
	} {
		in := slices.Clone(c.in)
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("median reordered its input: %v, was %v", c.in, in)
		}
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median of no samples = %v, want NaN", got)
	}
}

func TestRatios(t *testing.T) {
	// Flagger: 137 s for 5 steps of 10 s.
	if got := rawRatio(137*time.Second, 5, 10*time.Second); math.Abs(got-2.74) > 1e-9 {
		t.Errorf("rawRatio = %v, want 2.74", got)
	}
	got := overheadRatio(53*time.Second, 500*time.Millisecond, 1500*time.Millisecond, 5, 10*time.Second)
	if math.Abs(got-1.02) > 1e-9 {
		t.Errorf("overheadRatio = %v, want (53 - 0.5 - 1.5) / 50 = 1.02", got)
	}
	if got := rawRatio(time.Second, 0, time.Second); !math.IsNaN(got) {
		t.Errorf("rawRatio without steps = %v, want NaN", got)
	}
	if got := perUnit(6300, 100, 5); got != 12.6 {
		t.Errorf("perUnit = %v, want 12.6", got)
	}
	if got := perUnit(1, 0, 5); !math.IsNaN(got) {
		t.Errorf("perUnit without releases = %v, want NaN", got)
	}
}

func TestKeyValueLine(t *testing.T) {
	line := keyValueLine([]figure{
		{"raw_ratio", []float64{1.1, 1.05, 1.3}},
		{"rollback_s", []float64{20.014, 20.026}},
		{"refresh_200_s", nil},
	})
	if want := "raw_ratio=1.10 rollback_s=20.02 refresh_200_s=nan"; line != want {
		t.Errorf("keyValueLine = %q, want %q", line, want)
	}
}

func TestTableShowsMedianSpreadAndVerdict(t *testing.T) {
	out := table([]row{
		{fig: figure{"raw_ratio", []float64{1.3, 1.1, 1.25}}, flagger: "2.7", goal: goal{1.2, "<= 1.2"}},
		{fig: figure{"refresh_200_s", []float64{4}}, unit: "s", goal: goal{10, "<= 10"}},
		{fig: figure{"init_s", nil}, unit: "s", goal: goal{10, "<= 10"}},
	})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("table has %d lines, want header, rule and 3 rows:\n%s", len(lines), out)
	}
	for i, want := range [][]string{
		{"raw_ratio", "1.25", "1.10..1.30", "3", "2.7", "MISSED"},
		{"refresh_200_s", "4.00s", "met"},
		{"init_s", "-", "not measured"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+2], w) {
				t.Errorf("row %q lacks %q", lines[i+2], w)
			}
		}
	}
	for _, l := range lines {
		if strings.HasSuffix(l, " ") {
			t.Errorf("line %q ends in spaces", l)
		}
	}
}

func TestParseVmHWM(t *testing.T) {
	status := "Name:\tterraform-provi\nVmPeak:\t 1306844 kB\nVmSize:\t 1306844 kB\nVmHWM:\t  120476 kB\nVmRSS:\t   98304 kB\n"
	kb, err := parseVmHWM([]byte(status))
	if err != nil || kb != 120476 {
		t.Errorf("parseVmHWM = %d, %v; want 120476", kb, err)
	}
	if _, err := parseVmHWM([]byte("Name:\tx\nVmRSS:\t 1 kB\n")); err == nil {
		t.Error("a status without VmHWM parsed")
	}
	if _, err := parseVmHWM([]byte("VmHWM:\t 12 MB\n")); err == nil {
		t.Error("a VmHWM in another unit parsed")
	}
}

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses; utime and stime are fields 14 and 15.
	stat := "4242 (terraform (x) y) S 4100 4242 4100 0 -1 4194560 1234 0 0 0 250 37 0 0 20 0 12 0 98765 1306844 30119 18446744073709551615\n"
	st, err := parseStat([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if st.comm != "terraform (x) y" || st.ppid != 4100 || st.cpuTicks != 287 {
		t.Errorf("parseStat = %+v, want comm %q, ppid 4100, 287 ticks", st, "terraform (x) y")
	}
	if _, err := parseStat([]byte("4242 (x) S 1")); err == nil {
		t.Error("a truncated stat parsed")
	}
	if !isProvider("terraform-provi") || isProvider("terraform") || isProvider("terraform-provx") {
		t.Error("isProvider must match the provider's name as the kernel truncates it to 15 bytes, and nothing else")
	}
}

func TestRolloutTimeline(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const newImage = "podinfo:2"
	dep := func(ms int, name, image string, replicas int32, ready bool) observation {
		return observation{at: at(ms), kind: "Deployment", name: name, image: image, replicas: replicas, ready: ready}
	}
	split := func(ms, canary int) observation {
		return observation{at: at(ms), kind: "TrafficSplit", name: "podinfo", canaryWeight: canary}
	}
	obs := []observation{
		dep(0, "podinfo", "podinfo:1", 0, true), // the informers' initial list
		dep(0, "podinfo-primary", "podinfo:1", 2, true),
		split(0, 0),
		dep(1000, "podinfo", newImage, 0, true), // the Update's first write
		dep(1100, "podinfo", newImage, 2, false),
		dep(1400, "podinfo", newImage, 2, true),
		split(1500, 10),
		split(11500, 20),
		dep(51600, "podinfo-primary", newImage, 2, false),
		dep(52400, "podinfo-primary", newImage, 2, true),
		split(52500, 0),
		dep(52600, "podinfo", newImage, 0, true),
	}
	tl := rolloutTimeline(obs, "podinfo", newImage)
	for _, c := range []struct {
		name string
		f    func() (time.Duration, error)
		want time.Duration
	}{
		{"canary wait", tl.canaryWait, 300 * time.Millisecond},
		{"primary wait", tl.primaryWait, 800 * time.Millisecond},
		{"first shift", tl.firstShiftAfterUpdate, 500 * time.Millisecond},
		{"back on the primary", tl.trafficBack, 51 * time.Second},
	} {
		got, err := c.f()
		if err != nil || got != c.want {
			t.Errorf("%s = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	// Without the promotion the primary wait is missing, and says so.
	tl = rolloutTimeline(obs[:8], "podinfo", newImage)
	if _, err := tl.primaryWait(); err == nil || !strings.Contains(err.Error(), "primary readiness") {
		t.Errorf("primaryWait without a promotion: %v, want a 'not observed' error", err)
	}
}

func TestRequestKind(t *testing.T) {
	for _, c := range []struct {
		method, url string
		want        string
	}{
		{"GET", "/api/v1/namespaces/ns/configmaps/podinfo-canary-release", "GET configmaps"},
		{"GET", "/api/v1/namespaces/ns/configmaps", "LIST configmaps"},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments?fieldSelector=metadata.name%3Dpodinfo", "LIST deployments"},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments?watch=true", "WATCH deployments"},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments/podinfo/scale", "GET deployments/scale"},
		{"GET", "/api/v1/namespaces/ns", "GET namespaces"},
		{"GET", "/api/v1/namespaces", "LIST namespaces"},
		{"PUT", "/apis/split.smi-spec.io/v1alpha2/namespaces/ns/trafficsplits/podinfo", "PUT trafficsplits"},
		{"POST", "/api/v1/namespaces/ns/events", "POST events"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/x", "PUT leases"},
	} {
		r := httptest.NewRequest(c.method, c.url, nil)
		if got := requestKind(r, true); got != c.want {
			t.Errorf("%s %s = %s, want %s", c.method, c.url, got, c.want)
		}
	}
	if got := requestKind(httptest.NewRequest("POST", "/api/v1/query", nil), false); got != "/api/v1/query" {
		t.Errorf("a Prometheus request is counted as %q, want its path", got)
	}
	d, total := delta(map[string]int{"GET": 2, "PUT": 1}, map[string]int{"GET": 5, "PUT": 1, "POST": 4})
	if total != 7 || d["GET"] != 3 || d["POST"] != 4 || len(d) != 2 {
		t.Errorf("delta = %v, %d; want GET 3, POST 4, total 7", d, total)
	}
}

func TestReleaseSpec(t *testing.T) {
	s := flaggerScenario("b1-rollout-0")
	if s.steps() != 5 || s.interval() != 10*time.Second {
		t.Errorf("Flagger's scenario: %d steps of %v, want 5 of 10s", s.steps(), s.interval())
	}
	s.Threshold, s.WebhookURL = 2, "http://127.0.0.1:1234/rollout"
	tf, err := s.render()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`namespace     = "b1-rollout-0"`, `mesh_provider = "osm"`, "replicas = 2", `interval    = "10s"`,
		"threshold   = 2", "max_weight  = 50", "step_weight = 10", `url = "http://127.0.0.1:1234/rollout"`} {
		if !strings.Contains(tf, want) {
			t.Errorf("configuration lacks %q:\n%s", want, tf)
		}
	}
	if strings.Contains(tf, "count") {
		t.Errorf("a single release has a count:\n%s", tf)
	}
	// Flagger's scenario carries the two built-in checks, on both sides of the comparison.
	if !strings.Contains(tf, `name = "request-success-rate"`) || !strings.Contains(tf, `name = "request-duration"`) {
		t.Errorf("Flagger's scenario lacks its checks:\n%s", tf)
	}
	many := releaseSpec{Count: 100, NamespacePrefix: "b1-scale", Replicas: 1, Interval: "2s", Threshold: 5, MaxWeight: 50, StepWeight: 10, Metrics: true}
	tf, err = many.render()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"count         = var.releases", `format("b1-scale-%03d", count.index)`, `name = "request-success-rate"`, `name = "request-duration"`} {
		if !strings.Contains(tf, want) {
			t.Errorf("configuration lacks %q:\n%s", want, tf)
		}
	}
	if (releaseSpec{MaxWeight: 50, StepWeight: 15}).steps() != 4 {
		t.Error("steps must round up: 15, 30, 45, 60")
	}
}

func TestOptions(t *testing.T) {
	o, err := parseOptions([]string{"-quick"})
	if err != nil || o.runs != 1 || o.scaleRuns != 1 || o.scale != 10 || o.refresh != 10 || o.parallel != 10 || o.large != 20 || o.routerRuns != 1 {
		t.Errorf("-quick = %+v, %v; want 1 run, 10 releases", o, err)
	}
	o, err = parseOptions([]string{"-quick", "-runs", "3", "-refresh", "20"})
	if err != nil || o.runs != 3 || o.scale != 10 || o.refresh != 20 {
		t.Errorf("-quick with explicit flags = %+v, %v; the explicit flags must win", o, err)
	}
	o, err = parseOptions(nil)
	if err != nil || o.runs != 5 || o.scaleRuns != 3 || o.scale != 100 || o.refresh != 200 || o.parallel != 100 || o.large != 300 ||
		!o.wants("rollback") || !o.wants("flagger") || !o.wants("routers") || o.wants("nothing") {
		t.Errorf("defaults = %+v, %v", o, err)
	}
	if _, err := parseOptions([]string{"-only", "rollout,nothing"}); err == nil {
		t.Error("-only with an unknown scenario parsed")
	}
}
