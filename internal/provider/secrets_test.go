package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Secrets used by one release must never leave the Terraform configuration and state: not in
// the trace log, the Events, the `status` attribute or any ConfigMap the provider writes.
func TestAccRelease_secretsStayOut(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	const (
		hookToken = "xoxb-hook-T0K3N"
		promPass  = "pr0m-PASSW0RD"
		// Metadata is not secret (the plan shows it) but not the ConfigMap's to hold either.
		metadataCmd = "hey -z 1m http://podinfo-canary.test:9898/"
	)
	var calls, failing atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.Path, hookToken) {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		calls.Add(1)
		if failing.Load() == 1 {
			// Services that refuse a call often echo it back.
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "refused %s?%s\n", r.URL.Path, r.URL.RawQuery)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer hook.Close()
	promURL := strings.Replace(c.env.PrometheusURL, "://", "://promuser:"+promPass+"@", 1)

	w := c.workdir(t)
	write := func(image string) {
		t.Helper()
		analysis := fmt.Sprintf(`
    interval    = "2s"
    step_weight = 50
    max_weight  = 100
    metrics = [
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },
    ]
    webhooks = [
      { name = "notify", url = %q, metadata = { cmd = %q } },
    ]
    alerts = [
      { name = "team", provider = { type = "slack", address = %q } },
    ]`, hook.URL+"/services/"+hookToken+"?sig="+hookToken, metadataCmd, hook.URL+"/alerts/"+hookToken)
		w.writeRelease(promURL, ns, image, analysis)
	}
	var logs strings.Builder
	apply := func(image string, wantErr bool) string {
		t.Helper()
		write(image)
		cmd, out := w.command("apply", "-auto-approve", "-no-color")
		cmd.Env = append(cmd.Env, "TF_LOG=trace")
		err := cmd.Run()
		logs.WriteString(out.String())
		if (err != nil) != wantErr {
			t.Fatalf("apply of %s: error = %v, want error %v\n%s", image, err, wantErr, tail(out.String(), 4000))
		}
		return out.String()
	}
	apply("podinfo:1", false)
	apply("podinfo:2", false)
	failing.Store(1)
	if out := apply("podinfo:3", true); !strings.Contains(out, "webhook notify failed: status 500") {
		t.Errorf("the failed apply does not name the refused webhook:\n%s", tail(out, 4000))
	}
	if calls.Load() < 2 {
		t.Fatalf("the webhook was called %d times; the test proves nothing unless the release used it", calls.Load())
	}
	defer func() {
		if out, err := w.run("destroy", "-auto-approve"); err != nil {
			t.Errorf("destroy: %v\n%s", err, out)
		}
	}()

	places := map[string]string{"the TF_LOG=trace output": logs.String()}
	show, err := w.run("show", "-json")
	if err != nil {
		t.Fatalf("terraform show: %v\n%s", err, show)
	}
	var state struct {
		Values struct {
			RootModule struct {
				Resources []struct {
					Values map[string]json.RawMessage `json:"values"`
				} `json:"resources"`
			} `json:"root_module"`
		} `json:"values"`
	}
	if err := json.Unmarshal([]byte(show), &state); err != nil || len(state.Values.RootModule.Resources) != 1 {
		t.Fatalf("terraform show -json: %v\n%s", err, show)
	}
	status := string(state.Values.RootModule.Resources[0].Values["status"])
	if !strings.Contains(status, "status 500") {
		t.Errorf("status = %s, want the webhook's failure", status)
	}
	places["the status attribute"] = status

	ctx := context.Background()
	events, err := c.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var eventText strings.Builder
	for _, e := range events.Items {
		fmt.Fprintln(&eventText, e.Reason, e.Message)
	}
	places["the Events"] = eventText.String()
	cms, err := c.kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		raw, _ := json.Marshal(cm)
		places["ConfigMap "+cm.Name] = string(raw)
	}
	if !strings.Contains(places["ConfigMap podinfo-canary-release"], `notify`) {
		t.Errorf("the state ConfigMap does not record the release's webhook: %s", places["ConfigMap podinfo-canary-release"])
	}
	for name, text := range places {
		if strings.HasPrefix(name, "ConfigMap ") && strings.Contains(text, metadataCmd) {
			t.Errorf("%s holds the webhook's metadata", name)
		}
	}
	for where, text := range places {
		for _, secret := range []string{hookToken, promPass} {
			if i := strings.Index(text, secret); i >= 0 {
				t.Errorf("%s holds the secret %q: …%s…", where, secret, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
