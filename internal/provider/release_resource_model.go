package provider

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/canary-release/terraform-provider-canary/internal/alert"
	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/tfschema"
	"github.com/canary-release/terraform-provider-canary/internal/workload/daemonset"
)

// ReleaseModel is the canary_release resource data. Nested objects and collections are
// framework values, not Go structs and slices, so that any of them may be unknown at plan time
// (a module variable, another resource's output): plan-time code reads them only when known
// (see known.go); apply-time code, where every value is known, decodes them with release().
type ReleaseModel struct {
	ID                      types.String   `tfsdk:"id"`
	Name                    types.String   `tfsdk:"name"`
	Namespace               types.String   `tfsdk:"namespace"`
	MeshProvider            types.String   `tfsdk:"mesh_provider"`
	TargetRef               types.Object   `tfsdk:"target_ref"`
	Manifest                types.String   `tfsdk:"manifest"`
	AutoscalerRef           types.Object   `tfsdk:"autoscaler_ref"`
	Service                 types.Object   `tfsdk:"service"`
	Analysis                types.Object   `tfsdk:"analysis"`
	ProgressDeadlineSeconds types.Int64    `tfsdk:"progress_deadline_seconds"`
	SkipAnalysis            types.Bool     `tfsdk:"skip_analysis"`
	RollbackWindow          types.Object   `tfsdk:"rollback_window"`
	RevertOnDeletion        types.Bool     `tfsdk:"revert_on_deletion"`
	RetryRejected           types.String   `tfsdk:"retry_rejected"`
	IncludeLabelPrefix      types.List     `tfsdk:"include_label_prefix"`
	Triggers                types.Map      `tfsdk:"triggers"`
	Timeouts                timeouts.Value `tfsdk:"timeouts"`
	Status                  types.Object   `tfsdk:"status"`
	RolloutPlan             types.String   `tfsdk:"rollout_plan"`
	LastRun                 types.String   `tfsdk:"last_run"`
	// MeshOptions are the top-level attributes the mesh drivers own, by name
	// (release_resource_options.go); getModel and setModel move them.
	MeshOptions map[string]attr.Value `tfsdk:"-"`
}

type TargetRefModel struct {
	APIVersion types.String `tfsdk:"api_version"`
	Kind       types.String `tfsdk:"kind"`
	Name       types.String `tfsdk:"name"`
}

type AutoscalerRefModel struct {
	APIVersion            types.String `tfsdk:"api_version"`
	Kind                  types.String `tfsdk:"kind"`
	Name                  types.String `tfsdk:"name"`
	PrimaryScalerReplicas types.Object `tfsdk:"primary_scaler_replicas"`
	PrimaryScalerQueries  types.Map    `tfsdk:"primary_scaler_queries"`
}

// RollbackWindowModel is rollback_window (Argo Rollouts' rollbackWindow).
type RollbackWindowModel struct {
	Revisions types.Int64 `tfsdk:"revisions"`
}

type ScalerReplicasModel struct {
	MinReplicas types.Int64 `tfsdk:"min_replicas"`
	MaxReplicas types.Int64 `tfsdk:"max_replicas"`
}

// ServiceModel is the provider's own part of the service block (ReleaseModel.service).
type ServiceModel struct {
	Name          types.String `tfsdk:"name"`
	AppProtocol   types.String `tfsdk:"app_protocol"`
	PortDiscovery types.Bool   `tfsdk:"port_discovery"`
	Apex          types.Object `tfsdk:"apex"`
	Primary       types.Object `tfsdk:"primary"`
	Canary        types.Object `tfsdk:"canary"`
	Port          types.Int64  `tfsdk:"port"`
	TargetPort    types.String `tfsdk:"target_port"`
	PortName      types.String `tfsdk:"port_name"`
	Hosts         types.List   `tfsdk:"hosts"`
	// The service attributes of the mesh drivers are read by their drivers (meshValues).
}

type AnalysisModel struct {
	Interval            types.String `tfsdk:"interval"`
	Threshold           types.Int64  `tfsdk:"threshold"`
	MaxWeight           types.Int64  `tfsdk:"max_weight"`
	StepWeight          types.Int64  `tfsdk:"step_weight"`
	StepWeights         types.List   `tfsdk:"step_weights"`
	StepWeightPromotion types.Int64  `tfsdk:"step_weight_promotion"`
	Iterations          types.Int64  `tfsdk:"iterations"`
	Match               types.List   `tfsdk:"match"`
	Mirror              types.Bool   `tfsdk:"mirror"`
	MirrorWeight        types.Int64  `tfsdk:"mirror_weight"`
	SessionAffinity     types.Object `tfsdk:"session_affinity"`
	MaxQueryErrors      types.Int64  `tfsdk:"max_query_errors"`
	Metrics             types.List   `tfsdk:"metrics"`
	Webhooks            types.List   `tfsdk:"webhooks"`
	GateTimeout         types.String `tfsdk:"gate_timeout"`
	PrimaryReady        types.Int64  `tfsdk:"primary_ready_threshold"`
	CanaryReady         types.Int64  `tfsdk:"canary_ready_threshold"`
	Alerts              types.List   `tfsdk:"alerts"`
}

// SessionAffinityModel is analysis.session_affinity.
type SessionAffinityModel struct {
	CookieName        types.String `tfsdk:"cookie_name"`
	PrimaryCookieName types.String `tfsdk:"primary_cookie_name"`
	MaxAge            types.Int64  `tfsdk:"max_age"`
	Domain            types.String `tfsdk:"domain"`
	Path              types.String `tfsdk:"path"`
	HTTPOnly          types.Bool   `tfsdk:"http_only"`
	Secure            types.Bool   `tfsdk:"secure"`
	Partitioned       types.Bool   `tfsdk:"partitioned"`
	SameSite          types.String `tfsdk:"same_site"`
}

func (s SessionAffinityModel) router() *router.SessionAffinity {
	return &router.SessionAffinity{
		CookieName: s.CookieName.ValueString(), PrimaryCookieName: s.PrimaryCookieName.ValueString(),
		MaxAge: int(s.MaxAge.ValueInt64()), Domain: s.Domain.ValueString(), Path: s.Path.ValueString(), SameSite: s.SameSite.ValueString(),
		HTTPOnly: s.HTTPOnly.ValueBool(), Secure: s.Secure.ValueBool(), Partitioned: s.Partitioned.ValueBool(),
	}
}

type AlertModel struct {
	Name     types.String `tfsdk:"name"`
	Severity types.String `tfsdk:"severity"`
	Provider types.Object `tfsdk:"provider"`
}

type AlertProviderModel struct {
	Type    types.String `tfsdk:"type"`
	Address types.String `tfsdk:"address"`
	// AddressWO is write-only: known in the configuration only (writeOnlyValues).
	AddressWO        types.String `tfsdk:"address_wo"`
	AddressWOVersion types.Int64  `tfsdk:"address_wo_version"`
	Channel          types.String `tfsdk:"channel"`
	Username         types.String `tfsdk:"username"`
	Proxy            types.String `tfsdk:"proxy"`
}

type MetricModel struct {
	Name           types.String `tfsdk:"name"`
	Interval       types.String `tfsdk:"interval"`
	ThresholdRange types.Object `tfsdk:"threshold_range"`
	Query          types.String `tfsdk:"query"`
	// TemplateRef names one of the provider's metric_templates; TemplateVariables fill its
	// {{ variables.key }}.
	TemplateRef       types.String `tfsdk:"template_ref"`
	TemplateVariables types.Map    `tfsdk:"template_variables"`
	// Judge and DryRun: see release_judge.go.
	Judge  types.Object `tfsdk:"judge"`
	DryRun types.Bool   `tfsdk:"dry_run"`
}

type RangeModel struct {
	Min types.Float64 `tfsdk:"min"`
	Max types.Float64 `tfsdk:"max"`
}

type WebhookModel struct {
	Name     types.String `tfsdk:"name"`
	Type     types.String `tfsdk:"type"`
	URL      types.String `tfsdk:"url"`
	Timeout  types.String `tfsdk:"timeout"`
	Metadata types.Map    `tfsdk:"metadata"`
	// URLWO and MetadataWO are write-only: known in the configuration only (writeOnlyValues).
	URLWO             types.String `tfsdk:"url_wo"`
	URLWOVersion      types.Int64  `tfsdk:"url_wo_version"`
	MetadataWO        types.Map    `tfsdk:"metadata_wo"`
	MetadataWOVersion types.Int64  `tfsdk:"metadata_wo_version"`
	Retries           types.Int64  `tfsdk:"retries"`
	DisableTLS        types.Bool   `tfsdk:"disable_tls"`
	MuteAlert         types.Bool   `tfsdk:"mute_alert"`
}

// parseManifest reads the manifest attribute as a Deployment, or as a DaemonSet's
// Deployment-shaped view (daemonset.View, whose Kind stays "DaemonSet").
func parseManifest(text, namespace string) (*appsv1.Deployment, error) {
	d, err := decodeManifest(text)
	if err != nil {
		return nil, err
	}
	switch {
	case d.Name == "":
		return nil, fmt.Errorf("manifest must set metadata.name")
	case d.Namespace != "" && d.Namespace != namespace:
		return nil, fmt.Errorf("manifest metadata.namespace %q differs from the release's namespace %q; leave it out or make them equal", d.Namespace, namespace)
	}
	// The Deployment's name also names the Services <name>, <name>-primary and <name>-canary.
	for _, name := range []string{d.Name, d.Name + "-primary", d.Name + "-canary"} {
		if problems := validation.IsDNS1035Label(name); len(problems) > 0 {
			return nil, fmt.Errorf("manifest metadata.name %q must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter) short enough for the Services %[1]s, %[1]s-primary and %[1]s-canary; %q is not: %s",
				d.Name, name, strings.Join(problems, "; "))
		}
	}
	return d, nil
}

// release converts the model to what the engine needs. Every value must be known: it is
// called at apply time, and at plan time only on a fully known plan. Metric templates are not
// resolved (see applyTemplate): what runs the analysis uses releaseWith.
func (m ReleaseModel) release() (rollout.Release, error) { return m.releaseWith(nil) }

// releaseWith is release with each metric's template_ref resolved by lookup.
func (m ReleaseModel) releaseWith(lookup lookupTemplate) (rollout.Release, error) {
	rel := rollout.Release{
		Namespace:        m.Namespace.ValueString(),
		Name:             m.Name.ValueString(),
		Provider:         m.MeshProvider.ValueString(),
		ProgressDeadline: time.Duration(m.ProgressDeadlineSeconds.ValueInt64()) * time.Second,
		SkipAnalysis:     m.SkipAnalysis.ValueBool(),
		RetryRejected:    m.RetryRejected.ValueString(),
	}
	if rel.ProgressDeadline <= 0 {
		rel.ProgressDeadline = 600 * time.Second
	}
	var window RollbackWindowModel
	if ok, err := decode(m.RollbackWindow, &window); err != nil {
		return rel, prefixed("rollback_window", err)
	} else if ok {
		rel.RollbackWindow = int(window.Revisions.ValueInt64())
	}
	var target TargetRefModel
	switch ok, err := decode(m.TargetRef, &target); {
	case err != nil:
		return rel, fmt.Errorf("target_ref: %w", err)
	case ok:
		rel.Target, rel.TargetKind = target.Name.ValueString(), target.Kind.ValueString()
	case !m.Manifest.IsNull():
		d, err := parseManifest(m.Manifest.ValueString(), rel.Namespace)
		if err != nil {
			return rel, err
		}
		rel.Manifest, rel.Target = d, d.Name
		if d.Kind == daemonset.Kind {
			rel.TargetKind = daemonset.Kind
		}
	default:
		return rel, fmt.Errorf("exactly one of target_ref and manifest must be set")
	}
	options, err := m.routerOptions()
	if err != nil {
		return rel, err
	}
	if named, ok := options.(mesh.RouteNamer); ok {
		rel.RouteName = named.RouteName()
	}
	var scaler AutoscalerRefModel
	if ok, err := decode(m.AutoscalerRef, &scaler); err != nil {
		return rel, prefixed("autoscaler_ref", err)
	} else if ok {
		rel.Autoscaler = &autoscaler.Ref{Name: scaler.Name.ValueString()}
		if err := decodeScalerKind(scaler, rel.Autoscaler); err != nil {
			return rel, err
		}
		var bounds ScalerReplicasModel
		if ok, err := decode(scaler.PrimaryScalerReplicas, &bounds); err != nil {
			return rel, prefixed("autoscaler_ref.primary_scaler_replicas", err)
		} else if ok {
			rel.Autoscaler.PrimaryMinReplicas = int32(bounds.MinReplicas.ValueInt64())
			rel.Autoscaler.PrimaryMaxReplicas = int32(bounds.MaxReplicas.ValueInt64())
		}
	}
	if err := m.decodeService(&rel); err != nil {
		return rel, err
	}
	rel.Service.SelectorRouted = registry.Capabilities(rel.Provider).SelectorOnly
	return rel, m.decodeAnalysis(&rel, lookup, options)
}

func (m ReleaseModel) decodeService(rel *rollout.Release) error {
	s, ok, err := m.service()
	if err != nil || !ok {
		return prefixed("service", err)
	}
	rel.Service = rollout.Service{Name: s.Name.ValueString(), AppProtocol: s.AppProtocol.ValueString(), PortDiscovery: s.PortDiscovery.ValueBool(),
		Port: int32(s.Port.ValueInt64()), PortName: s.PortName.ValueString()}
	for attr, at := range map[string]struct {
		from types.Object
		to   *rollout.ServiceMetadata
	}{"apex": {s.Apex, &rel.Service.Apex}, "primary": {s.Primary, &rel.Service.Primary}, "canary": {s.Canary, &rel.Service.Canary}} {
		var meta ServiceMetadataModel
		if ok, err := decode(at.from, &meta); err != nil {
			return prefixed("service."+attr, err)
		} else if ok {
			if err := decodeElements(meta.Labels, &at.to.Labels); err != nil {
				return prefixed("service."+attr+".labels", err)
			}
			if err := decodeElements(meta.Annotations, &at.to.Annotations); err != nil {
				return prefixed("service."+attr+".annotations", err)
			}
		}
	}
	if err := decodeElements(s.Hosts, &rel.Service.Hosts); err != nil {
		return prefixed("service.hosts", err)
	}
	if tp := s.TargetPort.ValueString(); tp != "" {
		if n, err := strconv.Atoi(tp); err == nil {
			rel.Service.TargetPort = intstr.FromInt(n)
		} else {
			rel.Service.TargetPort = intstr.FromString(tp)
		}
	}
	return nil
}

// decodeAnalysis reads analysis; options are the router's, whose built-in queries may
// replace the mesh_provider's.
func (m ReleaseModel) decodeAnalysis(rel *rollout.Release, lookup lookupTemplate, options any) error {
	var a AnalysisModel
	ok, err := decode(m.Analysis, &a)
	if err != nil || !ok {
		return prefixed("analysis", err)
	}
	interval, err := time.ParseDuration(a.Interval.ValueString())
	if err != nil {
		return fmt.Errorf("analysis.interval: %v", err)
	}
	rel.Analysis = rollout.Analysis{
		Interval:              interval,
		Threshold:             int(a.Threshold.ValueInt64()),
		MaxWeight:             int(a.MaxWeight.ValueInt64()),
		StepWeight:            int(a.StepWeight.ValueInt64()),
		StepWeightPromotion:   int(a.StepWeightPromotion.ValueInt64()),
		Iterations:            int(a.Iterations.ValueInt64()),
		Mirror:                a.Mirror.ValueBool(),
		MirrorWeight:          int(a.MirrorWeight.ValueInt64()),
		MaxQueryErrors:        int(a.MaxQueryErrors.ValueInt64()),
		PrimaryReadyThreshold: int(a.PrimaryReady.ValueInt64()),
		CanaryReadyThreshold:  int(a.CanaryReady.ValueInt64()),
	}
	var sa SessionAffinityModel
	if ok, err := decode(a.SessionAffinity, &sa); err != nil {
		return prefixed("analysis.session_affinity", err)
	} else if ok {
		rel.Analysis.SessionAffinity = sa.router()
	}
	var steps []int64
	if err := decodeElements(a.StepWeights, &steps); err != nil {
		return prefixed("analysis.step_weights", err)
	}
	for _, w := range steps {
		rel.Analysis.StepWeights = append(rel.Analysis.StepWeights, int(w))
	}
	var metricModels []MetricModel
	if err := decodeElements(a.Metrics, &metricModels); err != nil {
		return prefixed("analysis.metrics", err)
	}
	for i, mm := range metricModels {
		metric := rollout.Metric{Name: mm.Name.ValueString(), Interval: mm.Interval.ValueString(), Query: mm.Query.ValueString()}
		if err := applyTemplate(i, mm, &metric, lookup); err != nil {
			return err
		}
		applyOptionQueries(options, &metric)
		if err := applyJudge(mm, &metric); err != nil {
			return prefixed("analysis.metrics.judge", err)
		}
		var tr RangeModel
		if ok, err := decode(mm.ThresholdRange, &tr); err != nil {
			return prefixed("analysis.metrics.threshold_range", err)
		} else if ok {
			metric.Min, metric.Max = tr.Min.ValueFloat64Pointer(), tr.Max.ValueFloat64Pointer()
		}
		rel.Analysis.Metrics = append(rel.Analysis.Metrics, metric)
	}
	var hooks []WebhookModel
	if err := decodeElements(a.Webhooks, &hooks); err != nil {
		return prefixed("analysis.webhooks", err)
	}
	for _, wh := range hooks {
		timeout, err := time.ParseDuration(wh.Timeout.ValueString())
		if err != nil {
			timeout = 10 * time.Second
		}
		var metadata map[string]string
		if err := decodeElements(wh.Metadata, &metadata); err != nil {
			return prefixed("analysis.webhooks.metadata", err)
		}
		rel.Analysis.Webhooks = append(rel.Analysis.Webhooks, rollout.Webhook{
			Name: wh.Name.ValueString(), Type: wh.Type.ValueString(), URL: wh.URL.ValueString(),
			Timeout: timeout, Metadata: metadata, Retries: int(wh.Retries.ValueInt64()),
			DisableTLS: wh.DisableTLS.ValueBool(), MuteAlert: wh.MuteAlert.ValueBool(),
		})
	}
	var matches []MatchModel
	if err := decodeElements(a.Match, &matches); err != nil {
		return prefixed("analysis.match", err)
	}
	for _, mm := range matches {
		match := router.Match{}
		if match.Headers, err = stringMatches(mm.Headers); err != nil {
			return prefixed("analysis.match.headers", err)
		}
		if match.QueryParams, err = stringMatches(mm.QueryParams); err != nil {
			return prefixed("analysis.match.query_params", err)
		}
		rel.Analysis.Match = append(rel.Analysis.Match, match)
	}
	var alerts []AlertModel
	if err := decodeElements(a.Alerts, &alerts); err != nil {
		return prefixed("analysis.alerts", err)
	}
	for _, am := range alerts {
		var p AlertProviderModel
		if _, err := decode(am.Provider, &p); err != nil {
			return prefixed("analysis.alerts.provider", err)
		}
		rel.Analysis.Alerts = append(rel.Analysis.Alerts, alert.Alert{Name: am.Name.ValueString(), Severity: am.Severity.ValueString(),
			Provider: alert.Provider{Type: p.Type.ValueString(), Address: p.Address.ValueString(), Channel: p.Channel.ValueString(),
				Username: p.Username.ValueString(), Proxy: p.Proxy.ValueString()}})
	}
	if !a.GateTimeout.IsNull() {
		if rel.Analysis.GateTimeout, err = time.ParseDuration(a.GateTimeout.ValueString()); err != nil {
			return fmt.Errorf("analysis.gate_timeout: %v", err)
		}
	}
	return nil
}

// routerSpec adds the driver's options to the engine's view.
func (m ReleaseModel) routerSpec(rel rollout.Release) router.Spec {
	spec := rel.RouterSpec()
	// Only type mismatches can fail here, and the schema rules them out.
	spec.Options, _ = m.routerOptions()
	return spec
}

// applyOptionQueries resolves a built-in metric to the query the router's options choose
// (a gateway_api.metrics source, say), the way applyTemplate resolves a template_ref; the
// engine's own lookup by mesh_provider gives the driver's default queries.
func applyOptionQueries(options any, metric *rollout.Metric) {
	source, ok := options.(mesh.QuerySource)
	if !ok || metric.Query != "" {
		return
	}
	if q, ok := source.Queries()[metric.Name]; ok {
		metric.Query = q
	}
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

type MatchModel struct {
	Headers     types.Map `tfsdk:"headers"`
	QueryParams types.Map `tfsdk:"query_params"`
}

// stringMatches decodes a map of string matches.
var stringMatches = tfschema.StringMatches

type ServiceMetadataModel struct {
	Labels      types.Map `tfsdk:"labels"`
	Annotations types.Map `tfsdk:"annotations"`
}
