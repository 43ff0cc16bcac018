package provider

import (
	"errors"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// TestAccRelease_prometheusStopped: Prometheus goes away mid-analysis. The run holds its step
// through analysis.max_query_errors query errors, then ends with "metrics unavailable" and
// rolls back; nothing is promoted.
func TestAccRelease_prometheusStopped(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	target, err := url.Parse(c.env.PrometheusURL)
	if err != nil {
		t.Fatal(err)
	}
	// A Prometheus of this test's own, which it can stop without touching the shared one.
	prom := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	defer prom.Close()
	w := c.workdir(t)
	w.provider = `provider "canary" {
  prometheus = { address = "` + prom.URL + `" }
}
`
	w.write(ns, "podinfo:6.0.0", "0")
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = w.run("destroy", "-auto-approve") })

	w.write(ns, "podinfo:6.0.1", "0")
	rec := c.recordWeights(t, ns, "podinfo")
	cmd, out := w.command("apply", "-auto-approve", "-no-color")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !slicesContain(rec.seen(), 10) {
		if time.Now().After(deadline) {
			killTree(cmd.Process.Pid)
			t.Fatalf("the rollout never reached 10%%\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	prom.CloseClientConnections()
	prom.Close()
	err = cmd.Wait()
	text := strings.Join(strings.Fields(out.String()), " ")
	if err == nil || !strings.Contains(text, "metrics unavailable: metric request-success-rate had 3 consecutive query errors") {
		t.Fatalf("apply with Prometheus stopped: %v; want metrics unavailable\n%s", err, out)
	}
	if !strings.Contains(text, "100% of traffic is back on the primary podinfo-primary") {
		t.Errorf("the error does not say where traffic is:\n%s", out)
	}
	c.judge(t, ns, "podinfo:6.0.0")
	if err := c.checkReplicas(ns, "podinfo", 0)(nil); err != nil {
		t.Error(err)
	}
	if slicesContain(rec.seen(), 20) {
		t.Errorf("weights %v: the run advanced past the step at which Prometheus stopped", rec.seen())
	}
}

// slowReadyWorkload is manifestWorkload with minReadySeconds, so that rolling the primary to
// the promoted template (phase Promoting) lasts long enough to press Ctrl-C in.
func slowReadyWorkload(image, errorRate string) string {
	return strings.Replace(manifestWorkload(image, errorRate), "replicas = 2", "replicas = 2\n      minReadySeconds = 4", 1)
}

// TestAccRelease_interruptDuringPromotion: Ctrl-C while the primary rolls to the template that
// passed. Traffic stays on sides that serve, the error says where it is, and the next apply
// finishes the promotion; the new revision, which passed, is what the primary ends up running.
func TestAccRelease_interruptDuringPromotion(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	w := c.workdir(t)
	w.workload = slowReadyWorkload
	w.write(ns, "podinfo:6.0.0", "0")
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = w.run("destroy", "-auto-approve") })
	w.write(ns, "podinfo:6.0.1", "0")
	cmd, out := w.command("apply", "-auto-approve", "-no-color")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, ok, _ := rollout.LoadState(t.Context(), c.kube, ns, "podinfo")
		if ok && st.Status.Phase == rollout.PhasePromoting {
			break
		}
		if time.Now().After(deadline) {
			killTree(cmd.Process.Pid)
			t.Fatalf("the release never reached Promoting\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("interrupted apply ended with %v, want a failure\n%s", err, out)
	}
	text := strings.Join(strings.Fields(out.String()), " ")
	switch {
	case strings.Contains(text, "was rolling to the promoted template") && strings.Contains(text, "the next apply finishes the promotion"):
		// Both sides serve: the canary runs the passed template, the primary a mix.
		t.Log("interrupted while the primary rolled; the next apply finishes the promotion")
		if !strings.Contains(text, "of traffic is on") {
			t.Errorf("the error does not say where traffic is:\n%s", out)
		}
	case strings.Contains(text, "so the promotion was completed"):
		t.Log("interrupted after the primary was Ready; the promotion was completed at once")
	default:
		t.Fatalf("the interrupted promotion's error is not one the docs describe:\n%s", out)
	}
	if err := c.checkReady(ns, "podinfo-primary")(nil); err != nil {
		// Still rolling: the canary must be the serving side then.
		if err := c.checkReady(ns, "podinfo")(nil); err != nil {
			t.Errorf("neither side is Ready after the interrupt: %v", err)
		}
	}
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("apply after the interrupt: %v\n%s", err, out)
	}
	c.judge(t, ns, "podinfo:6.0.1")
}
