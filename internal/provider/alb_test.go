package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// albTargetGroup selects the canary's target group in the simulator's stand-ins for
// CloudWatch's ALB metrics (<namespace>/<service>:<port>).
const albTargetGroup = `target_group=~"{{ namespace }}/{{ target }}-canary:.+"`

// albMetrics are the e2e checks as custom queries: alb has no built-in metrics until a
// CloudWatch metric provider exists.
var albMetrics = fmt.Sprintf(`
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 }, query = %q },
      { name = "request-duration", interval = "10s", threshold_range = { max = 500 }, query = %q },`,
	`sum(rate(alb_requests_total{`+albTargetGroup+`,code!~"5.."}[{{ interval }}])) / sum(rate(alb_requests_total{`+albTargetGroup+`}[{{ interval }}])) * 100`,
	`histogram_quantile(0.99, sum(rate(alb_target_response_time_seconds_bucket{`+albTargetGroup+`}[{{ interval }}])) by (le)) * 1000`)

// albRouter: the user's Ingress podinfo, in IngressGroup canary-demo, sends app.example.com to
// the apex Service; the release writes Ingress podinfo-podinfo-canary in the same group.
var albRouter = routerCase{
	meshProvider: "alb",
	releaseLines: "\n  ingress_ref = { name = \"podinfo\" }",
	metrics:      albMetrics,
	route:        ingresses,
	routeName:    "podinfo-podinfo-canary",
	routeKind:    "Ingress",
	weights:      albWeights,
	abTesting:    true,
	userObjects: func(t *testing.T, c *testCluster, ns string) []objectRef {
		// Deleted before the namespace (cleanups run last first), so that its pods going
		// away leave no Ingress sending traffic to the apex Service.
		t.Cleanup(func() {
			_ = c.dyn.Resource(ingresses).Namespace(ns).Delete(context.Background(), "podinfo", metav1.DeleteOptions{})
		})
		return []objectRef{c.createUserObject(t, ingresses, ns, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
			"metadata": map[string]any{"name": "podinfo", "annotations": map[string]any{
				"alb.ingress.kubernetes.io/group.name":  "canary-demo",
				"alb.ingress.kubernetes.io/scheme":      "internet-facing",
				"alb.ingress.kubernetes.io/target-type": "ip",
			}},
			"spec": map[string]any{
				"ingressClassName": "alb",
				"rules": []any{map[string]any{"host": "app.example.com", "http": map[string]any{"paths": []any{map[string]any{
					"path": "/", "pathType": "Prefix",
					"backend": map[string]any{"service": map[string]any{"name": "podinfo", "port": map[string]any{"number": int64(80)}}},
				}}}}},
			},
		}})}
	},
}

// albWeights reads the forward action podinfo of the generated Ingress and whether an A/B path
// (action podinfo-ab-0: the header x-canary: insider, all to the canary) is ahead of its path.
func albWeights(u *unstructured.Unstructured) (int64, int64, error) {
	ann := u.GetAnnotations()
	weights := func(name string) (p, c int64, err error) {
		var a struct {
			ForwardConfig struct {
				TargetGroups []struct {
					ServiceName string `json:"serviceName"`
					Weight      int64  `json:"weight"`
				} `json:"targetGroups"`
			} `json:"forwardConfig"`
		}
		if err := json.Unmarshal([]byte(ann["alb.ingress.kubernetes.io/actions."+name]), &a); err != nil {
			return 0, 0, fmt.Errorf("action %s: %v", name, err)
		}
		for _, tg := range a.ForwardConfig.TargetGroups {
			switch tg.ServiceName {
			case "podinfo-primary":
				p = tg.Weight
			case "podinfo-canary":
				c = tg.Weight
			}
		}
		return p, c, nil
	}
	rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "rules")
	rule, _ := rules[0].(map[string]any)
	paths, _, _ := unstructured.NestedSlice(rule, "http", "paths")
	matched := len(paths) == 2
	if matched {
		ab, _ := paths[0].(map[string]any)
		name, _, _ := unstructured.NestedString(ab, "backend", "service", "name")
		conds := ann["alb.ingress.kubernetes.io/conditions."+name]
		want := `[{"field":"http-header","httpHeaderConfig":{"httpHeaderName":"x-canary","values":["insider"]}}]`
		p, c, err := weights(name)
		if name != "podinfo-ab-0" || conds != want || err != nil || p != 0 || c != 100 {
			return 0, 0, fmt.Errorf("A/B path to %s with conditions %s (%d/%d, %v), want podinfo-ab-0, %s and the canary at 100", name, conds, p, c, err, want)
		}
	}
	p, c, err := weights("podinfo")
	if err != nil {
		return 0, 0, err
	}
	return abState(p, c, matched)
}

// TestAccALB runs the router scenarios, A/B testing included, through the simulator's
// stand-ins for the ALB's CloudWatch metrics; the user's Ingress is never written.
func TestAccALB(t *testing.T) { runRouterAcceptance(t, albRouter) }
