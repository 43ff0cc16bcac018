package alb

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// action is the AWS Load Balancer Controller's action annotation
// (alb.ingress.kubernetes.io/actions.<name>), of type forward.
type action struct {
	Type          string         `json:"type"`
	ForwardConfig *forwardConfig `json:"forwardConfig,omitempty"`
}

type forwardConfig struct {
	TargetGroups []targetGroup `json:"targetGroups"`
	// TargetGroupStickiness is written disabled: see Describe for why.
	TargetGroupStickiness *stickiness `json:"targetGroupStickinessConfig,omitempty"`
}

// targetGroup is one weighted target group, by Service; the controller accepts the port as a
// number or a name, and Argo Rollouts writes it as a string.
type targetGroup struct {
	ServiceName string          `json:"serviceName"`
	ServicePort json.RawMessage `json:"servicePort"`
	Weight      int             `json:"weight"`
}

// port is the servicePort as text, a number or a name.
func (tg targetGroup) port() string {
	var s string
	if json.Unmarshal(tg.ServicePort, &s) == nil {
		return s
	}
	var n int64
	if json.Unmarshal(tg.ServicePort, &n) == nil {
		return strconv.FormatInt(n, 10)
	}
	return ""
}

type stickiness struct {
	Enabled bool `json:"enabled"`
}

// forward is the forward action between the primary and canary target groups.
func forward(primary string, wp int, canary string, wc int, port string) string {
	p, _ := json.Marshal(port)
	return mustJSON(action{Type: "forward", ForwardConfig: &forwardConfig{
		TargetGroups: []targetGroup{
			{ServiceName: primary, ServicePort: p, Weight: wp},
			{ServiceName: canary, ServicePort: p, Weight: wc},
		},
		TargetGroupStickiness: &stickiness{},
	}})
}

func parseAction(raw string) (action, error) {
	var a action
	if raw == "" {
		return a, fmt.Errorf("missing")
	}
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		return a, fmt.Errorf("not a JSON action: %v", err)
	}
	if a.Type != "forward" || a.ForwardConfig == nil {
		return a, fmt.Errorf("type %q, want a forward action with forwardConfig", a.Type)
	}
	return a, nil
}

func mustJSON(v any) string {
	out, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps, slices and strings built here
	}
	return string(out)
}

// matchConditions are analysis.match[i] as ALB rule conditions, which the controller ANDs:
// one http-header condition per header, then one query-string condition per parameter, each
// sorted by name. ALB values are matched whole, with * and ? as wildcards, so a prefix or a
// suffix becomes one; ALB has no regular expressions, and header values match whatever their
// case.
func matchConditions(i int, m router.Match) ([]any, error) {
	var out []any
	for _, name := range sortedKeys(m.Headers) {
		v, err := wildcard(m.Headers[name])
		if err != nil {
			return nil, router.ConfigErrorf("analysis.match[%d].headers[%q]: %v", i, name, err)
		}
		out = append(out, map[string]any{"field": "http-header",
			"httpHeaderConfig": map[string]any{"httpHeaderName": name, "values": []any{v}}})
	}
	for _, name := range sortedKeys(m.QueryParams) {
		v, err := wildcard(m.QueryParams[name])
		if err != nil {
			return nil, router.ConfigErrorf("analysis.match[%d].query_params[%q]: %v", i, name, err)
		}
		out = append(out, map[string]any{"field": "query-string",
			"queryStringConfig": map[string]any{"values": []any{map[string]any{"key": name, "value": v}}}})
	}
	return out, nil
}

// wildcard is a string match as an ALB condition value.
func wildcard(sm router.StringMatch) (string, error) {
	literal := sm.Exact + sm.Prefix + sm.Suffix
	switch {
	case sm.Regex != "":
		return "", fmt.Errorf("mesh_provider alb cannot match a regex (ALB conditions have none); use exact, prefix or suffix")
	case strings.ContainsAny(literal, "*?"):
		return "", fmt.Errorf("%q holds * or ?, which ALB conditions read as wildcards", literal)
	case sm.Prefix != "":
		return sm.Prefix + "*", nil
	case sm.Suffix != "":
		return "*" + sm.Suffix, nil
	}
	return sm.Exact, nil
}
