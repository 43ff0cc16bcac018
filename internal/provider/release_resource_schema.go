package provider

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/objectvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/alert"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/tfschema"
)

// statusAttrTypes is the shape of the computed `status` object.
var statusAttrTypes = map[string]attr.Type{
	"phase":                types.StringType,
	"canary_weight":        types.Int64Type,
	"failed_checks":        types.Int64Type,
	"iterations":           types.Int64Type,
	"last_applied_spec":    types.StringType,
	"last_promoted_spec":   types.StringType,
	"last_transition_time": types.StringType,
	"message":              types.StringType,
}

func (r *ReleaseResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	requiresReplace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		MarkdownDescription: "A progressive delivery of one workload (" + workloadKindsText() + "), as a Flagger `Canary` would run it, inside `terraform apply`. " +
			"Create initialises (a `-primary` copy, three Services and the router object); no analysis runs. " +
			"An update whose pod template differs from the last promoted one shifts traffic step by step, checks " +
			"Prometheus and webhooks at every step, and promotes, or rolls back and fails the apply.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`namespace/name`.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Name of the release. It names the state ConfigMap `<name>-canary-release`. Changing it forces a new release.",
				PlanModifiers:       requiresReplace,
				Validators: []validator.String{stringvalidator.LengthBetween(1, 63), objectNameValidator{suffixes: []string{"-canary-release", "-canary-release-lock"},
					what: "the state ConfigMap `<name>-canary-release` and the Lease `<name>-canary-release-lock`"}},
			},
			"namespace": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString("default"),
				MarkdownDescription: "Namespace of the target and of every generated object. Default `default`. Changing it forces a new release.",
				PlanModifiers:       requiresReplace,
				Validators:          []validator.String{dnsLabelValidator{}},
			},
			"mesh_provider": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: meshProviderDescription(),
				PlanModifiers:       requiresReplace,
				Validators:          []validator.String{stringvalidator.OneOf(registry.Names()...)},
			},
			"target_ref": schema.SingleNestedAttribute{
				Optional: true,
				MarkdownDescription: "A Deployment managed elsewhere (the kubernetes provider, helm, kubectl), as in Flagger. " +
					"Pair it with `triggers` so that a change made earlier in the same apply is released. Exactly one of `target_ref` and `manifest`.",
				Attributes: map[string]schema.Attribute{
					"api_version": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(deploymentAPIVersion),
						MarkdownDescription: "API version of the target: " + codeList(targetAPIVersions()) + ". A kind other than a Deployment needs the `mesh_provider` that owns it.",
						Validators:          []validator.String{stringvalidator.OneOf(targetAPIVersions()...)}},
					"kind": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(deploymentKind),
						MarkdownDescription: "Kind of the target: " + codeList(targetKinds()) + ". A `StatefulSet` is released in place by its `RollingUpdate` partition with `mesh_provider = \"kubernetes\"` (see the Workloads guide); a `DaemonSet` is released like a Deployment, through a `-primary` DaemonSet, its canary emptied by a node selector that matches no node; a kind other than these needs the `mesh_provider` that owns it.",
						Validators:          []validator.String{stringvalidator.OneOf(targetKinds()...)}},
					"name": schema.StringAttribute{Required: true, MarkdownDescription: "Name of the target.",
						Validators: []validator.String{objectNameValidator{suffixes: []string{"-primary", "-canary"}, label: true,
							what: "the Services `<name>`, `<name>-primary` and `<name>-canary`"}}},
				},
				Validators: []validator.Object{objectvalidator.ExactlyOneOf(path.MatchRoot("target_ref"), path.MatchRoot("manifest"))},
			},
			"manifest": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The Deployment (or DaemonSet) itself, as YAML or JSON (for example `yamlencode({...})`). The release owns it and " +
					"server-side-applies it; a change to it is the rollout, and the plan shows the diff. Its `replicas` become the " +
					"primary's; the release owns the Deployment's own replicas. Destroy deletes it.",
			},
			"autoscaler_ref": schema.SingleNestedAttribute{
				Optional: true,
				MarkdownDescription: "The target's HorizontalPodAutoscaler or KEDA ScaledObject (Flagger's `autoscalerRef`). The primary gets a `<name>-primary` copy that scales it, " +
					"kept in sync with the target's on every apply (a change to it shows in the plan), and the canary is analysed at the autoscaler's `minReplicas` " +
					"(a ScaledObject's `minReplicaCount`). Before traffic returns to the primary (promotion, rollback), the copy's minimum is held at the primary's " +
					"pre-rollout replicas until they are Ready, and put back afterwards. A ScaledObject of the target is paused at the target's replicas with KEDA's " +
					"`autoscaling.keda.sh/paused-replicas` while the release holds it; destroy removes the pause.",
				Attributes: map[string]schema.Attribute{
					"api_version": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("autoscaling/v2"),
						MarkdownDescription: "API version of the autoscaler: `autoscaling/v2`, or `keda.sh/v1alpha1` with `kind = \"ScaledObject\"`.",
						Validators:          []validator.String{stringvalidator.OneOf("autoscaling/v2", "keda.sh/v1alpha1")}},
					"kind": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("HorizontalPodAutoscaler"),
						MarkdownDescription: "Kind of the autoscaler: `HorizontalPodAutoscaler` or `ScaledObject` (KEDA, with `api_version = \"keda.sh/v1alpha1\"`).",
						Validators:          []validator.String{stringvalidator.OneOf("HorizontalPodAutoscaler", "ScaledObject")}},
					"primary_scaler_queries": schema.MapAttribute{Optional: true, ElementType: types.StringType,
						MarkdownDescription: "With a ScaledObject: the queries of the primary's copy, by trigger name (Flagger's `primaryScalerQueries`). " +
							"Without them, each trigger's `query` is the target's with the target's name replaced by the primary's."},
					"name": schema.StringAttribute{Required: true, MarkdownDescription: "Name of the HorizontalPodAutoscaler or ScaledObject; it must scale the target Deployment.",
						Validators: []validator.String{objectNameValidator{suffixes: []string{"-primary"}, what: "the primary's copy `<name>-primary`"}}},
					"primary_scaler_replicas": schema.SingleNestedAttribute{Optional: true,
						MarkdownDescription: "Bounds of the primary's copy, instead of the target autoscaler's (Flagger's `primaryScalerReplicas`).",
						Attributes: map[string]schema.Attribute{
							"min_replicas": schema.Int64Attribute{Optional: true, MarkdownDescription: "Lowest replica count of the primary.",
								Validators: []validator.Int64{int64validator.AtLeast(1)}},
							"max_replicas": schema.Int64Attribute{Optional: true, MarkdownDescription: "Highest replica count of the primary.",
								Validators: []validator.Int64{int64validator.AtLeast(1)}},
						}},
				},
			},
			"service": schema.SingleNestedAttribute{
				Required: true,
				MarkdownDescription: "The generated Services: `<target>` (the apex, selecting the primary), `<target>-primary` and " +
					"`<target>-canary`.",
				Attributes: map[string]schema.Attribute{
					"port": schema.Int64Attribute{Required: true, MarkdownDescription: "ClusterIP port of the Services.",
						Validators: []validator.Int64{int64validator.Between(1, 65535)}},
					"target_port": schema.StringAttribute{Optional: true,
						MarkdownDescription: "Container port, as a number (`\"8080\"`) or a port name (`\"http\"`). Default: `port`.",
						Validators:          []validator.String{targetPortValidator{}}},
					"name": schema.StringAttribute{Optional: true,
						MarkdownDescription: "Name of the apex Service, when it differs from the target's (Flagger's `service.name`); `<name>-primary` and `<name>-canary` follow it, and so do the router objects. Default: the target's name. It cannot change in place.",
						Validators: []validator.String{objectNameValidator{suffixes: []string{"-primary", "-canary"}, label: true,
							what: "the Services `<name>`, `<name>-primary` and `<name>-canary`"}}},
					"app_protocol": schema.StringAttribute{Optional: true,
						MarkdownDescription: "`appProtocol` of the Services' port, e.g. `http`, `kubernetes.io/h2c` or `kubernetes.io/ws` (Flagger's `appProtocol`)."},
					"port_discovery": schema.BoolAttribute{Optional: true,
						MarkdownDescription: "Expose the target's other TCP container ports on the three Services too (Flagger's `portDiscovery`); the router splits `port` only. Default false."},
					"apex":    serviceMetadata("The apex Service `<name>`."),
					"primary": serviceMetadata("The Service `<name>-primary`."),
					"canary":  serviceMetadata("The Service `<name>-canary`."),
					"port_name": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("http"),
						MarkdownDescription: "Name of the Service port. Default `http`; use `grpc` for gRPC.",
						Validators:          []validator.String{dnsLabelValidator{}}},
					"hosts": schema.ListAttribute{Optional: true, ElementType: types.StringType,
						MarkdownDescription: hostsDescription()},
				},
			},
			"analysis": schema.SingleNestedAttribute{
				Required:            true,
				MarkdownDescription: "How the canary is judged (Flagger's `analysis`). Exactly one of `step_weight` and `step_weights`.",
				Attributes: map[string]schema.Attribute{
					"interval": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("1m"),
						MarkdownDescription: "Time between two checks, a Go duration such as `30s` or `1m30s`. At least `1s`. Default `1m`.",
						Validators:          []validator.String{durationValidator{Minimum: time.Second}}},
					"threshold": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(1),
						MarkdownDescription: "Failed checks, counted over the whole run as in Flagger, that roll the release back. Default 1.",
						Validators:          []validator.Int64{int64validator.AtLeast(1)}},
					"max_weight": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(100),
						MarkdownDescription: "Highest canary weight, in percent (1 to 100), reached with `step_weight`. Required with `step_weight`: Terraform silently drops misspelled keys inside an object, so a camelCase `maxWeight` must not leave a default in its place. Unused otherwise.",
						Validators:          []validator.Int64{int64validator.Between(1, 100)}},
					"step_weight": schema.Int64Attribute{Optional: true,
						MarkdownDescription: "Canary weight added at every step, in percent: `step_weight`, 2×`step_weight`, … up to `max_weight`.",
						Validators:          []validator.Int64{int64validator.Between(1, 100)}},
					"step_weights": schema.ListAttribute{Optional: true, ElementType: types.Int64Type,
						MarkdownDescription: "Explicit canary weights, in percent and ascending, e.g. `[1, 5, 10, 50]`.",
						Validators:          []validator.List{listvalidator.SizeAtLeast(1), listvalidator.ValueInt64sAre(int64validator.Between(1, 100))}},
					"step_weight_promotion": schema.Int64Attribute{Optional: true,
						MarkdownDescription: "After promotion, move traffic back to the primary this many percent per interval. Unset: in one step.",
						Validators:          []validator.Int64{int64validator.Between(1, 100)}},
					"max_query_errors": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(3),
						MarkdownDescription: "Consecutive query errors of one metric (Prometheus unreachable or refusing the query, a query that fails to render or returns several series) " +
							"that end the run with \"metrics unavailable\" and roll it back. A query error holds the step without counting a failed check. " +
							"An empty result, NaN or ±Inf stays a failed check, as in Flagger. Default 3.",
						Validators: []validator.Int64{int64validator.AtLeast(1)}},
					"alerts": schema.ListNestedAttribute{
						Optional: true,
						MarkdownDescription: "Chat alerts, as Flagger's `alerts` with their `AlertProvider`s inline. They hear of the initialisation, a new revision, a gate that holds, " +
							"the success and every failure, deadline failures included (Flagger sends none for those). A delivery that fails is a warning; it never changes the verdict.",
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"name": schema.StringAttribute{Required: true, MarkdownDescription: "Name of the alert, used in warnings."},
							"severity": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("info"),
								MarkdownDescription: "`info` (everything), `warn` (warnings and errors) or `error` (failures only). Default `info`.",
								Validators:          []validator.String{stringvalidator.OneOf(alert.Severities...)}},
							"provider": schema.SingleNestedAttribute{Required: true,
								MarkdownDescription: "Where the alert goes (Flagger's `AlertProvider` spec).",
								Attributes: map[string]schema.Attribute{
									"type": schema.StringAttribute{Required: true,
										MarkdownDescription: "`slack`, `msteams`, `discord`, `rocket`, `gchat` (the services' own payloads, as Flagger sends them) or `generic` (Flagger's event webhook payload as JSON).",
										Validators:          []validator.String{stringvalidator.OneOf(alert.Types...)}},
									"address": schema.StringAttribute{Optional: true, Sensitive: true,
										MarkdownDescription: "The service's incoming-webhook URL. Sensitive: it carries a token; it never reaches logs, status or the state ConfigMap, " +
											"but it is in the Terraform state: with Terraform 1.11 or later, `address_wo` keeps it out. Set one of the two.",
										Validators: []validator.String{webhookURLValidator{},
											stringvalidator.ConflictsWith(path.MatchRelative().AtParent().AtName("address_wo"))}},
									"address_wo": schema.StringAttribute{Optional: true, WriteOnly: true,
										MarkdownDescription: "`address`, write-only (Terraform 1.11 or later): never stored in the Terraform state. A change of it alone plans " +
											"nothing: change `address_wo_version` with it. A destroy has no configuration, so it sends this alert nothing.",
										Validators: []validator.String{webhookURLValidator{}}},
									"address_wo_version": schema.Int64Attribute{Optional: true,
										MarkdownDescription: "Any number: a change of it plans an update that sends the current `address_wo` to the engine.",
										Validators:          []validator.Int64{int64validator.AlsoRequires(path.MatchRelative().AtParent().AtName("address_wo"))}},
									"channel":  schema.StringAttribute{Optional: true, MarkdownDescription: "Channel (Slack, Discord, Rocket). Default: the webhook's own."},
									"username": schema.StringAttribute{Optional: true, MarkdownDescription: "Sender name (Slack, Discord, Rocket). Default `flagger`, as in Flagger."},
									"proxy": schema.StringAttribute{Optional: true, Sensitive: true,
										MarkdownDescription: "HTTP(S) proxy URL for this provider. Sensitive: it may carry a password.",
										Validators:          []validator.String{webhookURLValidator{}}},
								},
							},
						}},
					},
					"primary_ready_threshold": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(100),
						MarkdownDescription: "Percent of the primary's updated replicas that must be available for it to count as ready (Flagger's `primaryReadyThreshold`); at least one always must. Default 100.",
						Validators:          []validator.Int64{int64validator.Between(1, 100)}},
					"canary_ready_threshold": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(100),
						MarkdownDescription: "Percent of the canary's updated replicas that must be available before it gets traffic (Flagger's `canaryReadyThreshold`); at least one always must. Default 100.",
						Validators:          []validator.Int64{int64validator.Between(1, 100)}},
					"gate_timeout": schema.StringAttribute{Optional: true,
						MarkdownDescription: "How long a closed gate (`confirm-rollout`, `confirm-traffic-increase`, `confirm-promotion` webhook) may hold the run, a Go duration such as `30m`; " +
							"then the release rolls back, naming the gate. Unset: only `timeouts.update` bounds it (Flagger's gates never time out).",
						Validators: []validator.String{durationValidator{Minimum: time.Second}}},
					"match": schema.ListNestedAttribute{Optional: true,
						MarkdownDescription: "A/B testing (Flagger's `match`), with `iterations`: the router sends the requests that match any entry to the canary for every iteration, " +
							"with the weights at 100/0. An entry matches when all of its `headers` and `query_params` do. With " + offeringText(matches, "and") + ".",
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"headers":      tfschema.StringMatchMap("Request headers, by name, e.g. `{ \"x-canary\" = { exact = \"insider\" } }`."),
							"query_params": tfschema.StringMatchMap("Query parameters, by name."),
						}},
					},
					"mirror": schema.BoolAttribute{Optional: true,
						MarkdownDescription: "Mirror requests to the canary (Flagger's `mirror`), with `mesh_provider` " + offeringText(mirrors, "or") + ": the canary answers copies of user requests, " +
							"and its answers are dropped. A weighted canary spends its first interval mirrored at weight 0; blue/green mirrors during every iteration. Not with A/B testing."},
					"mirror_weight": schema.Int64Attribute{Optional: true,
						MarkdownDescription: "Percent of requests mirrored (Flagger's `mirrorWeight`), 1 to 100; unset mirrors all of them. Needs `mirror = true`.",
						Validators:          []validator.Int64{int64validator.Between(1, 100)}},
					"session_affinity": schema.SingleNestedAttribute{Optional: true,
						MarkdownDescription: "Keep each client on the side that answered it while the canary has weight (Flagger's `sessionAffinity`), " +
							"with `mesh_provider` " + offeringText(keepsSessions, "or") + " and a weighted canary. The canary's answers set the cookie `cookie_name`, and requests carrying it go to the canary; " +
							"with `primary_cookie_name`, the primary's do the same for the primary. Each revision gets new cookie values.",
						Attributes: map[string]schema.Attribute{
							"cookie_name": schema.StringAttribute{Required: true,
								MarkdownDescription: "Name of the cookie that sends a client to the canary.",
								Validators:          []validator.String{cookieNameValidator()}},
							"primary_cookie_name": schema.StringAttribute{Optional: true,
								MarkdownDescription: "Name of the cookie that keeps a client on the primary; it must differ from `cookie_name`.",
								Validators:          []validator.String{cookieNameValidator()}},
							"max_age": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(86400),
								MarkdownDescription: "The cookies' `Max-Age`, in seconds. Default 86400.",
								Validators:          []validator.Int64{int64validator.AtLeast(1)}},
							"domain":      schema.StringAttribute{Optional: true, MarkdownDescription: "The cookies' `Domain` attribute."},
							"path":        schema.StringAttribute{Optional: true, MarkdownDescription: "The cookies' `Path` attribute."},
							"http_only":   schema.BoolAttribute{Optional: true, MarkdownDescription: "Sets the cookies' `HttpOnly` attribute."},
							"secure":      schema.BoolAttribute{Optional: true, MarkdownDescription: "Sets the cookies' `Secure` attribute."},
							"partitioned": schema.BoolAttribute{Optional: true, MarkdownDescription: "Sets the cookies' `Partitioned` attribute."},
							"same_site": schema.StringAttribute{Optional: true,
								MarkdownDescription: "The cookies' `SameSite` attribute: `Strict`, `Lax` or `None`.",
								Validators:          []validator.String{stringvalidator.OneOf("Strict", "Lax", "None")}},
						}},
					"iterations": schema.Int64Attribute{Optional: true,
						MarkdownDescription: "Number of analysis intervals of an A/B testing (with `match`) or blue/green run (without), as Flagger's `iterations`; " +
							"instead of `step_weight` or `step_weights`. Blue/green keeps all user traffic on the primary while the canary is analysed on test traffic " +
							"(a load-tester webhook sending requests to `<target>-canary`), then sends it all to the canary for one more interval, then promotes.",
						Validators: []validator.Int64{int64validator.AtLeast(1)}},
					"metrics": schema.ListNestedAttribute{
						Optional:            true,
						MarkdownDescription: "Prometheus checks run at every step.",
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"name": schema.StringAttribute{Required: true,
								MarkdownDescription: metricNameDescription()},
							"interval": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("1m"),
								MarkdownDescription: "PromQL range of the query (`{{ interval }}`), such as `30s` or `1m30s`. At least `1s`. Default `1m`.",
								Validators:          []validator.String{durationValidator{Minimum: time.Second, PromQL: true}}},
							"threshold_range": schema.SingleNestedAttribute{Optional: true,
								MarkdownDescription: "Accepted values: the check fails below `min` or above `max`. Required unless `judge` is set.",
								Attributes: map[string]schema.Attribute{
									"min": schema.Float64Attribute{Optional: true, MarkdownDescription: "Lowest accepted value."},
									"max": schema.Float64Attribute{Optional: true, MarkdownDescription: "Highest accepted value."},
								}},
							"query": schema.StringAttribute{Optional: true,
								MarkdownDescription: "Custom PromQL, a Go template with Flagger's variables `{{ name }}`, `{{ namespace }}`, `{{ target }}`, `{{ service }}`, `{{ route }}`, `{{ interval }}`, `{{ side }}` (`canary`, or `primary` when a `judge` reads the primary), and `{{ target_kind }}` (`Deployment`, `DaemonSet` or `StatefulSet`; `{{ target_kind_label }}` in lower case, as Linkerd names its label). It must return one number; an empty or NaN result fails the check. At most one of `query` and `template_ref`.",
								Validators:          []validator.String{queryTemplateValidator{}}},
							"template_ref": schema.StringAttribute{Optional: true,
								MarkdownDescription: "Name of one of the provider's `metric_templates` whose query (and Prometheus) this metric uses: Flagger's `templateRef.name`. At most one of `query` and `template_ref`; an undefined name is a plan error.",
								Validators:          []validator.String{stringvalidator.LengthAtLeast(1)}},
							"template_variables": schema.MapAttribute{Optional: true, ElementType: types.StringType,
								MarkdownDescription: "Values of the template's `{{ variables.<key> }}` (Flagger's `templateVariables`). Every key the template reads must be set. Only with `template_ref`."},
							"judge":   metricJudgeAttribute(),
							"dry_run": metricDryRunAttribute(),
						}},
					},
					"webhooks": schema.ListNestedAttribute{
						Optional:            true,
						MarkdownDescription: "Flagger webhooks. A status above 202 is a failure. URLs naming a cluster Service (`svc.ns`, `svc.ns.svc`, `…cluster.local`) are reached through the API server's service proxy.",
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"name": schema.StringAttribute{Required: true, MarkdownDescription: "Name of the webhook."},
							"type": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("rollout"),
								MarkdownDescription: "When it is called, as in Flagger. Default `rollout`. " +
									"Gates hold the run until they answer success, asked again every `interval` and bounded by `analysis.gate_timeout`: " +
									"`confirm-rollout` (before the canary is scaled up; phase `Waiting`), `confirm-traffic-increase` (before every weight increase; the checks go on meanwhile) and " +
									"`confirm-promotion` (after the last step; phase `WaitingPromotion`, the checks go on). " +
									"Checks: `pre-rollout` (once before the first shift) and `rollout` (every interval); a failure is a failed check. " +
									"`rollback`: asked every interval; a success rolls back at once. `post-rollout`: after the verdict; a failure is reported, the verdict stands. " +
									"`event`: every Event of the release, with Flagger's event payload (`eventMessage`, `eventType`, `timestamp` in `metadata`).",
								Validators: []validator.String{stringvalidator.OneOf(rollout.HookTypes...)}},
							"url": schema.StringAttribute{Optional: true, Sensitive: true,
								MarkdownDescription: "URL that receives Flagger's JSON payload by POST. Sensitive: incoming-webhook URLs carry tokens. " +
									"Required, except for a gate (`confirm-rollout`, `confirm-traffic-increase`, `confirm-promotion`): a gate without `url` is a built-in gate, " +
									"opened by `kubectl annotate configmap <name>-canary-release canary-release.dev/<type>=approved`.",
								Validators: []validator.String{webhookURLValidator{}}},
							"timeout": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("10s"),
								MarkdownDescription: "Timeout of one call, a Go duration such as `5s`. At least `1ms`. Default `10s`.",
								Validators:          []validator.String{durationValidator{Minimum: time.Millisecond}}},
							"url_wo": schema.StringAttribute{Optional: true, WriteOnly: true,
								MarkdownDescription: "`url`, write-only (Terraform 1.11 or later): never stored in the Terraform state. A change of it alone plans " +
									"nothing: change `url_wo_version` with it. A destroy has no configuration, so it calls no webhook whose url is write-only.",
								Validators: []validator.String{webhookURLValidator{},
									stringvalidator.ConflictsWith(path.MatchRelative().AtParent().AtName("url"))}},
							"url_wo_version": schema.Int64Attribute{Optional: true,
								MarkdownDescription: "Any number: a change of it plans an update that sends the current `url_wo` to the engine.",
								Validators:          []validator.Int64{int64validator.AlsoRequires(path.MatchRelative().AtParent().AtName("url_wo"))}},
							"metadata": schema.MapAttribute{Optional: true, ElementType: types.StringType, Sensitive: true,
								MarkdownDescription: "Sent as `metadata` in the payload (e.g. the load tester's `cmd`). Sensitive: a command may carry a token; " +
									"with Terraform 1.11 or later, `metadata_wo` keeps it out of the state."},
							"metadata_wo": schema.MapAttribute{Optional: true, WriteOnly: true, ElementType: types.StringType,
								MarkdownDescription: "`metadata`, write-only (Terraform 1.11 or later): never stored in the Terraform state. A change of it alone " +
									"plans nothing: change `metadata_wo_version` with it.",
								Validators: []validator.Map{mapvalidator.ConflictsWith(path.MatchRelative().AtParent().AtName("metadata"))}},
							"metadata_wo_version": schema.Int64Attribute{Optional: true,
								MarkdownDescription: "Any number: a change of it plans an update that sends the current `metadata_wo` to the engine.",
								Validators:          []validator.Int64{int64validator.AlsoRequires(path.MatchRelative().AtParent().AtName("metadata_wo"))}},
							"retries": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(0),
								MarkdownDescription: "How many more times a call that could not connect, or got a 5xx or 429 answer, is tried. Default 0.",
								Validators:          []validator.Int64{int64validator.Between(0, 10)}},
							"disable_tls": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
								MarkdownDescription: "Skip the verification of the webhook's TLS certificate (Flagger's `disableTLS`). Default false."},
							"mute_alert": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
								MarkdownDescription: "Keep this gate's waiting out of the alerts (Flagger's `muteAlert`). Default false."},
						}},
					},
				},
			},
			"progress_deadline_seconds": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(600),
				MarkdownDescription: "How long the canary or the primary may take to become Ready before the release fails. Default 600.",
				Validators:          []validator.Int64{int64validator.AtLeast(1)}},
			"skip_analysis": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				MarkdownDescription: "Promote as soon as the canary is Ready, without metrics or webhooks (a `confirm-rollout` gate, and the operator's pause and abort, still act). Default false."},
			"rollback_window": schema.SingleNestedAttribute{Optional: true,
				MarkdownDescription: "Fast revert (Argo Rollouts' `rollbackWindow`): a target whose template (and tracked configs) is one of the last `revisions` templates " +
					"this release promoted before the current one is promoted as soon as the canary is Ready, without analysis and, while the primary serves, without giving the canary any weight (Deployment targets). " +
					"The plan warns when an apply would do so, naming the revision. The release's state ConfigMap keeps the promoted templates; " +
					"a template whose rollout rolled back (a failed analysis, a failed readiness wait, an abort) leaves that list, and is analysed again. " +
					"A revert has no step, so `confirm-traffic-increase` and `confirm-promotion` gates are not asked (a `confirm-rollout` gate, a pause and an abort still act). Unset, every new template is analysed.",
				Attributes: map[string]schema.Attribute{
					"revisions": schema.Int64Attribute{Required: true,
						MarkdownDescription: fmt.Sprintf("How many earlier promotions a revert may return to without analysis: 1 is the template promoted just before the current one. From 1 to %d.", rollout.MaxRollbackWindow),
						Validators:          []validator.Int64{int64validator.Between(1, rollout.MaxRollbackWindow)}},
				}},
			"include_label_prefix": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: includeLabelPrefixDescription + " Unset, the provider's `include_label_prefix` applies."},
			"revert_on_deletion": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				MarkdownDescription: "With `target_ref`: on destroy, scale the target back up, wait until it is Ready and point the apex Service at it before the primary and the router object go. With false, destroy leaves the generated objects serving. Default true."},
			"retry_rejected": schema.StringAttribute{Optional: true,
				MarkdownDescription: "A rejected revision stays rejected: after an analysis fails (a check at the threshold, a rollback webhook, an operator's abort), " +
					"a plan whose target still holds that revision warns, naming it, when it failed and which check failed, and the apply refuses it before writing anything. " +
					"Set this attribute to a new value (any string, for example the date) to analyse that revision again on purpose; a changed template needs nothing."},
			"triggers": schema.MapAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Arbitrary values; a change makes the release look at the target again in the same apply (e.g. the image set by the kubernetes provider). A change with an unchanged pod template runs no rollout."},
			"timeouts": timeoutsAttribute(ctx),
			"rollout_plan": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "What this apply will do, shown in the plan: the weight schedule (`10 → 20 → 30 → promote`), the checks of every " +
					"analysis interval, the gates, and the shortest and worst-case duration, or why no rollout runs (`no rollout: the pod template is unchanged`). " +
					"With `target_ref` the rollout is decided at apply, when the target's template is known. " +
					"The plan warns when the worst case exceeds `timeouts.update`.",
			},
			"last_run": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "The story of the last apply's run, for runners without a terminal (HCP Terraform, Atlantis, CI logs): one line " +
					"per event with the time since the run began: every phase, canary weight, check with its value and verdict, gate and " +
					"note. An output or `terraform show` prints it after the apply, and the next plan's diff shows it; in a plan it is " +
					"\"(known after apply)\". At most " + fmt.Sprint(storyHeadLines+storyTailLines) + " lines: the first " + fmt.Sprint(storyHeadLines) +
					" and the last " + fmt.Sprint(storyTailLines) + ", with a count of those left out between. When a run fails, its error ends with " +
					"the same story.",
			},
			"status": schema.SingleNestedAttribute{
				Computed:            true,
				MarkdownDescription: "What the last apply did, as Flagger's Canary status.",
				Attributes: map[string]schema.Attribute{
					"phase":                schema.StringAttribute{Computed: true, MarkdownDescription: "`Initialized`, `Succeeded` or `Failed` after an apply; `Progressing`, `Promoting` or `Finalising` show an interrupted run."},
					"canary_weight":        schema.Int64Attribute{Computed: true, MarkdownDescription: "Canary weight, in percent, when the apply ended. For a run under way, or one stopped half-way, a refresh reads it from the router object."},
					"failed_checks":        schema.Int64Attribute{Computed: true, MarkdownDescription: "Failed checks of the last run."},
					"iterations":           schema.Int64Attribute{Computed: true, MarkdownDescription: "Analysis intervals of the last run."},
					"last_applied_spec":    schema.StringAttribute{Computed: true, MarkdownDescription: "Hash of the pod template of the last run."},
					"last_promoted_spec":   schema.StringAttribute{Computed: true, MarkdownDescription: "Hash of the pod template the primary runs."},
					"last_transition_time": schema.StringAttribute{Computed: true, MarkdownDescription: "Time of the last phase change (RFC 3339)."},
					"message":              schema.StringAttribute{Computed: true, MarkdownDescription: "What happened, e.g. the failed check."},
				},
			},
		},
	}
	// The mesh drivers' own attributes (route_ref, service.gateways, ...).
	addDriverAttributes(resp.Schema.Attributes)
}

// serviceMetadata is the labels and annotations a user adds to one generated Service.
func serviceMetadata(which string) schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{Optional: true,
		MarkdownDescription: which + " gets these labels and annotations too (Flagger's `service.apex`, `primary` and `canary`); the release's own labels win.",
		Attributes: map[string]schema.Attribute{
			"labels":      schema.MapAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "Labels."},
			"annotations": schema.MapAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "Annotations."},
		}}
}

// meshProviderDescription lists the drivers and what each writes.
func meshProviderDescription() string {
	var each []string
	for _, name := range registry.Names() {
		d, _ := registry.Get(name)
		each = append(each, fmt.Sprintf("`%s` (%s)", name, d.Describe().Summary))
	}
	return "The service mesh or gateway that splits traffic (Flagger's `provider`): " + listText(each, "or") + ". Changing it forces a new release."
}

// workloadKindsText names the kinds a release delivers: the engine's own, then each driver-owned
// kind with the mesh_provider that owns it, so that a kind added to either registry is named.
func workloadKindsText() string {
	kinds := slices.Clone(engineKinds)
	owned := registry.TargetKinds()
	for _, name := range slices.Sorted(maps.Keys(owned)) {
		kinds = append(kinds, fmt.Sprintf("a %s (`%s`) with `mesh_provider = %q`", owned[name].Kind, owned[name].APIVersion, name))
	}
	return "a " + listText(kinds, "or")
}

// metricNameDescription names the built-in checks, and the drivers that have none (their
// data plane reports where no metric provider reads yet).
func metricNameDescription() string {
	var without []string
	for _, name := range registry.Names() {
		if d, _ := registry.Get(name); len(d.Describe().Queries) == 0 {
			without = append(without, "`"+name+"`")
		}
	}
	text := "Name of the check. `request-success-rate` (percent) and `request-duration` (p99, ms) are built in for every `mesh_provider`"
	if len(without) > 0 {
		text += " but " + listText(without, "and") + " (no built-in metrics: every check needs a `query` or a `template_ref`)"
	}
	return text + ", with Flagger's queries."
}

// hostsDescription says what each driver makes of service.hosts.
func hostsDescription() string {
	text := "Hosts."
	for _, name := range registry.Names() {
		d, _ := registry.Get(name)
		if hosts := d.Describe().Hosts; hosts != "" {
			text += " " + hosts
		}
	}
	return text
}

// offeringText lists, for a description, the drivers whose routers can do what has asks,
// with the option values some of them need for it.
func offeringText(has func(router.Capabilities) bool, conjunction string) string {
	var each []string
	conditions := registry.Conditions(has)
	for _, name := range registry.Offering(has) {
		item := "`" + name + "`"
		for _, c := range conditions {
			if rest, ok := strings.CutPrefix(c, name+" with "); ok {
				item += " with `" + rest + "`"
			}
		}
		each = append(each, item)
	}
	return listText(each, conjunction)
}

// listText joins items as "a, b or c".
func listText(items []string, last string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + last + " " + items[len(items)-1]
}

// timeoutsAttribute is the framework's timeouts object, described: each bound covers a whole
// apply, so what happens when it is reached matters more than the duration format.
func timeoutsAttribute(ctx context.Context) schema.Attribute {
	const format = " A duration such as `30m` or `1h30m`."
	a := timeouts.Attributes(ctx, timeouts.Opts{Create: true, Update: true, Delete: true,
		CreateDescription: "Bound of the apply that creates the release: the primary, the Services and the router object, until the primary is Ready. Default `20m`." + format,
		UpdateDescription: "Bound of an apply that changes the release, analysis and promotion included. Default `60m`. Reached during the analysis, it rolls back as a failed check does; " +
			"once the analysis has passed, it leaves the traffic on a side that serves and the next apply finishes the promotion. The plan warns when the analysis's worst case exceeds it." + format,
		DeleteDescription: "Bound of the destroy, which hands the traffic back to the target (with `revert_on_deletion`) before the release's objects go. Default `20m`." + format,
	})
	nested, ok := a.(schema.SingleNestedAttribute)
	if !ok {
		return a
	}
	nested.MarkdownDescription = "Bounds of the whole apply, per operation, as in every Terraform resource. Cancelling (Ctrl-C) behaves as reaching the bound: see \"Timeouts, cancellation and what the cluster remembers\" on this page."
	return nested
}
