package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"

	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// valueJSON encodes a Terraform value as plain JSON, which valueFromJSON reads back.
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

// recordable is the part of a planned configuration that the state ConfigMap may hold, for
// import to restore: what Terraform computes (status, rollout_plan) goes, and so does what may
// be secret or large, since any identity with the built-in view role reads ConfigMaps. Webhook
// URLs (incoming-webhook URLs carry tokens) and metadata, alert addresses and proxies,
// triggers and the manifest are not recorded; recovery needs none of them, only the template
// hashes of the status.
func recordable(v tftypes.Value) tftypes.Value {
	out, err := tftypes.Transform(v, func(at *tftypes.AttributePath, v tftypes.Value) (tftypes.Value, error) {
		if notRecorded(at) {
			return tftypes.NewValue(v.Type(), nil), nil
		}
		return v, nil
	})
	if err != nil {
		return tftypes.NewValue(v.Type(), nil)
	}
	return out
}

// notRecorded reports the attributes recordable drops.
func notRecorded(at *tftypes.AttributePath) bool {
	steps := at.Steps()
	name := func(i int) string {
		if i >= len(steps) {
			return ""
		}
		n, _ := steps[i].(tftypes.AttributeName)
		return string(n)
	}
	switch {
	case len(steps) == 1:
		switch name(0) {
		case "status", "rollout_plan", "last_run", "manifest", "triggers":
			return true
		}
	case len(steps) == 4 && name(0) == "analysis" && name(1) == "webhooks":
		return name(3) == "url" || name(3) == "metadata"
	case len(steps) == 5 && name(0) == "analysis" && name(1) == "alerts" && name(3) == "provider":
		return name(4) == "address" || name(4) == "proxy"
	}
	return false
}

// valueFromJSON decodes what valueJSON wrote into a value of type typ, on tftypes' public API
// only (its own JSON decoder is for terraform-plugin-go's internal use). Attributes missing
// from the JSON are null, so a spec saved by an older version still imports.
func valueFromJSON(data []byte, typ tftypes.Type) (tftypes.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var plain any
	if err := dec.Decode(&plain); err != nil {
		return tftypes.Value{}, err
	}
	return typedValue(plain, typ, tftypes.NewAttributePath())
}

func typedValue(plain any, typ tftypes.Type, at *tftypes.AttributePath) (tftypes.Value, error) {
	if plain == nil {
		return tftypes.NewValue(typ, nil), nil
	}
	mismatch := func() (tftypes.Value, error) {
		return tftypes.Value{}, at.NewErrorf("%T does not fit type %s", plain, typ)
	}
	switch t := typ.(type) {
	case tftypes.Object:
		fields, ok := plain.(map[string]any)
		if !ok {
			return mismatch()
		}
		vals := make(map[string]tftypes.Value, len(t.AttributeTypes))
		for name, at2 := range t.AttributeTypes {
			v, err := typedValue(fields[name], at2, at.WithAttributeName(name))
			if err != nil {
				return tftypes.Value{}, err
			}
			vals[name] = v
		}
		return tftypes.NewValue(t, vals), nil
	case tftypes.Map:
		fields, ok := plain.(map[string]any)
		if !ok {
			return mismatch()
		}
		vals := make(map[string]tftypes.Value, len(fields))
		for k, f := range fields {
			v, err := typedValue(f, t.ElementType, at.WithElementKeyString(k))
			if err != nil {
				return tftypes.Value{}, err
			}
			vals[k] = v
		}
		return tftypes.NewValue(t, vals), nil
	case tftypes.List, tftypes.Set:
		items, ok := plain.([]any)
		if !ok {
			return mismatch()
		}
		var elem tftypes.Type
		switch c := t.(type) {
		case tftypes.List:
			elem = c.ElementType
		case tftypes.Set:
			elem = c.ElementType
		}
		vals := make([]tftypes.Value, 0, len(items))
		for i, it := range items {
			v, err := typedValue(it, elem, at.WithElementKeyInt(i))
			if err != nil {
				return tftypes.Value{}, err
			}
			vals = append(vals, v)
		}
		return tftypes.NewValue(t, vals), nil
	case tftypes.Tuple:
		items, ok := plain.([]any)
		if !ok || len(items) != len(t.ElementTypes) {
			return mismatch()
		}
		vals := make([]tftypes.Value, len(items))
		for i, it := range items {
			v, err := typedValue(it, t.ElementTypes[i], at.WithElementKeyInt(i))
			if err != nil {
				return tftypes.Value{}, err
			}
			vals[i] = v
		}
		return tftypes.NewValue(t, vals), nil
	}
	switch {
	case typ.Is(tftypes.String):
		if s, ok := plain.(string); ok {
			return tftypes.NewValue(typ, s), nil
		}
	case typ.Is(tftypes.Bool):
		if b, ok := plain.(bool); ok {
			return tftypes.NewValue(typ, b), nil
		}
	case typ.Is(tftypes.Number):
		if n, ok := plain.(json.Number); ok {
			f, _, err := big.ParseFloat(n.String(), 10, 512, big.ToNearestEven)
			if err != nil {
				return tftypes.Value{}, at.NewError(err)
			}
			return tftypes.NewValue(typ, f), nil
		}
	}
	return mismatch()
}
