package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/float64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/judge"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// JudgeModel is a metric's judge: the canary against the primary.
type JudgeModel struct {
	Method     types.String  `tfsdk:"method"`
	Direction  types.String  `tfsdk:"direction"`
	MaxRatio   types.Float64 `tfsdk:"max_ratio"`
	Confidence types.Float64 `tfsdk:"confidence"`
	Samples    types.Int64   `tfsdk:"samples"`
}

func quoted(values []string) string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = "`" + v + "`"
	}
	return strings.Join(out, ", ")
}

func metricJudgeAttribute() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "Judges the canary against the primary rather than against a fixed range alone: the metric's query (its own, its template's " +
			"or the built-in one) is rendered and run once per side, `{{ target }}` being each side's workload (`<target>` for the canary, " +
			"`<target>-primary` for the primary) and `{{ side }}` `canary` or `primary`. With `judge`, `threshold_range` is optional; when set, it " +
			"also bounds the canary's value. A query that renders the same for both sides is a plan error.",
		Attributes: map[string]schema.Attribute{
			"method": schema.StringAttribute{Required: true,
				MarkdownDescription: "`ratio`: one value per side over `interval`; the check fails when canary / primary goes past `max_ratio` in the " +
					"harmful direction. `mann-whitney`: `samples` values per side from a range query over `interval`, with `{{ interval }}` " +
					"rendered as the sample step (`interval` / `samples`) so that samples do not overlap; the check fails only when a one-sided " +
					"Mann-Whitney U test finds the canary's samples shifted the harmful way at `confidence` **and** the ratio of the medians " +
					"goes past `max_ratio`. Fewer than 5 samples on a side is inconclusive: the step is held and it counts against " +
					"`analysis.max_query_errors` like a query error. Only a backend that returns samples (Prometheus) takes `mann-whitney`.",
				Validators: []validator.String{stringvalidator.OneOf(judge.Methods...)}},
			"direction": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(judge.DefaultDirection),
				MarkdownDescription: "The harmful change: " + quoted(judge.Directions) + " (two-sided). Default `increase` (latency); " +
					"use `decrease` for a success rate.",
				Validators: []validator.String{stringvalidator.OneOf(judge.Directions...)}},
			// No schema default for the two ratios: a float default such as 0.95 comes back from
			// Terraform inexact, and every plan would then show a change. Null means the default.
			"max_ratio": schema.Float64Attribute{Optional: true,
				MarkdownDescription: "Largest accepted canary / primary (or smallest accepted 1 / `max_ratio`, for `decrease`). At least 1. Default 1.2.",
				Validators:          []validator.Float64{float64validator.AtLeast(1)}},
			"confidence": schema.Float64Attribute{Optional: true,
				MarkdownDescription: "Level of the `mann-whitney` test, from 0.5 to 0.999. Default 0.95.",
				Validators:          []validator.Float64{float64validator.Between(0.5, 0.999)}},
			"samples": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(rollout.DefaultJudgeSamples),
				MarkdownDescription: fmt.Sprintf("Samples per side of `mann-whitney`, from %d to 100. Default %d. The sample step (`interval` / `samples`, "+
					"at least 1s) must span two scrapes of Prometheus, or `rate()` reads nothing.", judge.MinSamples, rollout.DefaultJudgeSamples),
				Validators: []validator.Int64{int64validator.Between(judge.MinSamples, 100)}},
		},
	}
}

func metricDryRunAttribute() schema.BoolAttribute {
	return schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
		MarkdownDescription: "Evaluate and report the metric (step lines, a `DryRun` warning Event and a `warn` alert when it would fail) " +
			"but never fail the analysis with it, nor count its query errors: a way to trial a new check. Default `false`."}
}

// applyJudge fills the engine's judge and dry run of one metric.
func applyJudge(mm MetricModel, metric *rollout.Metric) error {
	metric.DryRun = mm.DryRun.ValueBool()
	var jm JudgeModel
	ok, err := decode(mm.Judge, &jm)
	if err != nil || !ok {
		return err
	}
	metric.Judge = &rollout.MetricJudge{
		Config: judge.Config{Method: jm.Method.ValueString(), Direction: jm.Direction.ValueString(),
			MaxRatio: jm.MaxRatio.ValueFloat64(), Confidence: jm.Confidence.ValueFloat64()},
		Samples: int(jm.Samples.ValueInt64()),
	}
	return nil
}

// validateJudge checks, without the provider's configuration, the i-th metric's judge: the
// query it names must tell the two sides apart. A metric without a judge needs threshold_range
// (said by the caller).
func validateJudge(ctx context.Context, i int, m MetricModel, provider string, providerKnown bool, resp *resource.ValidateConfigResponse) {
	var jm JudgeModel
	if !asKnown(ctx, m.Judge, &jm) {
		return
	}
	query := m.Query.ValueString()
	switch {
	case m.Query.IsUnknown() || !m.TemplateRef.IsNull():
		return // a template's query is checked with the provider's configuration
	case m.Query.IsNull() && providerKnown && !m.Name.IsUnknown():
		builtin, ok := registry.Builtin(provider, m.Name.ValueString())
		if !ok {
			return
		}
		query = builtin
	case m.Query.IsNull():
		return
	}
	if msg := sameForBothSides(query); msg != "" {
		resp.Diagnostics.AddAttributeError(path.Root("analysis").AtName("metrics").AtListIndex(i).AtName("judge"), "Judge cannot tell the sides apart",
			fmt.Sprintf("analysis.metrics[%d].judge: %s", i, msg))
	}
}

// sameForBothSides says why a query cannot be judged per side, or "".
func sameForBothSides(query string) string {
	vars := metrics.Vars{Name: "name", Namespace: "namespace", Target: "target", Service: "service", Ingress: "ingress", Route: "route", Interval: "1m"}
	canary, err1 := metrics.Render(query, vars.ForSide(metrics.SideCanary))
	primary, err2 := metrics.Render(query, vars.ForSide(metrics.SidePrimary))
	if err1 != nil || err2 != nil || canary != primary {
		return ""
	}
	return "the metric's query renders the same for the canary and the primary, so it cannot compare them. A judged query must name " +
		"each side's series with {{ target }} (the side's workload: <target> or <target>-primary) or {{ side }} (canary or primary); " +
		"give the metric a query that does, or drop judge"
}

// validateJudgeBackends checks, at plan time, that a mann-whitney judge reads a backend that
// returns samples: the provider's Prometheus, or a template's backend that implements
// metrics.SampleQuerier.
func validateJudgeBackends(ctx context.Context, plan ReleaseModel, lookup lookupTemplate, diags *diag.Diagnostics) {
	var a AnalysisModel
	var metricModels []MetricModel
	if !asKnown(ctx, plan.Analysis, &a) || a.Metrics.IsNull() || a.Metrics.IsUnknown() ||
		a.Metrics.ElementsAs(ctx, &metricModels, false).HasError() {
		return
	}
	for i, m := range metricModels {
		var jm JudgeModel
		if m.TemplateRef.IsNull() || m.TemplateRef.IsUnknown() || !asKnown(ctx, m.Judge, &jm) || jm.Method.ValueString() != judge.MethodMannWhitney {
			continue
		}
		t, err := lookup(m.TemplateRef.ValueString())
		if err != nil {
			continue // validateTemplateRefs says so
		}
		mp := path.Root("analysis").AtName("metrics").AtListIndex(i)
		if t.querier != nil && !metrics.CanSample(t.querier) {
			diags.AddAttributeError(mp.AtName("judge").AtName("method"), "Backend without samples",
				fmt.Sprintf("analysis.metrics[%d].judge.method: metric template %q reads a backend that cannot return samples, so it allows %q only, not %q.",
					i, m.TemplateRef.ValueString(), judge.MethodRatio, judge.MethodMannWhitney))
		}
		if msg := sameForBothSides(t.query); msg != "" {
			diags.AddAttributeError(mp.AtName("judge"), "Judge cannot tell the sides apart",
				fmt.Sprintf("analysis.metrics[%d].judge: metric template %q: %s", i, m.TemplateRef.ValueString(), msg))
		}
	}
}
