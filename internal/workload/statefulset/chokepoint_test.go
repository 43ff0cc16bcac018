package statefulset

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"testing"
)

// callers lists the functions of statefulset.go that call a function or method named name.
func callers(t *testing.T, name string) []string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), "statefulset.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				switch f := call.Fun.(type) {
				case *ast.SelectorExpr:
					if f.Sel.Name == name {
						out = append(out, fn.Name.Name)
					}
				case *ast.Ident:
					if f.Name == name {
						out = append(out, fn.Name.Name)
					}
				}
			}
			return true
		})
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// The set is written in one place (write, on the copy it just read), and its partition only by
// the calls the engine makes through its chokepoints: SetRoutes (the traffic gate), PinPrimary
// (promote, with a proof), Reconcile (which only raises it) and Finalize (the destroy).
func TestOneWriterOfTheSet(t *testing.T) {
	if got := callers(t, "Update"); !slices.Equal(got, []string{"write"}) {
		t.Errorf("the StatefulSet is updated from %v; only write may", got)
	}
	if got, want := callers(t, "setPartition"), []string{"Finalize", "PinPrimary", "Reconcile", "SetRoutes"}; !slices.Equal(got, want) {
		t.Errorf("the partition is set from %v; want %v", got, want)
	}
}
