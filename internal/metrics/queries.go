// Package metrics renders Flagger-style PromQL templates and runs them against Prometheus. The
// built-in queries belong to the mesh drivers (internal/mesh), each with its own mesh.
package metrics

import (
	"bytes"
	"fmt"
	"text/template"
)

// Vars are the values a query template can use, as Flagger's MetricTemplate functions:
// {{ name }}, {{ namespace }}, {{ target }}, {{ service }}, {{ ingress }}, {{ route }},
// {{ interval }} and {{ variables.key }}.
type Vars struct {
	Name, Namespace, Target, Service, Ingress, Route, Interval string
	Variables                                                  map[string]string
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
		"name":      str(v.Name),
		"namespace": str(v.Namespace),
		"target":    str(v.Target),
		"service":   str(v.Service),
		"ingress":   str(v.Ingress),
		"route":     str(v.Route),
		"interval":  str(v.Interval),
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
