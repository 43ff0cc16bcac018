package tfschema

import (
	"context"
	"fmt"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// StringMatchMap is a map of Flagger's string matches: exactly one of exact, prefix, suffix
// and regex each.
func StringMatchMap(description string) schema.MapNestedAttribute {
	text := func(d string) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, MarkdownDescription: d}
	}
	return schema.MapNestedAttribute{Optional: true, MarkdownDescription: description + " Each value has exactly one of `exact`, `prefix`, `suffix` and `regex`.",
		NestedObject: schema.NestedAttributeObject{
			Attributes: map[string]schema.Attribute{
				"exact":  text("The whole value."),
				"prefix": text("The beginning of the value."),
				"suffix": text("The end of the value."),
				"regex":  text("A regular expression (RE2) the value must match."),
			},
			Validators: []validator.Object{ExactlyOneStringMatch{}},
		}}
}

// StringMatchModel is one value of a StringMatchMap.
type StringMatchModel struct {
	Exact  types.String `tfsdk:"exact"`
	Prefix types.String `tfsdk:"prefix"`
	Suffix types.String `tfsdk:"suffix"`
	Regex  types.String `tfsdk:"regex"`
}

// StringMatches decodes a StringMatchMap.
func StringMatches(m types.Map) (map[string]router.StringMatch, error) {
	var models map[string]StringMatchModel
	if err := DecodeElements(m, &models); err != nil || len(models) == 0 {
		return nil, err
	}
	out := make(map[string]router.StringMatch, len(models))
	for name, sm := range models {
		out[name] = router.StringMatch{Exact: sm.Exact.ValueString(), Prefix: sm.Prefix.ValueString(), Suffix: sm.Suffix.ValueString(), Regex: sm.Regex.ValueString()}
	}
	return out, nil
}

// ExactlyOneStringMatch requires one of exact, prefix, suffix and regex in a string match, and
// a regex that compiles.
type ExactlyOneStringMatch struct{}

func (ExactlyOneStringMatch) Description(context.Context) string {
	return "exactly one of exact, prefix, suffix and regex"
}

func (v ExactlyOneStringMatch) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (ExactlyOneStringMatch) ValidateObject(ctx context.Context, req validator.ObjectRequest, resp *validator.ObjectResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	set := 0
	for name, value := range req.ConfigValue.Attributes() {
		if value.IsUnknown() {
			return
		}
		if s, ok := value.(types.String); ok && !s.IsNull() {
			set++
			if name == "regex" {
				if _, err := regexp.Compile(s.ValueString()); err != nil {
					resp.Diagnostics.AddAttributeError(req.Path.AtName("regex"), "Invalid regex",
						fmt.Sprintf("%s is not a valid regular expression: %v", req.Path.AtName("regex"), err))
				}
			}
		}
	}
	if set != 1 {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid match",
			fmt.Sprintf("%s must set exactly one of exact, prefix, suffix and regex; it sets %d.", req.Path, set))
	}
}
