package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/registry"
)

// checkTemplateQuery runs b's CheckQuery on a metric template's query, found at `at`. A query
// that does not render is left to the query's own validator.
func checkTemplateQuery(b backend.Backend, obj types.Object, query string, at path.Path) diag.Diagnostics {
	var diags diag.Diagnostics
	if b.CheckQuery == nil {
		return diags
	}
	rendered, err := renderWithPlaceholders(query, true)
	if err != nil {
		return diags
	}
	if err := b.CheckQuery(obj, rendered); err != nil {
		detail := fmt.Sprintf("%s %v.", at, err)
		if strings.TrimSpace(rendered) != strings.TrimSpace(query) {
			detail += fmt.Sprintf(" (Rendered with each variable as its own name: %q.)", strings.TrimSpace(rendered))
		}
		diags.AddAttributeError(at, "Invalid query for its backend", detail)
	}
	return diags
}

// metricBackendNames are the backends' type names, sorted.
func metricBackendNames() []string { return registry.Names() }

// metricBackendAttributes are the metric template's backend attributes, one per backend.
func metricBackendAttributes() map[string]schema.Attribute {
	names := registry.Names()
	attrs := make(map[string]schema.Attribute, len(names))
	for _, name := range names {
		b, _ := registry.Get(name)
		attrs[name] = schema.SingleNestedAttribute{Optional: true, MarkdownDescription: b.Description, Attributes: b.Attributes}
	}
	return attrs
}

// setBackends are the backend attributes a template object sets (or may set: unknown counts).
func setBackends(obj types.Object) []string {
	var set []string
	for name, v := range obj.Attributes() {
		if _, ok := registry.Get(name); ok && !v.IsNull() {
			set = append(set, name)
		}
	}
	slices.Sort(set)
	return set
}

// oneBackendValidator says, at plan time, that a metric template sets at most one backend.
type oneBackendValidator struct{}

func (oneBackendValidator) Description(context.Context) string {
	return "at most one of " + strings.Join(metricBackendNames(), ", ") + " (none: the provider's prometheus)"
}

func (v oneBackendValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v oneBackendValidator) ValidateObject(ctx context.Context, req validator.ObjectRequest, resp *validator.ObjectResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if set := setBackends(req.ConfigValue); len(set) > 1 {
		resp.Diagnostics.AddAttributeError(req.Path, "Several metric backends",
			fmt.Sprintf("%s sets %s: a metric template reads exactly one backend; keep one of them "+
				"(with none, the template queries the provider's prometheus).", req.Path, strings.Join(set, " and ")))
	}
}

// forMetric is the querier a metric with this interval uses: a backend whose window follows
// the metric's interval (metrics.IntervalQuerier) gets it bound; "" is Flagger's 1m.
func forMetric(q metrics.Querier, interval string) metrics.Querier {
	iq, ok := q.(metrics.IntervalQuerier)
	if !ok {
		return q
	}
	d, err := time.ParseDuration(interval)
	if interval == "" || err != nil || d <= 0 {
		d = time.Minute
	}
	return iq.ForInterval(d)
}
