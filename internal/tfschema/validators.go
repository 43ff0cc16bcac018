package tfschema

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Duration accepts every Go duration a Flagger user writes (`30s`, `1m30s`, `1h`) at or above
// Minimum. With PromQL it also requires a duration that PromQL reads in a range selector
// (whole numbers of each unit: `1m30s`, not `1.5m`).
type Duration struct {
	Minimum time.Duration
	PromQL  bool
}

func (v Duration) Description(context.Context) string {
	if v.PromQL {
		return fmt.Sprintf("a PromQL duration such as `30s` or `1m30s`, at least %s", v.Minimum)
	}
	return fmt.Sprintf("a Go duration such as `30s` or `1m30s`, at least %s", v.Minimum)
}

func (v Duration) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v Duration) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	s := req.ConfigValue.ValueString()
	d, err := time.ParseDuration(s)
	if err == nil && v.PromQL {
		var pd model.Duration
		pd, err = model.ParseDuration(s)
		d = time.Duration(pd)
	}
	switch {
	case err != nil:
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid duration",
			fmt.Sprintf("%s must be %s; got %q.", req.Path, v.Description(ctx), s))
	case d < v.Minimum:
		resp.Diagnostics.AddAttributeError(req.Path, "Duration too short",
			fmt.Sprintf("%s must be at least %s; got %q.", req.Path, v.Minimum, s))
	}
}

// DNSLabel checks a namespace or a Service port name: a DNS-1123 label.
type DNSLabel struct{}

func (DNSLabel) Description(context.Context) string {
	return "a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)"
}

func (v DNSLabel) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v DNSLabel) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	s := req.ConfigValue.ValueString()
	if problems := validation.IsDNS1123Label(s); len(problems) > 0 {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid name",
			fmt.Sprintf("%s must be %s; %q is not: %s.", req.Path, v.Description(ctx), s, strings.Join(problems, "; ")))
	}
}

// FieldsSet wants at least one (or, with ExactlyOne, exactly one) of an object's attributes
// Names set. The framework's AtLeastOneOf and ExactlyOneOf count the object itself.
type FieldsSet struct {
	Names      []string
	ExactlyOne bool
}

func (v FieldsSet) Description(context.Context) string {
	how := "at least one"
	if v.ExactlyOne {
		how = "exactly one"
	}
	return fmt.Sprintf("%s of %s", how, strings.Join(v.Names, ", "))
}

func (v FieldsSet) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v FieldsSet) ValidateObject(ctx context.Context, req validator.ObjectRequest, resp *validator.ObjectResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	attrs := req.ConfigValue.Attributes()
	var set []string
	for _, name := range v.Names {
		a, ok := attrs[name]
		if !ok || a.IsNull() {
			continue
		}
		if a.IsUnknown() {
			return // may or may not be set: the apply decides
		}
		set = append(set, name)
	}
	if len(set) == 0 || (v.ExactlyOne && len(set) > 1) {
		got := "none"
		if len(set) > 0 {
			got = strings.Join(set, " and ")
		}
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid attribute combination",
			fmt.Sprintf("%s must set %s; it sets %s.", req.Path, v.Description(ctx), got))
	}
}
