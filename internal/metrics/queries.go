// Package metrics renders Flagger-style PromQL templates and runs them against Prometheus. The
// built-in queries belong to the mesh drivers (internal/mesh), each with its own mesh.
package metrics

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"
)

// Vars are the values a query template can use, as Flagger's MetricTemplate functions:
// {{ name }}, {{ namespace }}, {{ target }}, {{ service }}, {{ ingress }}, {{ route }},
// {{ interval }} and {{ variables.key }}, plus {{ side }} (see Side) and the target's kind,
// {{ target_kind }} (Deployment) and {{ target_kind_label }} (deployment), since meshes label
// a DaemonSet's requests with its kind where a Deployment's carry "Deployment", and
// {{ namespace_label }} and {{ pod_label }}, the labels of a pod's namespace and name on the
// application's own series (PodLabels).
type Vars struct {
	Name, Namespace, Target, Service, Ingress, Route, Interval string
	// TargetKind is the workload's kind; Deployment when empty.
	TargetKind string
	// Side is "canary" or "primary": the side a judged metric is read for (SideCanary when
	// empty). With it, Target is that side's workload (<target> or <target>-primary), and
	// the built-in queries name that side's Service as {{ service }}-{{ side }}.
	Side      string
	Variables map[string]string
	// PodLabels is the labelling of the application's series; Flagger's when unset.
	PodLabels PodLabels
}

// The two sides a judged metric is read for.
const (
	SideCanary  = "canary"
	SidePrimary = "primary"
)

// ForSide returns v rendered for one side of a judged metric: {{ side }} is the side and
// {{ target }} that side's workload, the canary target or its -primary copy.
func (v Vars) ForSide(side string) Vars {
	v.Side = side
	if side == SidePrimary {
		v.Target += "-primary"
	}
	return v
}

// Render executes a query template. A missing variable is an error rather than an empty
// string, so a typo cannot silently produce a query that matches nothing.
func Render(query string, v Vars) (string, error) {
	t, err := parseQuery(query, v)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := t.Execute(&out, nil); err != nil {
		return "", fmt.Errorf("rendering query template: %w", err)
	}
	return out.String(), nil
}

// parseQuery parses a query template with Flagger's functions bound to v.
func parseQuery(query string, v Vars) (*template.Template, error) {
	str := func(s string) func() string { return func() string { return s } }
	funcs := template.FuncMap{
		"name":              str(v.Name),
		"namespace":         str(v.Namespace),
		"target":            str(v.Target),
		"service":           str(v.Service),
		"ingress":           str(v.Ingress),
		"route":             str(v.Route),
		"interval":          str(v.Interval),
		"side":              str(side(v.Side)),
		"target_kind":       str(targetKind(v.TargetKind)),
		"target_kind_label": str(strings.ToLower(targetKind(v.TargetKind))),
		"namespace_label":   str(v.PodLabels.orDefault().Namespace),
		"pod_label":         str(v.PodLabels.orDefault().Pod),
		// text/template evaluates `variables.key` as a field chain on the function's
		// result, so {{ variables.key }} indexes this map.
		"variables": func() map[string]string { return v.Variables },
	}
	t, err := template.New("query").Option("missingkey=error").Funcs(funcs).Parse(query)
	if err != nil {
		return nil, fmt.Errorf("parsing query template: %w", err)
	}
	return t, nil
}

func targetKind(kind string) string {
	if kind == "" {
		return "Deployment"
	}
	return kind
}

func side(s string) string {
	if s == "" {
		return SideCanary
	}
	return s
}
