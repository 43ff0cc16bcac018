package provider

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/validation"
)

// durationValidator accepts every Go duration a Flagger user writes (`30s`, `1m30s`, `1h`) at
// or above a minimum. With promQL it also requires a duration that PromQL reads in a range
// selector (whole numbers of each unit: `1m30s`, not `1.5m`).
type durationValidator struct {
	minimum time.Duration
	promQL  bool
}

func (v durationValidator) Description(context.Context) string {
	if v.promQL {
		return fmt.Sprintf("a PromQL duration such as `30s` or `1m30s`, at least %s", v.minimum)
	}
	return fmt.Sprintf("a Go duration such as `30s` or `1m30s`, at least %s", v.minimum)
}

func (v durationValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v durationValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	s := req.ConfigValue.ValueString()
	d, err := time.ParseDuration(s)
	if err == nil && v.promQL {
		var pd model.Duration
		pd, err = model.ParseDuration(s)
		d = time.Duration(pd)
	}
	switch {
	case err != nil:
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid duration",
			fmt.Sprintf("%s must be %s; got %q.", req.Path, v.Description(ctx), s))
	case d < v.minimum:
		resp.Diagnostics.AddAttributeError(req.Path, "Duration too short",
			fmt.Sprintf("%s must be at least %s; got %q.", req.Path, v.minimum, s))
	}
}

// objectNameValidator checks a name that, with each suffix, names a Kubernetes object: a
// DNS-1035 label (Services: lowercase, starting with a letter, at most 63 characters) when
// label is set, else a DNS-1123 subdomain (ConfigMaps, Leases).
type objectNameValidator struct {
	suffixes []string
	label    bool
	what     string
}

func (v objectNameValidator) Description(context.Context) string {
	if v.label {
		return fmt.Sprintf("a DNS-1035 label (lowercase letters, digits and '-', starting with a letter) short enough for %s", v.what)
	}
	return fmt.Sprintf("a DNS-1123 subdomain (lowercase letters, digits, '-' and '.') short enough for %s", v.what)
}

func (v objectNameValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v objectNameValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	name := req.ConfigValue.ValueString()
	for _, suffix := range append([]string{""}, v.suffixes...) {
		check := validation.IsDNS1123Subdomain
		if v.label {
			check = validation.IsDNS1035Label
		}
		if problems := check(name + suffix); len(problems) > 0 {
			resp.Diagnostics.AddAttributeError(req.Path, "Invalid name",
				fmt.Sprintf("%s must be %s; %q is not: %s.", req.Path, v.Description(ctx), name+suffix, strings.Join(problems, "; ")))
			return
		}
	}
}

// webhookURLValidator accepts absolute http and https URLs, the only ones a webhook can call.
type webhookURLValidator struct{}

func (webhookURLValidator) Description(context.Context) string {
	return "an absolute http:// or https:// URL"
}

func (v webhookURLValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v webhookURLValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	u, err := url.Parse(req.ConfigValue.ValueString())
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL itself is not repeated: it may carry a token.
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid webhook URL", fmt.Sprintf("%s must be %s.", req.Path, v.Description(ctx)))
	}
}
