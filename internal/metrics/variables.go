package metrics

import (
	"slices"
	"text/template/parse"
)

// VariableKeys returns, sorted and without repeats, the keys a query template reads as
// {{ variables.key }} (or {{ index variables "key" }}), wherever they appear, including inside
// branches that a given rendering might skip: every key a template names must be given.
func VariableKeys(query string) ([]string, error) {
	t, err := parseQuery(query, Vars{})
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, tmpl := range t.Templates() {
		if tmpl.Tree != nil {
			keys = appendVariableKeys(keys, tmpl.Root)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

func appendVariableKeys(keys []string, n parse.Node) []string {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return keys
		}
		for _, c := range n.Nodes {
			keys = appendVariableKeys(keys, c)
		}
	case *parse.ActionNode:
		keys = appendVariableKeys(keys, n.Pipe)
	case *parse.TemplateNode:
		keys = appendVariableKeys(keys, n.Pipe)
	case *parse.IfNode:
		keys = appendBranchKeys(keys, &n.BranchNode)
	case *parse.RangeNode:
		keys = appendBranchKeys(keys, &n.BranchNode)
	case *parse.WithNode:
		keys = appendBranchKeys(keys, &n.BranchNode)
	case *parse.PipeNode:
		if n == nil {
			return keys
		}
		for _, c := range n.Cmds {
			keys = appendVariableKeys(keys, c)
		}
	case *parse.CommandNode:
		if key, ok := indexedVariable(n.Args); ok {
			keys = append(keys, key)
		}
		for _, a := range n.Args {
			keys = appendVariableKeys(keys, a)
		}
	case *parse.ChainNode:
		if id, ok := n.Node.(*parse.IdentifierNode); ok && id.Ident == "variables" && len(n.Field) > 0 {
			keys = append(keys, n.Field[0])
		}
		keys = appendVariableKeys(keys, n.Node)
	}
	return keys
}

func appendBranchKeys(keys []string, b *parse.BranchNode) []string {
	keys = appendVariableKeys(keys, b.Pipe)
	keys = appendVariableKeys(keys, b.List)
	return appendVariableKeys(keys, b.ElseList)
}

// indexedVariable reads `index variables "key"`.
func indexedVariable(args []parse.Node) (string, bool) {
	if len(args) < 3 {
		return "", false
	}
	fn, ok1 := args[0].(*parse.IdentifierNode)
	v, ok2 := args[1].(*parse.IdentifierNode)
	key, ok3 := args[2].(*parse.StringNode)
	if !ok1 || !ok2 || !ok3 || fn.Ident != "index" || v.Ident != "variables" {
		return "", false
	}
	return key.Text, true
}
