package provider

import (
	"github.com/canary-release/terraform-provider-canary/internal/tfschema"

	"context"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

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

// targetPortValidator checks what a Service's targetPort takes: a port number, or the name
// of a container port (an IANA service name).
type targetPortValidator struct{}

func (targetPortValidator) Description(context.Context) string {
	return "a port number from 1 to 65535, such as `8080`, or a container port name of at most 15 lowercase letters, digits and '-' " +
		"with at least one letter, such as `http`"
}

func (v targetPortValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v targetPortValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	s := req.ConfigValue.ValueString()
	// The same split as the Service is built with: what Atoi reads is a number.
	var problems []string
	if n, err := strconv.Atoi(s); err == nil {
		problems = validation.IsValidPortNum(n)
	} else {
		problems = validation.IsValidPortName(s)
	}
	if len(problems) > 0 {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid target port",
			fmt.Sprintf("%s must be %s; %q is not: %s.", req.Path, v.Description(ctx), s, strings.Join(problems, "; ")))
	}
}

// queryTemplateValidator renders a custom query as the analysis does, with placeholder
// values, so that a template that does not parse, or calls a function other than Flagger's
// variables, is a plan error rather than "metrics unavailable" in the middle of a rollout.
// `{{ variables.key }}` is only allowed in a metric template's query (templateVariables): a
// metric's own query has no variables to read.
type queryTemplateValidator struct {
	templateVariables bool
}

func (v queryTemplateValidator) Description(context.Context) string {
	if v.templateVariables {
		return "a PromQL query, as a Go template that uses only the variables `{{ name }}`, `{{ namespace }}`, `{{ target }}`, " +
			"`{{ service }}`, `{{ ingress }}`, `{{ route }}`, `{{ interval }}`, `{{ side }}` and `{{ variables.<key> }}`"
	}
	return "a PromQL query, as a Go template that uses only the variables `{{ name }}`, `{{ namespace }}`, `{{ target }}`, " +
		"`{{ service }}`, `{{ ingress }}`, `{{ route }}`, `{{ interval }}` and `{{ side }}`"
}

func (v queryTemplateValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v queryTemplateValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	query := req.ConfigValue.ValueString()
	if strings.TrimSpace(query) == "" {
		hint := " Leave query out to use the built-in query of request-success-rate or request-duration."
		if v.templateVariables {
			hint = ""
		}
		resp.Diagnostics.AddAttributeError(req.Path, "Empty query",
			fmt.Sprintf("%s must be %s; it is empty.%s", req.Path, v.Description(ctx), hint))
		return
	}
	keys, _ := metrics.VariableKeys(query)
	if _, err := renderWithPlaceholders(query, v.templateVariables); err != nil {
		detail := fmt.Sprintf("%s must be %s; %v.", req.Path, v.Description(ctx), err)
		if !v.templateVariables && len(keys) > 0 {
			detail += " Only a metric template has variables: move the query to the provider's metric_templates, " +
				"and set template_ref and template_variables on the metric."
		}
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid query template", detail)
	}
}

// renderWithPlaceholders renders a query as the analysis would, each variable standing for
// itself ({{ target }} is "target", {{ variables.key }} is "key" when templateVariables):
// what a plan can check of a query whose values are only known at apply.
func renderWithPlaceholders(query string, templateVariables bool) (string, error) {
	placeholders := metrics.Vars{Name: "name", Namespace: "namespace", Target: "target", Service: "service",
		Ingress: "ingress", Route: "route", Interval: "1m"}
	if templateVariables {
		keys, _ := metrics.VariableKeys(query)
		placeholders.Variables = make(map[string]string, len(keys))
		for _, k := range keys {
			placeholders.Variables[k] = k
		}
	}
	return metrics.Render(query, placeholders)
}

// The validators the provider shares with the mesh drivers.
type (
	durationValidator = tfschema.Duration
	dnsLabelValidator = tfschema.DNSLabel
)

// cookieNameValidator accepts an RFC 6265 cookie name (an HTTP token).
func cookieNameValidator() validator.String {
	return stringvalidator.RegexMatches(regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"),
		"must be a cookie name: letters, digits and !#$%&'*+-.^_`|~, without spaces, '=' or ';'")
}
