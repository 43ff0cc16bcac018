package provider

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// ReleaseModel is the canary_release resource data.
type ReleaseModel struct {
	ID                      types.String      `tfsdk:"id"`
	Name                    types.String      `tfsdk:"name"`
	Namespace               types.String      `tfsdk:"namespace"`
	MeshProvider            types.String      `tfsdk:"mesh_provider"`
	TargetRef               *TargetRefModel   `tfsdk:"target_ref"`
	Manifest                types.String      `tfsdk:"manifest"`
	RouteRef                *RouteRefModel    `tfsdk:"route_ref"`
	UpstreamRef             *UpstreamRefModel `tfsdk:"upstream_ref"`
	Gloo                    *GlooModel        `tfsdk:"gloo"`
	Service                 *ServiceModel     `tfsdk:"service"`
	Analysis                *AnalysisModel    `tfsdk:"analysis"`
	ProgressDeadlineSeconds types.Int64       `tfsdk:"progress_deadline_seconds"`
	SkipAnalysis            types.Bool        `tfsdk:"skip_analysis"`
	RevertOnDeletion        types.Bool        `tfsdk:"revert_on_deletion"`
	Triggers                types.Map         `tfsdk:"triggers"`
	Timeouts                timeouts.Value    `tfsdk:"timeouts"`
	Status                  types.Object      `tfsdk:"status"`
}

type TargetRefModel struct {
	APIVersion types.String `tfsdk:"api_version"`
	Kind       types.String `tfsdk:"kind"`
	Name       types.String `tfsdk:"name"`
}

type RouteRefModel struct {
	APIVersion types.String `tfsdk:"api_version"`
	Kind       types.String `tfsdk:"kind"`
	Name       types.String `tfsdk:"name"`
}

type UpstreamRefModel struct {
	APIVersion types.String `tfsdk:"api_version"`
	Kind       types.String `tfsdk:"kind"`
	Name       types.String `tfsdk:"name"`
	Namespace  types.String `tfsdk:"namespace"`
}

type GlooModel struct {
	Mode types.String `tfsdk:"mode"`
}

type ServiceModel struct {
	Port       types.Int64  `tfsdk:"port"`
	TargetPort types.String `tfsdk:"target_port"`
	PortName   types.String `tfsdk:"port_name"`
	Hosts      []string     `tfsdk:"hosts"`
}

type AnalysisModel struct {
	Interval            types.String   `tfsdk:"interval"`
	Threshold           types.Int64    `tfsdk:"threshold"`
	MaxWeight           types.Int64    `tfsdk:"max_weight"`
	StepWeight          types.Int64    `tfsdk:"step_weight"`
	StepWeights         []int64        `tfsdk:"step_weights"`
	StepWeightPromotion types.Int64    `tfsdk:"step_weight_promotion"`
	Iterations          types.Int64    `tfsdk:"iterations"`
	MaxQueryErrors      types.Int64    `tfsdk:"max_query_errors"`
	Metrics             []MetricModel  `tfsdk:"metrics"`
	Webhooks            []WebhookModel `tfsdk:"webhooks"`
}

type MetricModel struct {
	Name           types.String `tfsdk:"name"`
	Interval       types.String `tfsdk:"interval"`
	ThresholdRange *RangeModel  `tfsdk:"threshold_range"`
	Query          types.String `tfsdk:"query"`
}

type RangeModel struct {
	Min types.Float64 `tfsdk:"min"`
	Max types.Float64 `tfsdk:"max"`
}

type WebhookModel struct {
	Name     types.String      `tfsdk:"name"`
	Type     types.String      `tfsdk:"type"`
	URL      types.String      `tfsdk:"url"`
	Timeout  types.String      `tfsdk:"timeout"`
	Metadata map[string]string `tfsdk:"metadata"`
}

// parseManifest reads the manifest attribute as a Deployment.
func parseManifest(text, namespace string) (*appsv1.Deployment, error) {
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict([]byte(text), &d); err != nil {
		return nil, fmt.Errorf("manifest is not a valid Deployment in YAML or JSON: %v", err)
	}
	switch {
	case d.APIVersion != "apps/v1" || d.Kind != "Deployment":
		return nil, fmt.Errorf("manifest must be an apps/v1 Deployment, got apiVersion %q and kind %q", d.APIVersion, d.Kind)
	case d.Name == "":
		return nil, fmt.Errorf("manifest must set metadata.name")
	case d.Namespace != "" && d.Namespace != namespace:
		return nil, fmt.Errorf("manifest metadata.namespace %q differs from the release's namespace %q; leave it out or make them equal", d.Namespace, namespace)
	}
	return &d, nil
}

// release converts the model to what the engine needs.
func (m ReleaseModel) release() (rollout.Release, error) {
	rel := rollout.Release{
		Namespace:        m.Namespace.ValueString(),
		Name:             m.Name.ValueString(),
		Provider:         m.MeshProvider.ValueString(),
		ProgressDeadline: time.Duration(m.ProgressDeadlineSeconds.ValueInt64()) * time.Second,
		SkipAnalysis:     m.SkipAnalysis.ValueBool(),
	}
	if rel.ProgressDeadline <= 0 {
		rel.ProgressDeadline = 600 * time.Second
	}
	switch {
	case m.TargetRef != nil:
		rel.Target = m.TargetRef.Name.ValueString()
	case !m.Manifest.IsNull():
		d, err := parseManifest(m.Manifest.ValueString(), rel.Namespace)
		if err != nil {
			return rel, err
		}
		rel.Manifest, rel.Target = d, d.Name
	default:
		return rel, fmt.Errorf("exactly one of target_ref and manifest must be set")
	}
	if m.RouteRef != nil {
		rel.RouteName = m.RouteRef.Name.ValueString()
	}
	if s := m.Service; s != nil {
		rel.Service = rollout.Service{Port: int32(s.Port.ValueInt64()), PortName: s.PortName.ValueString(), Hosts: s.Hosts}
		if tp := s.TargetPort.ValueString(); tp != "" {
			if n, err := strconv.Atoi(tp); err == nil {
				rel.Service.TargetPort = intstr.FromInt(n)
			} else {
				rel.Service.TargetPort = intstr.FromString(tp)
			}
		}
	}
	if a := m.Analysis; a != nil {
		interval, err := time.ParseDuration(a.Interval.ValueString())
		if err != nil {
			return rel, fmt.Errorf("analysis.interval: %v", err)
		}
		rel.Analysis = rollout.Analysis{
			Interval:            interval,
			Threshold:           int(a.Threshold.ValueInt64()),
			MaxWeight:           int(a.MaxWeight.ValueInt64()),
			StepWeight:          int(a.StepWeight.ValueInt64()),
			StepWeightPromotion: int(a.StepWeightPromotion.ValueInt64()),
			Iterations:          int(a.Iterations.ValueInt64()),
			MaxQueryErrors:      int(a.MaxQueryErrors.ValueInt64()),
		}
		for _, w := range a.StepWeights {
			rel.Analysis.StepWeights = append(rel.Analysis.StepWeights, int(w))
		}
		for _, mm := range a.Metrics {
			metric := rollout.Metric{Name: mm.Name.ValueString(), Interval: mm.Interval.ValueString(), Query: mm.Query.ValueString()}
			if tr := mm.ThresholdRange; tr != nil {
				if !tr.Min.IsNull() {
					v := tr.Min.ValueFloat64()
					metric.Min = &v
				}
				if !tr.Max.IsNull() {
					v := tr.Max.ValueFloat64()
					metric.Max = &v
				}
			}
			rel.Analysis.Metrics = append(rel.Analysis.Metrics, metric)
		}
		for _, wh := range a.Webhooks {
			timeout, err := time.ParseDuration(wh.Timeout.ValueString())
			if err != nil {
				timeout = 10 * time.Second
			}
			rel.Analysis.Webhooks = append(rel.Analysis.Webhooks, rollout.Webhook{
				Name: wh.Name.ValueString(), Type: wh.Type.ValueString(), URL: wh.URL.ValueString(),
				Timeout: timeout, Metadata: wh.Metadata,
			})
		}
	}
	return rel, nil
}

// routerSpec adds the router-only references to the engine's view.
func (m ReleaseModel) routerSpec(rel rollout.Release) router.Spec {
	spec := rel.RouterSpec()
	if m.RouteRef != nil {
		spec.RouteRef = &router.Ref{APIVersion: m.RouteRef.APIVersion.ValueString(), Kind: m.RouteRef.Kind.ValueString(), Name: m.RouteRef.Name.ValueString()}
	}
	if m.UpstreamRef != nil {
		spec.UpstreamRef = &router.Ref{APIVersion: m.UpstreamRef.APIVersion.ValueString(), Kind: m.UpstreamRef.Kind.ValueString(),
			Name: m.UpstreamRef.Name.ValueString(), Namespace: m.UpstreamRef.Namespace.ValueString()}
	}
	spec.GlooMode = "route_table"
	if m.Gloo != nil && m.Gloo.Mode.ValueString() != "" {
		spec.GlooMode = m.Gloo.Mode.ValueString()
	}
	return spec
}

// statusValue renders the engine's status as the `status` attribute.
func statusValue(st rollout.Status) types.Object {
	transition := ""
	if !st.LastTransitionTime.IsZero() {
		transition = st.LastTransitionTime.UTC().Format(time.RFC3339)
	}
	return types.ObjectValueMust(statusAttrTypes, map[string]attr.Value{
		"phase":                types.StringValue(string(st.Phase)),
		"canary_weight":        types.Int64Value(int64(st.CanaryWeight)),
		"failed_checks":        types.Int64Value(int64(st.FailedChecks)),
		"iterations":           types.Int64Value(int64(st.Iterations)),
		"last_applied_spec":    types.StringValue(st.LastAppliedSpec),
		"last_promoted_spec":   types.StringValue(st.LastPromotedSpec),
		"last_transition_time": types.StringValue(transition),
		"message":              types.StringValue(st.Message),
	})
}

// statusFrom reads the `status` attribute back; unknown or null gives the zero status.
func statusFrom(ctx context.Context, o types.Object) rollout.Status {
	var m struct {
		Phase              types.String `tfsdk:"phase"`
		CanaryWeight       types.Int64  `tfsdk:"canary_weight"`
		FailedChecks       types.Int64  `tfsdk:"failed_checks"`
		Iterations         types.Int64  `tfsdk:"iterations"`
		LastAppliedSpec    types.String `tfsdk:"last_applied_spec"`
		LastPromotedSpec   types.String `tfsdk:"last_promoted_spec"`
		LastTransitionTime types.String `tfsdk:"last_transition_time"`
		Message            types.String `tfsdk:"message"`
	}
	if o.IsNull() || o.IsUnknown() {
		return rollout.Status{}
	}
	if diags := o.As(ctx, &m, basetypes.ObjectAsOptions{UnhandledNullAsEmpty: true, UnhandledUnknownAsEmpty: true}); diags.HasError() {
		return rollout.Status{}
	}
	t, _ := time.Parse(time.RFC3339, m.LastTransitionTime.ValueString())
	return rollout.Status{
		Phase: rollout.Phase(m.Phase.ValueString()), CanaryWeight: int(m.CanaryWeight.ValueInt64()),
		FailedChecks: int(m.FailedChecks.ValueInt64()), Iterations: int(m.Iterations.ValueInt64()),
		LastAppliedSpec: m.LastAppliedSpec.ValueString(), LastPromotedSpec: m.LastPromotedSpec.ValueString(),
		LastTransitionTime: t, Message: m.Message.ValueString(),
	}
}
