package metrics

import (
	"slices"
	"testing"
)

func TestVariableKeys(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{`sum(rate(x{ns="{{ namespace }}"}[{{ interval }}]))`, nil},
		{`x{kind="{{ variables.kind }}",code=~"{{ variables.code }}",k2="{{ variables.kind }}"}`, []string{"code", "kind"}},
		{`{{ if variables.a }}{{ variables.b }}{{ else }}{{ variables.c | printf "%s" }}{{ end }}`, []string{"a", "b", "c"}},
		{`{{ range $i := "x" }}{{ index variables "d" }}{{ end }}{{ with variables.e }}{{ . }}{{ end }}`, []string{"d", "e"}},
		{`{{ define "t" }}{{ variables.f }}{{ end }}{{ template "t" }}`, []string{"f"}},
	} {
		got, err := VariableKeys(tc.query)
		if err != nil {
			t.Errorf("VariableKeys(%q): %v", tc.query, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("VariableKeys(%q) = %v, want %v", tc.query, got, tc.want)
		}
	}
	if _, err := VariableKeys(`{{ variables.x `); err == nil {
		t.Error("an unclosed action was accepted")
	}
	if _, err := VariableKeys(`{{ nope }}`); err == nil {
		t.Error("an unknown function was accepted")
	}
}
