package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

// grafanaDashboard is the part of docs/grafana-dashboard.json the test reads.
type grafanaDashboard struct {
	Templating struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
			// Query is a string for a datasource variable, an object for a query variable.
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("docs/grafana-dashboard.json has no panels")
	}
	return d
}

// promResult runs an instant query, or, for Grafana's label_values(series, label), the label
// values request Grafana makes for it, and returns how many results came back.
func promResult(ctx context.Context, prometheus, query string) (int, error) {
	var u string
	if rest, ok := strings.CutPrefix(query, "label_values("); ok {
		rest = strings.TrimSuffix(strings.TrimSpace(rest), ")")
		i := strings.LastIndex(rest, ",")
		if i < 0 {
			return 0, fmt.Errorf("cannot read %q as label_values(series, label)", query)
		}
		series, label := strings.TrimSpace(rest[:i]), strings.TrimSpace(rest[i+1:])
		u = prometheus + "/api/v1/label/" + url.PathEscape(label) + "/values?" + url.Values{"match[]": {series}}.Encode()
	} else {
		u = prometheus + "/api/v1/query?" + url.Values{"query": {query}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var out struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return 0, fmt.Errorf("%s: %s", resp.Status, body)
	}
	if out.Status != "success" {
		return 0, fmt.Errorf("query %q: %s", query, out.Error)
	}
	var values []json.RawMessage
	if err := json.Unmarshal(out.Data, &values); err == nil {
		return len(values), nil
	}
	var vector struct {
		Result []json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(out.Data, &vector); err != nil {
		return 0, fmt.Errorf("query %q: unexpected data %s", query, out.Data)
	}
	return len(vector.Result), nil
}

// withVariables fills in the dashboard's variables as Grafana would with one release picked.
func withVariables(query, ns, name string) string {
	return strings.NewReplacer("${namespace}", ns, "$namespace", ns, "${name}", name, "$name", name,
		"$__rate_interval", "1m", "$__interval", "15s").Replace(query)
}

// checkDashboard runs every variable's and every panel's query of the dashboard against the
// stack's Prometheus, each until it returns data or the minute is up.
func (c *testCluster) checkDashboard(t *testing.T, ns, name string) error {
	d := readDashboard(t)
	var queries []string
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			var q struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &q); err != nil || q.Query == "" {
				return fmt.Errorf("variable %s has no query (%v)", v.Name, err)
			}
			queries = append(queries, q.Query)
		}
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			return fmt.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			queries = append(queries, target.Expr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var empty []string
	for _, q := range queries {
		q = withVariables(q, ns, name)
		for {
			n, err := promResult(ctx, c.env.PrometheusURL, q)
			if err != nil && ctx.Err() == nil {
				return err
			}
			if n > 0 {
				break
			}
			select {
			case <-ctx.Done():
				empty = append(empty, q)
			case <-time.After(time.Second):
				continue
			}
			break
		}
	}
	if len(empty) > 0 {
		return fmt.Errorf("%d of the dashboard's %d queries returned no data: %s", len(empty), len(queries), strings.Join(empty, "; "))
	}
	return nil
}

// checkNothingSecretPushed reads what the Pushgateway holds and looks for the credentials.
func (c *testCluster) checkNothingSecretPushed(secrets ...string) error {
	resp, err := http.Get(c.env.PushgatewayURL + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, s := range secrets {
		if strings.Contains(string(body), s) {
			return fmt.Errorf("the Pushgateway holds the credential %q", s)
		}
	}
	return nil
}

// checkNothingPushed checks that the Pushgateway holds no series of namespace ns.
func (c *testCluster) checkNothingPushed(ns string) error {
	resp, err := http.Get(c.env.PushgatewayURL + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if label := fmt.Sprintf("namespace=%q", ns); strings.Contains(string(body), label) {
		return fmt.Errorf("the Pushgateway still holds series with %s after the destroy", label)
	}
	return nil
}

// A promotion, then a rollback, on a provider that pushes to the stack's Pushgateway: every
// query of docs/grafana-dashboard.json (its variables' and its panels') returns data from the
// stack's Prometheus, which scrapes the Pushgateway, and no configured credential reached it.
// Destroy deletes the release's series.
func TestAccDashboard_panelQueries(t *testing.T) {
	c := testAccStack(t)
	if c.env.PushgatewayURL == "" {
		t.Fatal("the local stack has no Pushgateway (CANARY_PUSHGATEWAY_ADDRESS is not in its env): run make up to add it")
	}
	ns := c.namespace(t)
	const password, header = "push-s3cret", "Bearer push-t0ken"
	providerBlock := fmt.Sprintf(`
provider "canary" {
  pushgateway = {
    url      = %q
    username = "pusher"
    password = %q
    headers  = { "X-Push-Token" = %q }
  }
}
`, c.env.PushgatewayURL, password, header)
	config := func(image, errorRate string) string {
		return providerBlock + releaseConfig(ns, manifestWorkload(image, errorRate), healthyAnalysis, "")
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		// Destroy deletes the release's group: the dashboard stops showing it.
		CheckDestroy: func(*terraform.State) error { return c.checkNothingPushed(ns) },
		Steps: []resource.TestStep{
			{Config: config("podinfo:6.0.0", "0")},
			{
				Config: config("podinfo:6.0.1", "0"),
				Check:  resource.TestCheckResourceAttr(addr, "status.phase", "Succeeded"),
			},
			{
				PreConfig:   func() { c.setServiceAnnotation(t, ns, "podinfo", "sim.canary-release.dev/rps", "200") },
				Config:      config("podinfo:6.0.2", "0.5"),
				ExpectError: wrapped("Rolled back at canary weight"),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					func(*terraform.State) error { return c.checkDashboard(t, ns, "podinfo") },
					func(*terraform.State) error { return c.checkNothingSecretPushed(password, "push-t0ken") },
				),
			},
		},
	})
}
