package registry

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The provider names no metric backend: it asks the registry. A backend's package imported by
// a provider file means that backend lives in two places again.
func TestProviderNamesNoMetricBackend(t *testing.T) {
	files, err := filepath.Glob("../../provider/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no provider files found (%v)", err)
	}
	const metricsPath = "github.com/canary-release/terraform-provider-canary/internal/metrics/"
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			name, ok := strings.CutPrefix(path, metricsPath)
			if _, backend := Get(name); ok && backend && name != "prometheus" {
				t.Errorf("%s imports the %s backend's package: a backend is registered in internal/metrics/registry and named nowhere else", filepath.Base(f), name)
			}
		}
	}
}

// Every backend has a description and attributes for the metric template's schema.
func TestEveryBackendDescribesItself(t *testing.T) {
	for _, name := range Names() {
		b, _ := Get(name)
		if b.Description == "" || len(b.Attributes) == 0 || b.Build == nil {
			t.Errorf("backend %s: description %q, %d attributes, build set %v", name, b.Description, len(b.Attributes), b.Build != nil)
		}
	}
}
