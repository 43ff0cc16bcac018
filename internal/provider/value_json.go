package provider

import (
	"encoding/json"
	"fmt"
	"math/big"

	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// valueJSON encodes a Terraform value as JSON that tftypes.ValueFromJSON reads back.
func valueJSON(v tftypes.Value) ([]byte, error) {
	plain, err := plainValue(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(plain)
}

func plainValue(v tftypes.Value) (any, error) {
	if v.IsNull() || !v.IsKnown() {
		return nil, nil
	}
	typ := v.Type()
	switch {
	case typ.Is(tftypes.String):
		var s string
		err := v.As(&s)
		return s, err
	case typ.Is(tftypes.Bool):
		var b bool
		err := v.As(&b)
		return b, err
	case typ.Is(tftypes.Number):
		n := new(big.Float)
		if err := v.As(&n); err != nil {
			return nil, err
		}
		return json.Number(n.Text('g', -1)), nil
	case typ.Is(tftypes.List{}), typ.Is(tftypes.Set{}), typ.Is(tftypes.Tuple{}):
		var items []tftypes.Value
		if err := v.As(&items); err != nil {
			return nil, err
		}
		out := make([]any, 0, len(items))
		for _, it := range items {
			p, err := plainValue(it)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		return out, nil
	case typ.Is(tftypes.Map{}), typ.Is(tftypes.Object{}):
		var fields map[string]tftypes.Value
		if err := v.As(&fields); err != nil {
			return nil, err
		}
		out := make(map[string]any, len(fields))
		for k, f := range fields {
			p, err := plainValue(f)
			if err != nil {
				return nil, err
			}
			out[k] = p
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported type %s", typ)
}

// withoutStatus drops the computed status, which is not part of the configuration.
func withoutStatus(v tftypes.Value) tftypes.Value {
	var fields map[string]tftypes.Value
	if err := v.As(&fields); err != nil {
		return v
	}
	if st, ok := fields["status"]; ok {
		fields["status"] = tftypes.NewValue(st.Type(), nil)
	}
	return tftypes.NewValue(v.Type(), fields)
}
