package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// testdata/apply.tflog is a real apply's log (TF_LOG_CORE=INFO, TF_LOG_PROVIDER=INFO), cut
// to one release's lines and two "Starting apply" lines.
func TestParseApplyLog(t *testing.T) {
	ns := func(i int) string { return fmt.Sprintf("b1-par10-%03d", i) }
	got := map[string]*moments{}
	if err := parseApplyLog("testdata/apply.tflog", ns, got); err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, "2026-12-07T"+s+"Z")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	m := got["b1-par10-000"]
	if m == nil || got["b1-par10-001"] == nil {
		t.Fatalf("moments of %v, want both releases", got)
	}
	for _, c := range []struct {
		what      string
		got, want time.Time
	}{
		{"plan done", m.planDone, at("23:39:47.962")},
		{"release 1's plan done", got["b1-par10-001"].planDone, at("23:39:47.962")},
		{"start of release 0's apply", m.startApply, at("23:39:48.336")},
		{"start of release 1's apply", got["b1-par10-001"].startApply, at("23:39:48.356")},
		{"Progressing", m.progressing, at("23:39:48.431")},
		{"Promoting", m.promoting, at("23:40:39.607")},
		{"Finalising", m.finalising, at("23:40:40.673")},
		{"verdict", m.verdict, at("23:40:42.701")},
		// The provider's timestamp field, not Terraform's (23:39:59.556).
		{"the first step's last check", m.checks[1], at("23:39:59.553")},
	} {
		if !c.got.Equal(c.want) {
			t.Errorf("%s at %v, want %v", c.what, c.got, c.want)
		}
	}
	var weights []int
	for _, w := range m.weights {
		weights = append(weights, w.weight)
	}
	if fmt.Sprint(weights) != "[10 20 30 40 50 0]" || len(m.checks) != 10 {
		t.Errorf("weights %v and %d checks, want [10 20 30 40 50 0] and 10", weights, len(m.checks))
	}
}

func TestLogField(t *testing.T) {
	line := `metric request-duration = 9.81: weight=10 @module=canary.rollout range="[max 500]" namespace=b1-par10-000 timestamp=2026-12-07T23:39:59.553Z`
	for key, want := range map[string]string{"weight": "10", "range": "[max 500]", "namespace": "b1-par10-000", "kind": "", "timestamp": "2026-12-07T23:39:59.553Z"} {
		if got := logField(line, key); got != want {
			t.Errorf("logField(%s) = %q, want %q", key, got, want)
		}
	}
}

// A release of 2 steps of 10 s: every span goes to its category, and they add up to the
// apply's wall time.
func TestBreakdownAddsUp(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	s := func(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }
	m := moments{
		planDone: s(1), startApply: s(1.5), lock: s(1.6),
		canary:  deploymentMoments{written: s(2), observed: s(2.5), ready: s(4)},
		splits:  []timedWeight{{s(0), 0}, {s(4.5), 10}, {s(14.9), 20}, {s(27), 0}},
		weights: []timedWeight{{s(4.7), 10}, {s(15), 20}, {s(27.1), 0}},
		// The first step's checks end 0.25 s past its interval; the second's at its end.
		checks:    []time.Time{s(14.8), s(14.95), s(24.7), s(25)},
		promoting: s(25.2), primary: deploymentMoments{written: s(25.4), observed: s(25.5), ready: s(26.5)},
		finalising: s(27), verdict: s(29.1),
	}
	b := m.breakdown("ns", t0, s(30), 10*time.Second)
	want := map[waitCategory]float64{
		waitPlan: 1, waitTerraform: 0.5, waitLock: 0.1,
		waitProvider:   0.4 + 0.2, // lock->scaled, Promoting->primary written
		waitNotice:     0.5 + 0.5, // canary Ready->first write, primary Ready->Finalising
		waitController: 0.5 + 0.1, waitPods: 1.5 + 1,
		waitRouter:   0.2 + 0.05 + 0.2 + 0.1, // first write->line, step 1's end, step 2's end (to Promoting), Finalising->0
		waitMetric:   0.25,
		waitAnalysis: 10 + 10,
		waitDrain:    2, waitAfter: 0.9,
	}
	var sum time.Duration
	for _, c := range waitCategories {
		sum += b.by[c]
		if got := b.by[c].Seconds(); fmt.Sprintf("%.3f", got) != fmt.Sprintf("%.3f", want[c]) {
			t.Errorf("%s = %.3fs, want %.3fs", c, got, want[c])
		}
	}
	if sum != b.total || b.total != 30*time.Second || len(b.missing) > 0 {
		t.Errorf("categories add up to %v of %v; missing %v", sum, b.total, b.missing)
	}
}

// A moment not seen leaves its spans to "other", and the release says which moment it was.
func TestBreakdownMissingMoment(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	m := moments{planDone: t0.Add(time.Second), startApply: t0.Add(2 * time.Second)}
	b := m.breakdown("ns", t0, t0.Add(10*time.Second), 10*time.Second)
	if b.by[waitOther] != 8*time.Second || !strings.Contains(strings.Join(b.missing, ","), "Lease acquireTime") {
		t.Errorf("other = %v, missing %v; want 8s and the Lease", b.by[waitOther], b.missing)
	}
	table := breakdownTable([]releaseBreakdown{b})
	if !strings.Contains(table, "1 of 1 releases had moments not observed") {
		t.Errorf("the table does not say a moment was missing:\n%s", table)
	}
}

func TestBreakdownChart(t *testing.T) {
	if len(waitColors) != len(waitCategories) {
		t.Fatalf("%d colours for %d categories", len(waitColors), len(waitCategories))
	}
	bs := []releaseBreakdown{
		{namespace: "a", total: 60 * time.Second, by: map[waitCategory]time.Duration{waitAnalysis: 50 * time.Second, waitAfter: 10 * time.Second}},
		{namespace: "b", total: 60 * time.Second, by: map[waitCategory]time.Duration{waitAnalysis: 50 * time.Second, waitPods: 10 * time.Second}},
	}
	chart, err := breakdownPlot("test chart", bs)
	if err != nil {
		t.Fatal(err)
	}
	var svg bytes.Buffer
	if err := chart.render(&svg, 600, 300); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "test chart", "analysis", "pods", "seconds since the apply started"} {
		if !strings.Contains(svg.String(), want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
}

func TestCPUAccount(t *testing.T) {
	if got := parseMachineCPU("cpu  100 5 50 1000 20 1 2 3 0 0\ncpu0 1 2 3\n"); got != 161*clockTick {
		t.Errorf("parseMachineCPU = %v, want 1.61s (user, nice, system, irq, softirq, steal)", got)
	}
	t0 := time.Now()
	before := stackCPUSnapshot{at: t0, pids: map[string]int{"etcd": 10, "kwok": 11}, ticks: map[string]int64{"etcd": 100, "kwok": 5}, machine: 10 * time.Second}
	after := stackCPUSnapshot{at: t0.Add(10 * time.Second), pids: map[string]int{"etcd": 10, "kwok": 12}, ticks: map[string]int64{"etcd": 350, "kwok": 1}, self: time.Second, machine: 18 * time.Second}
	a := accountCPU(before, after, processFigures{totalCPU: 3 * time.Second, providerCPU: 2 * time.Second})
	if a.byProcess["etcd"] != 2500*time.Millisecond || a.byProcess["terraform"] != time.Second || a.byProcess["provider"] != 2*time.Second {
		t.Errorf("account %v", a.byProcess)
	}
	if _, ok := a.byProcess["kwok"]; ok {
		t.Errorf("kwok restarted (new pid) but is in the account: %v", a.byProcess)
	}
	table := cpuTable([]cpuAccount{a}, 2)
	collapsed := strings.Join(strings.Fields(table), " ")
	for _, want := range []string{"etcd 2.50 12.50% 1", "other processes 1.50 7.50%", "capacity (2 cores x wall) 20.00 100.00%"} {
		if !strings.Contains(collapsed, want) {
			t.Errorf("the CPU table lacks %q:\n%s", want, table)
		}
	}
}

// Terraform's tail is the least "after": the last verdict to the exit. A release whose verdict
// was not seen has none and does not count.
func TestTerraformTail(t *testing.T) {
	run := []releaseBreakdown{
		{by: map[waitCategory]time.Duration{waitAfter: 5 * time.Second}},
		{by: map[waitCategory]time.Duration{waitAfter: 1200 * time.Millisecond}},
		{by: map[waitCategory]time.Duration{waitOther: 30 * time.Second}},
	}
	if got := terraformTail(run); got != 1200*time.Millisecond {
		t.Errorf("terraformTail = %v, want 1.2s", got)
	}
}
