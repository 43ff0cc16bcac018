package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseProcessCPU(t *testing.T) {
	text := "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n" +
		"# TYPE process_cpu_seconds_total counter\n" +
		"process_cpu_seconds_total 1234.56\n" +
		"process_cpu_seconds_total_other 1\n"
	got, err := parseProcessCPU([]byte(text))
	if err != nil || got != 1234.56 {
		t.Errorf("parseProcessCPU = %v, %v; want 1234.56", got, err)
	}
	if _, err := parseProcessCPU([]byte("apiserver_request_total{verb=\"GET\"} 3\n")); err == nil {
		t.Error("an exposition without process_cpu_seconds_total parsed")
	}
}

func TestThrottleWaits(t *testing.T) {
	log := strings.Join([]string{
		`2026-12-03T08:00:00.000Z [DEBUG] provider.terraform-provider-canary: I1203 08:00:00.000000    42 request.go:752] "Waited before sending request" delay="1.402s" reason="client-side throttling, not priority and fairness" verb="GET" URL="https://127.0.0.1:16443/api/v1/namespaces/x/configmaps/y"`,
		`2026-12-03T08:00:01.000Z [DEBUG] provider.terraform-provider-canary: I1203 08:00:01.000000    42 request.go:629] Waited for 2.5s due to client-side throttling, not priority and fairness, request: GET:https://x`,
		`2026-12-03T08:00:02.000Z [DEBUG] provider.terraform-provider-canary: "Waited before sending request" delay="120ms" reason="client-side throttling"`,
		`2026-12-03T08:26:32.207Z [WARN]  unexpected data: registry.terraform.io/canary-release/canary:stderr="I1203 08:26:32.206821   11303 request.go:752] \"Waited before sending request\" delay=\"1.979157912s\" reason=\"client-side throttling, not priority and fairness\" verb=\"POST\" URL=\"https://x\""`,
		`2026-12-03T08:00:03.000Z [INFO]  provider.terraform-provider-canary: shifted weight: canary=10`,
	}, "\n")
	waits, err := throttleWaits(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(waits) != 4 || waits[0].delay != 1402*time.Millisecond || waits[1].delay != 2500*time.Millisecond || waits[3].delay != 1979157912 {
		t.Fatalf("throttleWaits = %+v, want 1.402s, 2.5s, 120ms and 1.979157912s", waits)
	}
	if n := countOver(waits, time.Second); n != 3 {
		t.Errorf("countOver(1s) = %d, want 3", n)
	}
	if waits, err := throttleWaitsInFile(""); err != nil || waits != nil {
		t.Errorf("no log file: %v, %v; want nothing", waits, err)
	}
}

func TestPhaseWatcher(t *testing.T) {
	w := &phaseWatcher{changes: map[string][]phaseChange{}}
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	w.add("a", "Initialized", at(0))
	w.add("a", "Progressing", at(10))
	w.add("a", "Progressing", at(20)) // not a change
	w.add("a", "Succeeded", at(90))
	w.add("b", "Initialized", at(0))
	w.add("b", "Failed", at(50))
	w.add("b", "Succeeded", at(60)) // after a failure: too late
	if got, failed := w.reached("a", "Succeeded", at(5)); failed || !got.Equal(at(90)) {
		t.Errorf("a reached Succeeded at %v (failed %v), want +90s", got, failed)
	}
	if got, _ := w.reached("a", "Initialized", at(5)); !got.IsZero() {
		t.Errorf("a's Initialized before since counted: %v", got)
	}
	if _, failed := w.reached("b", "Succeeded", at(5)); !failed {
		t.Error("b failed before Succeeded, yet reached reports no failure")
	}
	if h := w.history("a", at(5)); h != "5.0 Progressing, 85.0 Succeeded" {
		t.Errorf("history = %q", h)
	}
}

func TestFlaggerCanaryMatchesTheRelease(t *testing.T) {
	spec := flaggerScenario("b1-flagger-0")
	c := flaggerCanary("b1-flagger-0", spec)
	if c.GetKind() != "Canary" || c.GetNamespace() != "b1-flagger-0" || c.GetName() != "podinfo" {
		t.Fatalf("Canary %s %s/%s", c.GetKind(), c.GetNamespace(), c.GetName())
	}
	s := c.Object["spec"].(map[string]any)
	a := s["analysis"].(map[string]any)
	if s["provider"] != "osm" || a["interval"] != "10s" || a["threshold"] != int64(5) || a["maxWeight"] != int64(50) || a["stepWeight"] != int64(10) {
		t.Errorf("Canary spec %v, want osm, 10s, threshold 5, 50/10", s)
	}
	metrics, _ := a["metrics"].([]any)
	if len(metrics) != 2 {
		t.Fatalf("Canary has %d metrics, want the release's 2", len(metrics))
	}
	tf, err := spec.render()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metrics {
		name := m.(map[string]any)["name"].(string)
		if !strings.Contains(tf, `name = "`+name+`", interval = "30s"`) {
			t.Errorf("the release lacks Flagger's check %s (30s):\n%s", name, tf)
		}
	}
	d := podinfoDeployment("ns", 2, "6.0.0")
	if *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].Image != podinfoImage+"6.0.0" {
		t.Errorf("Deployment %+v", d.Spec)
	}
	args := strings.Join(flaggerArgs("/k", "http://127.0.0.1:19090", "1234"), " ")
	for _, want := range []string{"-kubeconfig=/k", "-mesh-provider=osm", "-metrics-server=http://127.0.0.1:19090", "-enable-leader-election=false", "-port=1234"} {
		if !strings.Contains(args, want) {
			t.Errorf("flagger args %q lack %q", args, want)
		}
	}
}

func TestSpeedupAndNewKeys(t *testing.T) {
	if s := speedup([]float64{90, 85, 100}, []float64{52, 50, 51}); len(s) != 1 || math.Abs(s[0]-90.0/51) > 1e-9 {
		t.Errorf("speedup = %v, want 90/51", s)
	}
	if s := speedup(nil, []float64{1}); s != nil {
		t.Errorf("speedup without Flagger samples = %v, want none", s)
	}
	r := results{parallelN: 100, largeN: 300, scaleReleases: 100, refreshReleases: 200}
	r.addRouterRatio("apisix", 1.02)
	var keys []string
	for _, row := range r.rows() {
		keys = append(keys, row.fig.key)
	}
	line := strings.Join(keys, " ")
	for _, want := range []string{"apply_s", "parallel_100_s", "refresh_200_s", "flagger_apply_s", "flagger_ratio", "speedup_vs_flagger",
		"parallel_100_10s_s", "flagger_parallel_100_s", "speedup_parallel_100_vs_flagger", "apiserver_cpu_s_per_release_step",
		"scale_300_s", "provider_peak_rss_mb_300", "throttle_waits_over_1s", "overhead_ratio_osm", "overhead_ratio_apisix",
		"overhead_ratio_gloo", "overhead_ratio_istio", "overhead_ratio_gatewayapi", "overhead_ratio_linkerd", "overhead_ratio_knative"} {
		if !strings.Contains(" "+line+" ", " "+want+" ") {
			t.Errorf("keys lack %s: %s", want, line)
		}
	}
	if !strings.HasPrefix(line, "apply_s raw_ratio overhead_ratio") {
		t.Errorf("the original keys must keep their order first: %s", line)
	}
}

func TestRouterReleases(t *testing.T) {
	for _, name := range weightedRouters() {
		tf, err := routerSetups[name].spec("b1-router-"+name, name).render()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(tf, `mesh_provider = "`+name+`"`) {
			t.Errorf("%s: configuration lacks its mesh_provider:\n%s", name, tf)
		}
	}
	if got := len(weightedRouters()); got != 12 {
		t.Errorf("%d weighted routers, want 12 (osm, apisix, gloo, istio, gatewayapi, linkerd, traefik, contour, nginx, skipper, alb, knative)", got)
	}
	tf, _ := routerSetups["knative"].spec("b1-router-knative", "knative").render()
	if !strings.Contains(tf, `target_ref = { api_version = "serving.knative.dev/v1", kind = "Service", name = "podinfo" }`) ||
		!strings.Contains(tf, "triggers   = { image = var.image_tag }") || strings.Contains(tf, "manifest") {
		t.Errorf("knative's release must name its Knative Service, on the image trigger, without a manifest:\n%s", tf)
	}
	tf, _ = releaseSpec{Router: "gatewayapi", ServiceExtra: routerSetups["gatewayapi"].serviceExtra, Replicas: 1, Interval: "10s", MaxWeight: 50, StepWeight: 10}.render()
	if !strings.Contains(tf, "port = 9898\n    gateway_refs") {
		t.Errorf("gateway_refs must sit in the service block:\n%s", tf)
	}
}
