package provider

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/registry"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// The provider's metric_templates are objects (map[string]types.Object in ProviderModel):
// `query` and one attribute per registered backend (metric_backends.go).

// metricTemplate is a metric template ready for the engine.
type metricTemplate struct {
	query string
	// querier is the template's backend; nil means the provider's Prometheus.
	querier metrics.Querier
	// variables are the keys the query reads as {{ variables.key }}: each metric that uses
	// the template must give them all in template_variables.
	variables []string
}

// lookupTemplate finds one of the provider's metric templates by name, or says why not.
type lookupTemplate func(name string) (metricTemplate, error)

func metricTemplatesAttribute() schema.MapNestedAttribute {
	return schema.MapNestedAttribute{
		Optional: true,
		MarkdownDescription: "Reusable metric queries, by name: Flagger's `MetricTemplate`. A metric of `canary_release` " +
			"uses one with `template_ref = \"<name>\"` and fills its `{{ variables.<key> }}` with `template_variables`.",
		Validators: []validator.Map{mapvalidator.KeysAre(stringvalidator.LengthAtLeast(1))},
		NestedObject: schema.NestedAttributeObject{
			Attributes: metricTemplateAttributes(),
			Validators: []validator.Object{oneBackendValidator{}},
		},
	}
}

// metricTemplateAttributes are a metric template's `query` and its backends' attributes.
func metricTemplateAttributes() map[string]schema.Attribute {
	attrs := metricBackendAttributes()
	attrs["query"] = schema.StringAttribute{
		Required: true,
		MarkdownDescription: "The backend's query (PromQL for `prometheus`; each backend's description says what it takes), a Go template with Flagger's variables " +
			"`{{ name }}`, `{{ namespace }}`, `{{ target }}`, `{{ service }}`, `{{ ingress }}`, `{{ route }}`, `{{ interval }}` and `{{ variables.<key> }}`. " +
			"It must return one number. Every `variables` key it names must be given by each metric that uses the template. " +
			"The backend is the one attribute of " + strings.Join(metricBackendNames(), ", ") + " that the template sets; none: the provider's `prometheus`.",
		Validators: []validator.String{queryTemplateValidator{templateVariables: true}},
	}
	return attrs
}

// buildMetricTemplates turns the provider's metric_templates into what the resource uses. A
// template that sets a backend gets that backend's querier (a `prometheus` of its own has
// an address that defaults to env's). It also returns the templates' credentials, to be
// masked in logs. Templates with unknown values are left out: the provider is configured
// again when they are known.
func buildMetricTemplates(ctx context.Context, models map[string]types.Object, env backend.Env) (map[string]metricTemplate, []string, diag.Diagnostics) {
	var diags diag.Diagnostics
	var secrets []string
	templates := make(map[string]metricTemplate, len(models))
	for _, name := range slices.Sorted(maps.Keys(models)) {
		obj := models[name]
		at := path.Root("metric_templates").AtMapKey(name)
		if obj.IsNull() || obj.IsUnknown() {
			continue
		}
		attrs := obj.Attributes()
		query, ok := attrs["query"].(types.String)
		if !ok || query.IsUnknown() {
			continue
		}
		t := metricTemplate{query: query.ValueString()}
		var err error
		if t.variables, err = metrics.VariableKeys(t.query); err != nil {
			diags.AddAttributeError(at.AtName("query"), "Invalid query template", fmt.Sprintf("%s.query: %v.", at, err))
			continue
		}
		set := setBackends(obj)
		if len(set) > 1 {
			diags.AddAttributeError(at, "Several metric backends",
				fmt.Sprintf("%s sets %s: a metric template reads exactly one backend; keep one of them.", at, strings.Join(set, " and ")))
			continue
		}
		if len(set) == 1 {
			kind := set[0]
			b, _ := registry.Get(kind)
			bobj, ok := attrs[kind].(types.Object)
			if !ok || bobj.IsUnknown() {
				continue
			}
			if d := checkTemplateQuery(b, bobj, t.query, at.AtName("query")); d.HasError() {
				diags.Append(d...)
				continue
			}
			q, s, d := b.Build(ctx, bobj, env, at.AtName(kind))
			diags.Append(d...)
			if d.HasError() {
				continue
			}
			secrets = append(secrets, s...)
			t.querier = q
		}
		templates[name] = t
	}
	return templates, secrets, diags
}

// template is the lookupTemplate of the provider's metric_templates.
func (c *clients) template(name string) (metricTemplate, error) {
	if t, ok := c.templates[name]; ok {
		return t, nil
	}
	return metricTemplate{}, fmt.Errorf("metric template %q is not defined: %s", name, definedTemplates(c.templates))
}

// definedTemplates lists the provider's metric_templates, for an error about a missing one.
func definedTemplates(templates map[string]metricTemplate) string {
	if len(templates) == 0 {
		return "the provider defines no metric_templates"
	}
	names := slices.Sorted(maps.Keys(templates))
	for i, n := range names {
		names[i] = fmt.Sprintf("%q", n)
	}
	return "the provider's metric_templates are " + strings.Join(names, ", ")
}

// missingVariables are the keys a template reads that given lacks.
func missingVariables(t metricTemplate, given func(key string) bool) []string {
	var missing []string
	for _, k := range t.variables {
		if !given(k) {
			missing = append(missing, k)
		}
	}
	return missing
}

func missingVariablesText(i int, ref string, missing []string) string {
	return fmt.Sprintf("analysis.metrics[%d].template_variables: metric template %q reads {{ variables.%s }}; set %s in template_variables.",
		i, ref, strings.Join(missing, " }}, {{ variables."), strings.Join(missing, ", "))
}

// applyTemplate fills the i-th metric from its template_ref and template_variables. With a
// nil lookup the template is not resolved: the metric gets its variables but no query, which
// is enough for what never queries Prometheus (read, delete, the plan's preview).
func applyTemplate(i int, mm MetricModel, metric *rollout.Metric, lookup lookupTemplate) error {
	at := fmt.Sprintf("analysis.metrics[%d]", i)
	if err := decodeElements(mm.TemplateVariables, &metric.Variables); err != nil {
		return prefixed(at+".template_variables", err)
	}
	switch {
	case mm.TemplateRef.IsNull() && len(metric.Variables) > 0:
		return fmt.Errorf("%s.template_variables: only a metric with template_ref has variables", at)
	case mm.TemplateRef.IsNull():
		return nil
	case metric.Query != "":
		return fmt.Errorf("%s: set only one of query and template_ref", at)
	case lookup == nil:
		return nil
	}
	ref := mm.TemplateRef.ValueString()
	t, err := lookup(ref)
	if err != nil {
		return fmt.Errorf("%s.template_ref: %w", at, err)
	}
	if missing := missingVariables(t, func(k string) bool { _, ok := metric.Variables[k]; return ok }); len(missing) > 0 {
		return fmt.Errorf("%s", missingVariablesText(i, ref, missing))
	}
	metric.Query = t.query
	if t.querier != nil {
		metric.Querier = forMetric(t.querier, metric.Interval)
	}
	return nil
}

// validateTemplateRefs checks, at plan time, each metric's template_ref against the
// provider's metric_templates and its template_variables against what the template reads.
// Values not known yet are checked at apply, by applyTemplate.
func validateTemplateRefs(ctx context.Context, plan ReleaseModel, lookup lookupTemplate, diags *diag.Diagnostics) {
	var a AnalysisModel
	var metricModels []MetricModel
	if !asKnown(ctx, plan.Analysis, &a) || a.Metrics.IsNull() || a.Metrics.IsUnknown() ||
		a.Metrics.ElementsAs(ctx, &metricModels, false).HasError() {
		return
	}
	for i, m := range metricModels {
		if m.TemplateRef.IsNull() || m.TemplateRef.IsUnknown() {
			continue
		}
		mp := path.Root("analysis").AtName("metrics").AtListIndex(i)
		ref := m.TemplateRef.ValueString()
		t, err := lookup(ref)
		if err != nil {
			diags.AddAttributeError(mp.AtName("template_ref"), "Unknown metric template",
				fmt.Sprintf("analysis.metrics[%d].template_ref: %v.", i, err))
			continue
		}
		var given map[string]types.String
		if m.TemplateVariables.IsUnknown() || m.TemplateVariables.ElementsAs(ctx, &given, false).HasError() {
			continue
		}
		if missing := missingVariables(t, func(k string) bool { _, ok := given[k]; return ok }); len(missing) > 0 {
			diags.AddAttributeError(mp.AtName("template_variables"), "Missing template variables", missingVariablesText(i, ref, missing))
		}
	}
}

// validateMetricTemplateUse checks, without the provider's configuration, how the i-th metric
// uses a template: not together with its own query, and variables only with a template.
func validateMetricTemplateUse(i int, m MetricModel, resp *resource.ValidateConfigResponse) {
	mp := path.Root("analysis").AtName("metrics").AtListIndex(i)
	known := func(v attr.Value) bool { return !v.IsNull() && !v.IsUnknown() }
	switch {
	case known(m.Query) && known(m.TemplateRef):
		resp.Diagnostics.AddAttributeError(mp.AtName("template_ref"), "Conflicting query and template_ref",
			fmt.Sprintf("analysis.metrics[%d]: set only one of query and template_ref: template_ref takes the query of the provider's metric template %q.",
				i, m.TemplateRef.ValueString()))
	case m.TemplateRef.IsNull() && known(m.TemplateVariables):
		resp.Diagnostics.AddAttributeError(mp.AtName("template_variables"), "template_variables needs template_ref",
			fmt.Sprintf("analysis.metrics[%d].template_variables: only a metric template reads variables; set template_ref to one of the provider's metric_templates, "+
				"or write the values into query.", i))
	}
}
