package router

import (
	"maps"
	"regexp"
	"slices"
)

// Pattern turns a prefix, suffix or regular expression condition into one regular expression.
// whole says the gateway matches the whole value (Envoy, so Gloo) rather than searching in it
// (APISIX's PCRE "~~"), which decides where the anchors go.
func (m StringMatch) Pattern(whole bool) string {
	switch {
	case m.Prefix != "" && whole:
		return regexp.QuoteMeta(m.Prefix) + ".*"
	case m.Prefix != "":
		return "^" + regexp.QuoteMeta(m.Prefix)
	case m.Suffix != "" && whole:
		return ".*" + regexp.QuoteMeta(m.Suffix)
	case m.Suffix != "":
		return regexp.QuoteMeta(m.Suffix) + "$"
	}
	return m.Regex
}

// APISIX match.exprs operators, as the ApisixRoute CRD names them (the ingress controller
// turns them into APISIX's "==" and "~~").
const (
	apisixOpEqual = "Equal"
	apisixOpRegex = "RegexMatch"
)

// APISIXExprs renders one Match as ApisixRoute match.exprs, which APISIX ANDs: headers first,
// then query parameters, each sorted by name.
func APISIXExprs(m Match) []any {
	var out []any
	for _, part := range []struct {
		scope string
		conds map[string]StringMatch
	}{{"Header", m.Headers}, {"Query", m.QueryParams}} {
		for _, name := range slices.Sorted(maps.Keys(part.conds)) {
			c := part.conds[name]
			op, value := apisixOpEqual, c.Exact
			if c.Exact == "" {
				op, value = apisixOpRegex, c.Pattern(false)
			}
			out = append(out, map[string]any{
				"subject": map[string]any{"scope": part.scope, "name": name},
				"op":      op,
				"value":   value,
			})
		}
	}
	return out
}
