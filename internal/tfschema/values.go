// Package tfschema holds the building blocks of the canary_release schema that the provider
// and the mesh drivers share: decoding framework values that may not be known yet, validators,
// and Flagger's string matches. It knows no mesh and imports neither provider nor drivers.
package tfschema

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
)

// ErrUnknown marks a value that is not known yet (plan time): callers skip what they cannot
// check instead of failing.
var ErrUnknown = errors.New("not known until apply")

// Decode reads a nested object into target. It reports false for a null object, and
// ErrUnknown when the object or anything in it is unknown.
func Decode(o types.Object, target any) (bool, error) {
	if o.IsNull() {
		return false, nil
	}
	if !FullyKnown(o) {
		return false, ErrUnknown
	}
	return true, DiagErr(o.As(context.Background(), target, basetypes.ObjectAsOptions{}))
}

// Collection is a list or a map.
type Collection interface {
	attr.Value
	ElementsAs(ctx context.Context, target any, allowUnhandled bool) diag.Diagnostics
}

// DecodeElements reads a list or a map into target (a slice or a map), which a null value
// leaves empty; anything unknown is ErrUnknown.
func DecodeElements(c Collection, target any) error {
	if c.IsNull() {
		return nil
	}
	if !FullyKnown(c) {
		return ErrUnknown
	}
	return DiagErr(c.ElementsAs(context.Background(), target, false))
}

// FullyKnown reports whether v and everything nested in it are known.
func FullyKnown(v attr.Value) bool {
	tv, err := v.ToTerraformValue(context.Background())
	return err == nil && tv.IsFullyKnown()
}

// DiagErr turns the errors of d into one error; nil without errors.
func DiagErr(d diag.Diagnostics) error {
	if !d.HasError() {
		return nil
	}
	var msgs []string
	for _, e := range d.Errors() {
		msgs = append(msgs, e.Summary()+": "+e.Detail())
	}
	return errors.New(strings.Join(msgs, "; "))
}

// Prefixed names the attribute an error is about; nil stays nil.
func Prefixed(attribute string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", attribute, err)
}

// Object is the object of the named attributes of values, for Decode into a struct whose
// tfsdk tags are those names: a block's attributes that one driver owns, read apart from the
// rest of the block. A name missing from values is an error.
func Object(values map[string]attr.Value, names ...string) (types.Object, error) {
	typesByName := make(map[string]attr.Type, len(names))
	picked := make(map[string]attr.Value, len(names))
	for _, name := range names {
		v, ok := values[name]
		if !ok {
			return types.ObjectNull(nil), fmt.Errorf("no attribute %s", name)
		}
		typesByName[name], picked[name] = v.Type(context.Background()), v
	}
	o, d := types.ObjectValue(typesByName, picked)
	return o, DiagErr(d)
}
