package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/faultproxy"
)

// Paths, as regular expressions, of the objects a release writes, whatever the namespace: each
// case has a proxy of its own, which only that case's provider goes through.
const (
	trafficSplitPath = `^/apis/split\.smi-spec\.io/v1alpha2/namespaces/[^/]+/trafficsplits/podinfo$`
	scalePath        = `^/apis/apps/v1/namespaces/[^/]+/deployments/podinfo/scale$`
	stateCMPath      = `^/api/v1/namespaces/[^/]+/configmaps/podinfo-canary-release$`
)

// goodReleaseWeights are the TrafficSplit's canary weights during a good release under
// killAnalysis: steps of 10 up to 30, then back to the primary 10 at a time.
var goodReleaseWeights = []int64{10, 20, 30, 20, 10, 0}

// TestAccRelease_apiFaults puts a fault-injecting proxy between the provider (run by the real
// terraform CLI) and kube-apiserver, and fails chosen writes of a good release with the
// errors a real API server or network produces. A fault that the engine's retries absorb
// (409, 500, a dropped connection, each a few times) must leave the release exactly as
// without it; a fault that outlasts the retries must fail the apply with an error that says
// where traffic is, leave traffic on sides with Ready pods, record (in the state ConfigMap and
// the Terraform state) the canary weight it ended at, and let the next apply finish.
// The simulator's invariant log must stay empty throughout (checked by c.namespace).
func TestAccRelease_apiFaults(t *testing.T) {
	c := testAccStack(t)
	const v1, v2 = "podinfo:6.0.0", "podinfo:6.0.1"
	// failure is what an apply under a fault that outlasts the retries must leave.
	type failure struct {
		// object is the object whose write failed, as the error must name it (%s: namespace).
		object string
		// phase is the recorded phase: Failed, or the phase of a promotion that the next apply
		// finishes.
		phase rollout.Phase
		// canary is the live canary weight: the last write that went through.
		canary int64
		// weights are the TrafficSplit's canary weights during the failed apply.
		weights []int64
	}
	type kase struct {
		name  string
		rules []faultproxy.Rule
		// fails is nil when the retries absorb the fault, so the apply must go through.
		fails *failure
	}
	cases := []kase{
		{name: "trafficSplit/409x2", rules: []faultproxy.Rule{
			{Method: "PUT", Path: trafficSplitPath, After: 1, Times: 2, Action: faultproxy.Conflict},
		}},
		{name: "trafficSplit/500x3", rules: []faultproxy.Rule{
			// The first step back towards the primary, in Finalising.
			{Method: "PUT", Path: trafficSplitPath, After: 3, Times: 3, Action: faultproxy.InternalError},
		}},
		{name: "trafficSplit/dropResponse", rules: []faultproxy.Rule{
			// The write to 20% takes effect; the provider sees the connection drop.
			{Method: "PUT", Path: trafficSplitPath, After: 1, Times: 1, Action: faultproxy.DropResponse},
		}},
		{name: "scale/409", rules: []faultproxy.Rule{
			// The canary's scale-up.
			{Method: "PUT", Path: scalePath, Times: 2, Action: faultproxy.Conflict},
		}},
		{name: "scale/500", rules: []faultproxy.Rule{
			// The canary's scale-down, once traffic is back on the primary.
			{Method: "PUT", Path: scalePath, After: 1, Times: 3, Action: faultproxy.InternalError},
		}},
		{name: "stateConfigMap/500", rules: []faultproxy.Rule{
			// The first record of the run (Progressing).
			{Method: "PUT", Path: stateCMPath, Times: 3, Action: faultproxy.InternalError},
		}},
		{name: "stateConfigMap/dropResponse", rules: []faultproxy.Rule{
			// Write-ahead records of the weight steps: the writes take effect, the provider
			// sees the connection drop.
			{Method: "PUT", Path: stateCMPath, After: 2, Times: 2, Action: faultproxy.DropResponse},
		}},
		{name: "trafficSplit/persistent500", rules: []faultproxy.Rule{
			// 10% and 20% go through; from the step to 30% on, every write fails, the
			// rollback's included.
			{Method: "PUT", Path: trafficSplitPath, After: 2, Action: faultproxy.InternalError},
		}, fails: &failure{object: "TrafficSplit %s/podinfo", phase: rollout.PhaseFailed, canary: 20, weights: []int64{10, 20}}},
		{name: "trafficSplit/persistent500/finalising", rules: []faultproxy.Rule{
			// The analysis passed and the primary was promoted; from the first step back
			// towards it (30% to 20%) on, every write fails.
			{Method: "PUT", Path: trafficSplitPath, After: 3, Action: faultproxy.InternalError},
		}, fails: &failure{object: "TrafficSplit %s/podinfo", phase: rollout.PhaseFinalising, canary: 30, weights: []int64{10, 20, 30}}},
		{name: "scale/persistent500/scaleDown", rules: []faultproxy.Rule{
			// Traffic is back on the promoted primary; the canary's scale-down fails for good.
			{Method: "PUT", Path: scalePath, After: 1, Action: faultproxy.InternalError},
		}, fails: &failure{object: "Deployment %s/podinfo", phase: rollout.PhaseFinalising, canary: 0, weights: goodReleaseWeights}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := c.namespace(t)
			proxy := c.faultProxy(t)
			w := c.workdir(t)
			kubeconfig := filepath.Join(w.dir, "faultproxy.kubeconfig")
			if err := proxy.Kubeconfig(kubeconfig); err != nil {
				t.Fatal(err)
			}
			w.provider = fmt.Sprintf("provider \"canary\" {\n  kubernetes = { config_path = %q }\n}\n", kubeconfig)

			w.write(ns, v1, "0")
			if out, err := w.run("apply", "-auto-approve"); err != nil {
				t.Fatalf("first apply: %v\n%s", err, out)
			}
			// Cleanups run last first: the destroy goes through the proxy, still open then.
			t.Cleanup(func() {
				if out, err := w.run("destroy", "-auto-approve"); err != nil {
					t.Errorf("destroy: %v\n%s", err, out)
				}
			})

			rec := c.recordWeights(t, ns, "podinfo")
			handles := make([]*faultproxy.RuleHandle, len(tc.rules))
			for i, r := range tc.rules {
				handles[i] = proxy.Add(r)
			}
			w.write(ns, v2, "0")
			start := time.Now()
			out, err := w.run("apply", "-auto-approve")
			proxy.Clear()
			t.Logf("apply under faults took %s (%v); TrafficSplit PUTs: %d, scale PUTs: %d, state ConfigMap PUTs: %d",
				time.Since(start).Round(time.Second), err, proxy.Requests("PUT", trafficSplitPath),
				proxy.Requests("PUT", scalePath), proxy.Requests("PUT", stateCMPath))
			for i, h := range handles {
				if h.Hits() == 0 {
					t.Errorf("rule %d (%s %s on %s, after %d) never fired: the case tested nothing",
						i, tc.rules[i].Action, tc.rules[i].Method, tc.rules[i].Path, tc.rules[i].After)
				} else {
					t.Logf("rule %d (%s) fired %d times", i, tc.rules[i].Action, h.Hits())
				}
			}

			if tc.fails == nil {
				// The retries absorb the fault: the release goes through as without it.
				if err != nil {
					t.Fatalf("apply under a fault the retries absorb failed: %v\n%s", err, out)
				}
				c.judge(t, ns, v2)
				c.checkPhase(t, ns, rollout.PhaseSucceeded)
				if got := rec.seen(); !slices.Equal(got, goodReleaseWeights) {
					t.Errorf("TrafficSplit canary weights were %v, want %v as without the fault", got, goodReleaseWeights)
				}
				return
			}

			// The fault outlasts the retries: the apply fails and says where traffic is.
			if err == nil {
				t.Fatalf("apply under a persistent fault went through\n%s", out)
			}
			primary, canary, serr := c.splitWeights(ns, "podinfo")
			if serr != nil {
				t.Fatal(serr)
			}
			t.Logf("live split after the failed apply: %d/%d; its output:\n%s", primary, canary, out)
			for _, want := range []*regexp.Regexp{
				wrapped("Canary release failed"),
				wrapped(fmt.Sprintf(tc.fails.object, ns)),
				wrapped("(injected by faultproxy)"),
				wrapped(whereTrafficText(primary, canary)),
			} {
				if !want.MatchString(out) {
					t.Errorf("the failed apply's error (logged above) does not match %q", want)
				}
			}
			if primary+canary != 100 {
				t.Errorf("live split %d/%d does not sum to 100", primary, canary)
			}
			if canary != tc.fails.canary {
				t.Errorf("live canary weight %d after the failed apply, want %d", canary, tc.fails.canary)
			}
			if got := rec.seen(); !slices.Equal(got, tc.fails.weights) {
				t.Errorf("TrafficSplit canary weights were %v, want %v", got, tc.fails.weights)
			}
			// Every side with traffic has Ready pods.
			for side, weight := range map[string]int64{"podinfo-primary": primary, "podinfo": canary} {
				if weight == 0 {
					continue
				}
				d, derr := c.deployment(ns, side)
				if derr != nil {
					t.Fatal(derr)
				}
				if d.Status.ReadyReplicas == 0 || d.Spec.Replicas == nil || *d.Spec.Replicas == 0 {
					t.Errorf("Deployment %s gets %d%% of traffic with %d Ready pods (replicas %v)", side, weight, d.Status.ReadyReplicas, d.Spec.Replicas)
				}
			}
			// The status a user reads (state ConfigMap and Terraform state) is where the
			// apply ended.
			st := c.checkPhase(t, ns, tc.fails.phase)
			if int64(st.CanaryWeight) != canary {
				t.Errorf("recorded canary weight %d after the failed apply, live split %d/%d", st.CanaryWeight, primary, canary)
			}
			if tfWeight, ok := w.stateCanaryWeight(t); !ok {
				t.Errorf("no status.canary_weight in the Terraform state after the failed apply")
			} else if tfWeight != canary {
				t.Errorf("Terraform state says status.canary_weight = %d after the failed apply, live split %d/%d", tfWeight, primary, canary)
			}

			// Without the fault, the next apply recovers and releases v2.
			start = time.Now()
			out, err = w.run("apply", "-auto-approve")
			t.Logf("apply after the fault took %s (%v)", time.Since(start).Round(time.Second), err)
			if err != nil {
				t.Fatalf("apply after the fault was cleared: %v\n%s", err, out)
			}
			c.judge(t, ns, v2)
			c.checkPhase(t, ns, rollout.PhaseSucceeded)
		})
	}
}

// faultProxy starts a fault-injecting proxy in front of the stack's API server, closed when
// the test ends.
func (c *testCluster) faultProxy(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	upstream, err := clientcmd.BuildConfigFromFlags("", c.env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.Start(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// checkPhase asserts the phase recorded in the state ConfigMap and returns the status.
func (c *testCluster) checkPhase(t *testing.T, ns string, want rollout.Phase) rollout.Status {
	t.Helper()
	st, ok, err := rollout.LoadState(context.Background(), c.kube, ns, "podinfo")
	if err != nil || !ok {
		t.Fatalf("state ConfigMap: found %v, %v", ok, err)
	}
	if st.Status.Phase != want {
		t.Errorf("recorded phase %s (%q), want %s", st.Status.Phase, st.Status.Message, want)
	}
	return st.Status
}

// stateCanaryWeight reads status.canary_weight of the release from the Terraform state.
func (w *workdir) stateCanaryWeight(t *testing.T) (int64, bool) {
	t.Helper()
	cmd, out := w.command("show", "-json", "-no-color")
	if err := cmd.Run(); err != nil {
		t.Fatalf("terraform show: %v\n%s", err, out)
	}
	var state struct {
		Values struct {
			RootModule struct {
				Resources []struct {
					Address string `json:"address"`
					Values  struct {
						Status *struct {
							CanaryWeight *int64 `json:"canary_weight"`
						} `json:"status"`
					} `json:"values"`
				} `json:"resources"`
			} `json:"root_module"`
		} `json:"values"`
	}
	if err := json.Unmarshal(out.Bytes(), &state); err != nil {
		t.Fatalf("terraform show -json: %v\n%s", err, out)
	}
	for _, r := range state.Values.RootModule.Resources {
		if r.Address == addr && r.Values.Status != nil && r.Values.Status.CanaryWeight != nil {
			return *r.Values.Status.CanaryWeight, true
		}
	}
	return 0, false
}

// whereTrafficText is how the engine words a live split in its messages.
func whereTrafficText(primary, canary int64) string {
	switch canary {
	case 0:
		return "100% of traffic is on the primary podinfo-primary"
	case 100:
		return "100% of traffic is on the canary podinfo"
	}
	return fmt.Sprintf("%d%% of traffic is on the primary podinfo-primary and %d%% on the canary podinfo", primary, canary)
}
