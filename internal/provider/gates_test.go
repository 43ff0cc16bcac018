package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hookRecorder is a webhook and alert server the test controls: each path answers what the
// test says, and every request is kept.
type hookRecorder struct {
	*httptest.Server
	mu       sync.Mutex
	received map[string][]string
	answer   func(path string, n int) int
}

func newHookRecorder(t *testing.T, answer func(path string, n int) int) *hookRecorder {
	t.Helper()
	h := &hookRecorder{received: map[string][]string{}, answer: answer}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.received[r.URL.Path] = append(h.received[r.URL.Path], string(body))
		n := len(h.received[r.URL.Path])
		h.mu.Unlock()
		w.WriteHeader(h.answer(r.URL.Path, n))
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookRecorder) bodies(path string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.received[path]...)
}

// gatedRelease writes a release whose analysis carries the given webhooks (HCL list items).
func gatedRelease(t *testing.T, w *workdir, ns, image, extraAnalysis string, hooks ...string) {
	t.Helper()
	analysis := `
    interval     = "2s"
    threshold    = 2
    step_weights = [20, 40]
    metrics = [
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },
    ]` + extraAnalysis + `
    webhooks = [
      ` + strings.Join(hooks, ",\n      ") + `
    ]`
	config := `terraform {
  required_providers {
    canary = { source = "canary-release/canary" }
  }
}
` + releaseConfig(ns, manifestWorkload(image, "0"), analysis, "")
	if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
}

// createGated creates a release at podinfo:1 without hooks, destroyed at the end of the test.
func createGated(t *testing.T, c *testCluster, ns string) *workdir {
	t.Helper()
	w := c.workdir(t)
	gatedRelease(t, w, ns, "podinfo:1", "")
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = w.run("destroy", "-auto-approve") })
	return w
}

// Flagger's gates, rollback hook and retries, on the local stack: a closed confirm-promotion
// gate holds and then opens, gate_timeout rolls back naming the gate, a rollback webhook rolls
// back at once, and a rollout webhook's retries absorb a 500.
func TestAccRelease_gatesAndHooks(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()

	t.Run("confirm-promotion holds, then opens", func(t *testing.T) {
		t.Parallel()
		ns := c.namespace(t)
		var open sync.Once
		opened := make(chan struct{})
		srv := newHookRecorder(t, func(path string, n int) int {
			switch {
			case path == "/load" && n == 1:
				return http.StatusInternalServerError // absorbed by retries
			case path == "/approve":
				select {
				case <-opened:
					return http.StatusOK
				default:
				}
				if n >= 3 {
					open.Do(func() { close(opened) })
				}
				return http.StatusForbidden
			}
			return http.StatusOK
		})
		w := createGated(t, c, ns)
		gatedRelease(t, w, ns, "podinfo:2", alertsHCL(srv.URL),
			fmt.Sprintf(`{ name = "approve", type = "confirm-promotion", url = "%s/approve" }`, srv.URL),
			fmt.Sprintf(`{ name = "load", url = "%s/load", retries = 2, metadata = { cmd = "hey" } }`, srv.URL),
			fmt.Sprintf(`{ name = "news", type = "event", url = "%s/event" }`, srv.URL))
		if out, err := w.run("apply", "-auto-approve"); err != nil {
			t.Fatalf("the release behind an opened gate failed: %v\n%s", err, out)
		}
		c.judge(t, ns, "podinfo:2")
		if n := len(srv.bodies("/approve")); n < 4 {
			t.Errorf("the gate was asked %d times; it was closed for three", n)
		}
		if err := c.checkEvents(ns, "Progressing", "WaitingPromotion", "Promoting", "Succeeded"); err != nil {
			t.Error(err)
		}
		// The first call's 500 was retried: without retries it would be a failed check, which
		// records a Halted Event.
		halted, err := c.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=Halted"})
		if err != nil || len(halted.Items) != 0 {
			t.Errorf("failed checks recorded (%v): the rollout webhook's 500 was not retried away", err)
		}
		var load struct {
			Name, Namespace, Phase string
			Metadata               map[string]string
		}
		bodies := srv.bodies("/load")
		if len(bodies) < 3 || json.Unmarshal([]byte(bodies[0]), &load) != nil || load.Name != "podinfo" || load.Namespace != ns ||
			load.Phase != "Progressing" || load.Metadata["cmd"] != "hey" {
			t.Errorf("rollout webhook calls %v, want Flagger's payload and the 500 retried", bodies)
		}
		slack := strings.Join(srv.bodies("/slack"), "\n")
		if !strings.Contains(slack, `"attachments"`) || !strings.Contains(slack, "Promotion completed") || !strings.Contains(slack, "Waiting for the gate approve") {
			t.Errorf("the Slack alerts do not tell of the gate and the promotion:\n%s", slack)
		}
		if generic := strings.Join(srv.bodies("/generic"), "\n"); !strings.Contains(generic, `"eventMessage":"Promotion completed`) {
			t.Errorf("the generic alert did not hear of the promotion:\n%s", generic)
		}
		if pager := srv.bodies("/pager"); len(pager) != 0 {
			t.Errorf("an error-severity alert heard of a promotion: %v", pager)
		}
		events := strings.Join(srv.bodies("/event"), "\n")
		if !strings.Contains(events, `"eventMessage":"Waiting for the gate approve`) || !strings.Contains(events, `"eventType":"Normal"`) {
			t.Errorf("event webhook bodies do not tell of the gate:\n%s", events)
		}
	})

	t.Run("every hook type at its moment", func(t *testing.T) {
		t.Parallel()
		ns := c.namespace(t)
		var mu sync.Mutex
		var order []string
		srv := newHookRecorder(t, func(path string, _ int) int {
			mu.Lock()
			if len(order) == 0 || order[len(order)-1] != path {
				order = append(order, path)
			}
			mu.Unlock()
			if path == "/rollback" {
				return http.StatusForbidden // asks for nothing
			}
			return http.StatusOK
		})
		w := createGated(t, c, ns)
		var hooks []string
		for _, typ := range []string{"confirm-rollout", "pre-rollout", "rollout", "confirm-traffic-increase", "confirm-promotion", "post-rollout", "rollback", "event"} {
			hooks = append(hooks, fmt.Sprintf(`{ name = %[1]q, type = %[1]q, url = "%[2]s/%[1]s" }`, typ, srv.URL))
		}
		gatedRelease(t, w, ns, "podinfo:2", "", hooks...)
		if out, err := w.run("apply", "-auto-approve"); err != nil {
			t.Fatalf("release: %v\n%s", err, out)
		}
		c.judge(t, ns, "podinfo:2")
		mu.Lock()
		var moments []string
		for _, p := range order {
			if p != "/event" && p != "/rollback" && p != "/rollout" {
				moments = append(moments, p)
			}
		}
		mu.Unlock()
		want := "/confirm-rollout /pre-rollout /confirm-traffic-increase /confirm-traffic-increase /confirm-promotion /post-rollout"
		if got := strings.Join(moments, " "); got != want {
			t.Errorf("gates and hooks were called in the order\n%s\nwant\n%s", got, want)
		}
		if n, steps := len(srv.bodies("/rollout")), 2; n < steps || len(srv.bodies("/rollback")) < steps {
			t.Errorf("rollout hook called %d times, rollback hook %d times; want each at every interval", n, len(srv.bodies("/rollback")))
		}
		var post struct{ Phase, Checksum string }
		if bodies := srv.bodies("/post-rollout"); len(bodies) != 1 || json.Unmarshal([]byte(bodies[0]), &post) != nil || post.Phase != "Succeeded" || post.Checksum == "" {
			t.Errorf("post-rollout payloads %v, want one with phase Succeeded and the checksum", bodies)
		}
	})

	t.Run("gate_timeout rolls back naming the gate", func(t *testing.T) {
		t.Parallel()
		ns := c.namespace(t)
		srv := newHookRecorder(t, func(string, int) int { return http.StatusForbidden })
		w := createGated(t, c, ns)
		gatedRelease(t, w, ns, "podinfo:2", "\n    gate_timeout = \"5s\""+alertsHCL(srv.URL),
			fmt.Sprintf(`{ name = "approval", type = "confirm-promotion", url = "%s/approve" }`, srv.URL))
		start := time.Now()
		out, err := w.run("apply", "-auto-approve")
		if err == nil || !strings.Contains(oneLine(out), "confirm-promotion gate approval stayed closed for 5s") {
			t.Fatalf("apply: %v, want the gate timeout naming the gate\n%s", err, out)
		}
		if took := time.Since(start); took > 2*time.Minute {
			t.Errorf("the apply took %s: the gate timeout did not end it", took)
		}
		for _, path := range []string{"/pager", "/generic"} {
			generic := strings.Join(srv.bodies(path), "\n")
			if !strings.Contains(generic, `"eventType":"Warning"`) || !strings.Contains(generic, "stayed closed for 5s") {
				t.Errorf("the generic alert %s did not hear of the rollback:\n%s", path, generic)
			}
		}
		if slack := strings.Join(srv.bodies("/slack"), "\n"); !strings.Contains(slack, "stayed closed for 5s") || !strings.Contains(slack, `"danger"`) {
			t.Errorf("the Slack alert did not hear of the rollback in red:\n%s", slack)
		}
		c.judge(t, ns, "podinfo:1")
	})

	t.Run("a rollback webhook rolls back at once", func(t *testing.T) {
		t.Parallel()
		ns := c.namespace(t)
		srv := newHookRecorder(t, func(_ string, n int) int {
			if n >= 2 {
				return http.StatusOK
			}
			return http.StatusForbidden
		})
		w := createGated(t, c, ns)
		gatedRelease(t, w, ns, "podinfo:2", "",
			fmt.Sprintf(`{ name = "abort", type = "rollback", url = "%s/abort" }`, srv.URL))
		out, err := w.run("apply", "-auto-approve")
		if err == nil || !strings.Contains(oneLine(out), "rollback webhook abort asked for a rollback at canary weight") {
			t.Fatalf("apply: %v, want the rollback webhook named\n%s", err, out)
		}
		c.judge(t, ns, "podinfo:1")
	})
}

// alertsHCL is a Slack-format and a generic alert for everything, and a generic one for
// failures only, all to the test's server.
func alertsHCL(server string) string {
	return fmt.Sprintf(`
    alerts = [
      { name = "team", provider = { type = "slack", address = "%[1]s/slack", channel = "releases" } },
      { name = "audit", provider = { type = "generic", address = "%[1]s/generic" } },
      { name = "pager", severity = "error", provider = { type = "generic", address = "%[1]s/pager" } },
    ]`, server)
}

// oneLine undoes the CLI's wrapping of diagnostics.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
