package provider

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

// errUnknown marks a value that is not known yet (plan time): callers skip what they cannot
// check instead of failing.
var errUnknown = errors.New("not known until apply")

// decode reads a nested object into target. It reports false for a null object, and
// errUnknown when the object or anything in it is unknown.
func decode(o types.Object, target any) (bool, error) {
	if o.IsNull() {
		return false, nil
	}
	if !fullyKnown(o) {
		return false, errUnknown
	}
	return true, diagErr(o.As(context.Background(), target, basetypes.ObjectAsOptions{}))
}

// collection is a list or a map.
type collection interface {
	attr.Value
	ElementsAs(ctx context.Context, target any, allowUnhandled bool) diag.Diagnostics
}

// decodeElements reads a list or a map into target (a slice or a map), which a null value
// leaves empty; anything unknown is errUnknown.
func decodeElements(c collection, target any) error {
	if c.IsNull() {
		return nil
	}
	if !fullyKnown(c) {
		return errUnknown
	}
	return diagErr(c.ElementsAs(context.Background(), target, false))
}

// fullyKnown reports whether v and everything nested in it are known.
func fullyKnown(v attr.Value) bool {
	tv, err := v.ToTerraformValue(context.Background())
	return err == nil && tv.IsFullyKnown()
}

func diagErr(d diag.Diagnostics) error {
	if !d.HasError() {
		return nil
	}
	var msgs []string
	for _, e := range d.Errors() {
		msgs = append(msgs, e.Summary()+": "+e.Detail())
	}
	return errors.New(strings.Join(msgs, "; "))
}

// prefixed names the attribute an error is about; nil stays nil.
func prefixed(attribute string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", attribute, err)
}
