package provider

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// The Istio-only attributes of `service` (Flagger's service.gateways, match, retries, timeout,
// headers, corsPolicy and trafficPolicy), in the order the docs list them.
var istioServiceAttrNames = []string{"gateways", "match", "retries", "timeout", "headers", "cors_policy", "traffic_policy"}

// Values Istio accepts, checked at plan time so that a typo fails before anything is written.
var (
	istioTLSModes      = []string{"DISABLE", "SIMPLE", "ISTIO_MUTUAL"}
	istioLoadBalancers = []string{"ROUND_ROBIN", "LEAST_REQUEST", "LEAST_CONN", "RANDOM", "PASSTHROUGH"}
	// istioRetryOn are Envoy's x-envoy-retry-on and x-envoy-retry-grpc-on policies; Istio also
	// takes HTTP status codes, which retry_on allows as numbers.
	istioRetryOn = []string{
		"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "envoy-ratelimited", "retriable-4xx",
		"refused-stream", "retriable-status-codes", "retriable-headers", "http3-post-connect-failure",
		"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable",
	}
)

// istioDuration is Istio's duration rule (a valid duration of at least 1ms).
var istioDuration = []validator.String{durationValidator{minimum: time.Millisecond}}

func istioOnly(text string) string {
	return text + " Istio only (`mesh_provider = \"istio\"`)."
}

var headerOpsAttributes = map[string]schema.Attribute{
	"set": schema.MapAttribute{Optional: true, ElementType: types.StringType,
		MarkdownDescription: "Headers to set, overwriting any value present."},
	"add": schema.MapAttribute{Optional: true, ElementType: types.StringType,
		MarkdownDescription: "Headers to append a value to."},
	"remove": schema.ListAttribute{Optional: true, ElementType: types.StringType,
		MarkdownDescription: "Headers to remove.",
		Validators:          []validator.List{listvalidator.ValueStringsAre(stringvalidator.LengthAtLeast(1))}},
}

// istioStringMatch is one of Istio's StringMatch forms.
func istioStringMatch(description string) schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{Optional: true,
		MarkdownDescription: description + " Exactly one of `exact`, `prefix` and `regex`.",
		Attributes: map[string]schema.Attribute{
			"exact":  schema.StringAttribute{Optional: true, MarkdownDescription: "The whole value."},
			"prefix": schema.StringAttribute{Optional: true, MarkdownDescription: "The beginning of the value."},
			"regex":  schema.StringAttribute{Optional: true, MarkdownDescription: "An RE2 regular expression the whole value matches."},
		},
		Validators: []validator.Object{fieldsSetValidator{names: []string{"exact", "prefix", "regex"}, exactlyOne: true}},
	}
}

// istioServiceAttributes are added to the `service` block.
var istioServiceAttributes = map[string]schema.Attribute{
	"match": schema.ListNestedAttribute{Optional: true,
		MarkdownDescription: istioOnly("The requests the VirtualService routes (Flagger's `match`, Istio's `HTTPMatchRequest`): a request is routed when it matches any entry, " +
			"and an entry when all of its conditions do. A/B testing and session affinity add their conditions to each entry. Default: every request."),
		Validators: []validator.List{listvalidator.SizeAtLeast(1)},
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"uri":          istioStringMatch("The request path."),
			"method":       istioStringMatch("The request method, such as `GET`."),
			"headers":      stringMatchMap("Request headers, by name."),
			"query_params": stringMatchMap("Query parameters, by name."),
		}}},
	"gateways": schema.ListAttribute{Optional: true, ElementType: types.StringType,
		MarkdownDescription: istioOnly("Gateways the VirtualService applies to, as `<gateway>` or `<namespace>/<gateway>` (Flagger's `gateways`). " +
			"Default: `[\"mesh\"]`, the sidecars of the whole mesh. A list replaces the default: include `\"mesh\"` to split in-mesh traffic as well."),
		Validators: []validator.List{listvalidator.SizeAtLeast(1), listvalidator.UniqueValues(), listvalidator.ValueStringsAre(istioGatewayValidator{})}},
	"retries": schema.SingleNestedAttribute{Optional: true,
		MarkdownDescription: istioOnly("Retry policy of the route (Istio's `HTTPRetry`, Flagger's `retries`)."),
		Attributes: map[string]schema.Attribute{
			"attempts": schema.Int64Attribute{Required: true,
				MarkdownDescription: "Number of retries for a request; 0 turns retries off.",
				Validators:          []validator.Int64{int64validator.Between(0, 2147483647)}},
			"per_try_timeout": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Timeout of each attempt, a duration such as `2s`, at least `1ms`. Default: the route's `timeout`.",
				Validators:          istioDuration},
			"retry_on": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Comma-separated conditions to retry on: Envoy's policies (`5xx`, `gateway-error`, `reset`, `connect-failure`, " +
					"`retriable-4xx`, `refused-stream`, …, gRPC's `cancelled`, `deadline-exceeded`, `internal`, `resource-exhausted`, `unavailable`) or HTTP status codes such as `503`.",
				Validators: []validator.String{istioRetryOnValidator{}}},
		}},
	"timeout": schema.StringAttribute{Optional: true,
		MarkdownDescription: istioOnly("Timeout of the route's requests, a duration such as `30s`, at least `1ms` (Flagger's `timeout`). Default: Istio's (none)."),
		Validators:          istioDuration},
	"headers": schema.SingleNestedAttribute{Optional: true,
		MarkdownDescription: istioOnly("Header operations on the route's requests and responses (Flagger's `headers`)."),
		Attributes: map[string]schema.Attribute{
			"request": schema.SingleNestedAttribute{Optional: true, MarkdownDescription: "Operations on request headers.",
				Attributes: headerOpsAttributes},
			"response": schema.SingleNestedAttribute{Optional: true, MarkdownDescription: "Operations on response headers.",
				Attributes: headerOpsAttributes},
		}},
	"cors_policy": schema.SingleNestedAttribute{Optional: true,
		MarkdownDescription: istioOnly("Cross-origin resource sharing policy of the route (Istio's `CorsPolicy`, Flagger's `corsPolicy`)."),
		Attributes: map[string]schema.Attribute{
			"allow_origins": schema.ListNestedAttribute{Optional: true,
				MarkdownDescription: "Origins allowed; each sets exactly one of `exact`, `prefix` and `regex`.",
				NestedObject: schema.NestedAttributeObject{
					Attributes: map[string]schema.Attribute{
						"exact":  schema.StringAttribute{Optional: true, MarkdownDescription: "The origin, exactly."},
						"prefix": schema.StringAttribute{Optional: true, MarkdownDescription: "A prefix of the origin."},
						"regex":  schema.StringAttribute{Optional: true, MarkdownDescription: "An RE2 regular expression the origin matches."},
					},
					Validators: []validator.Object{fieldsSetValidator{names: []string{"exact", "prefix", "regex"}, exactlyOne: true}},
				}},
			"allow_methods": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Methods allowed (`Access-Control-Allow-Methods`).",
				Validators:          []validator.List{listvalidator.ValueStringsAre(stringvalidator.LengthAtLeast(1))}},
			"allow_headers": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Request headers allowed (`Access-Control-Allow-Headers`).",
				Validators:          []validator.List{listvalidator.ValueStringsAre(stringvalidator.LengthAtLeast(1))}},
			"expose_headers": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Response headers browsers may read (`Access-Control-Expose-Headers`).",
				Validators:          []validator.List{listvalidator.ValueStringsAre(stringvalidator.LengthAtLeast(1))}},
			"max_age": schema.StringAttribute{Optional: true,
				MarkdownDescription: "How long a preflight answer may be cached, a duration such as `24h`, at least `1ms`.",
				Validators:          istioDuration},
			"allow_credentials": schema.BoolAttribute{Optional: true,
				MarkdownDescription: "Whether credentialed requests are allowed (`Access-Control-Allow-Credentials`)."},
		}},
	"traffic_policy": schema.SingleNestedAttribute{Optional: true,
		MarkdownDescription: istioOnly("Traffic policy of the generated DestinationRules `<apex>-primary` and `<apex>-canary` (part of Flagger's `trafficPolicy`)."),
		Attributes: map[string]schema.Attribute{
			"tls_mode": schema.StringAttribute{Optional: true,
				MarkdownDescription: "TLS towards the pods: `ISTIO_MUTUAL` (Istio's certificates), `SIMPLE` (TLS origination) or `DISABLE` (plain text). " +
					"`MUTUAL`, which needs client certificates, is not supported yet.",
				Validators: []validator.String{stringvalidator.OneOf(istioTLSModes...)}},
			"load_balancer": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Load-balancing algorithm across the pods: `" + strings.Join(istioLoadBalancers, "`, `") + "`.",
				Validators:          []validator.String{stringvalidator.OneOf(istioLoadBalancers...)}},
		},
		Validators: []validator.Object{fieldsSetValidator{names: []string{"tls_mode", "load_balancer"}}}},
}

type IstioRetriesModel struct {
	Attempts      types.Int64  `tfsdk:"attempts"`
	PerTryTimeout types.String `tfsdk:"per_try_timeout"`
	RetryOn       types.String `tfsdk:"retry_on"`
}

type IstioHeadersModel struct {
	Request  types.Object `tfsdk:"request"`
	Response types.Object `tfsdk:"response"`
}

type IstioHeaderOpsModel struct {
	Set    types.Map  `tfsdk:"set"`
	Add    types.Map  `tfsdk:"add"`
	Remove types.List `tfsdk:"remove"`
}

type IstioCorsPolicyModel struct {
	AllowOrigins     types.List   `tfsdk:"allow_origins"`
	AllowMethods     types.List   `tfsdk:"allow_methods"`
	AllowHeaders     types.List   `tfsdk:"allow_headers"`
	ExposeHeaders    types.List   `tfsdk:"expose_headers"`
	MaxAge           types.String `tfsdk:"max_age"`
	AllowCredentials types.Bool   `tfsdk:"allow_credentials"`
}

type IstioMatchModel struct {
	URI         types.Object `tfsdk:"uri"`
	Method      types.Object `tfsdk:"method"`
	Headers     types.Map    `tfsdk:"headers"`
	QueryParams types.Map    `tfsdk:"query_params"`
}

func istioStringMatchOf(o types.Object) (*router.IstioStringMatch, error) {
	var m IstioStringMatchModel
	ok, err := decode(o, &m)
	if err != nil || !ok {
		return nil, err
	}
	return &router.IstioStringMatch{Exact: m.Exact.ValueString(), Prefix: m.Prefix.ValueString(), Regex: m.Regex.ValueString()}, nil
}

type IstioStringMatchModel struct {
	Exact  types.String `tfsdk:"exact"`
	Prefix types.String `tfsdk:"prefix"`
	Regex  types.String `tfsdk:"regex"`
}

type IstioTrafficPolicyModel struct {
	TLSMode      types.String `tfsdk:"tls_mode"`
	LoadBalancer types.String `tfsdk:"load_balancer"`
}

// istioSpec decodes the Istio attributes of the service block. Every value must be known.
func (s ServiceModel) istioSpec() (router.IstioSpec, error) {
	var out router.IstioSpec
	if err := decodeElements(s.Gateways, &out.Gateways); err != nil {
		return out, prefixed("service.gateways", err)
	}
	out.Timeout = s.Timeout.ValueString()
	var matches []IstioMatchModel
	if err := decodeElements(s.Match, &matches); err != nil {
		return out, prefixed("service.match", err)
	}
	for _, mm := range matches {
		var m router.IstioMatch
		var errs [4]error
		m.URI, errs[0] = istioStringMatchOf(mm.URI)
		m.Method, errs[1] = istioStringMatchOf(mm.Method)
		m.Headers, errs[2] = stringMatches(mm.Headers)
		m.QueryParams, errs[3] = stringMatches(mm.QueryParams)
		if err := errors.Join(errs[:]...); err != nil {
			return out, prefixed("service.match", err)
		}
		out.Match = append(out.Match, m)
	}
	var retries IstioRetriesModel
	if ok, err := decode(s.Retries, &retries); err != nil {
		return out, prefixed("service.retries", err)
	} else if ok {
		out.Retries = &router.IstioRetries{Attempts: int(retries.Attempts.ValueInt64()),
			PerTryTimeout: retries.PerTryTimeout.ValueString(), RetryOn: retries.RetryOn.ValueString()}
	}
	var headers IstioHeadersModel
	if ok, err := decode(s.Headers, &headers); err != nil {
		return out, prefixed("service.headers", err)
	} else if ok {
		out.Headers = &router.IstioHeaders{}
		if out.Headers.Request, err = headerOps(headers.Request); err != nil {
			return out, prefixed("service.headers.request", err)
		}
		if out.Headers.Response, err = headerOps(headers.Response); err != nil {
			return out, prefixed("service.headers.response", err)
		}
	}
	var cors IstioCorsPolicyModel
	if ok, err := decode(s.CorsPolicy, &cors); err != nil {
		return out, prefixed("service.cors_policy", err)
	} else if ok {
		c := &router.IstioCorsPolicy{MaxAge: cors.MaxAge.ValueString(), AllowCredentials: cors.AllowCredentials.ValueBoolPointer()}
		var origins []IstioStringMatchModel
		for _, e := range []error{
			decodeElements(cors.AllowOrigins, &origins), decodeElements(cors.AllowMethods, &c.AllowMethods),
			decodeElements(cors.AllowHeaders, &c.AllowHeaders), decodeElements(cors.ExposeHeaders, &c.ExposeHeaders),
		} {
			if e != nil {
				return out, prefixed("service.cors_policy", e)
			}
		}
		for _, o := range origins {
			c.AllowOrigins = append(c.AllowOrigins, router.IstioStringMatch{
				Exact: o.Exact.ValueString(), Prefix: o.Prefix.ValueString(), Regex: o.Regex.ValueString()})
		}
		out.CorsPolicy = c
	}
	var tp IstioTrafficPolicyModel
	if ok, err := decode(s.TrafficPolicy, &tp); err != nil {
		return out, prefixed("service.traffic_policy", err)
	} else if ok {
		out.TrafficPolicy = &router.IstioTrafficPolicy{TLSMode: tp.TLSMode.ValueString(), LoadBalancer: tp.LoadBalancer.ValueString()}
	}
	return out, nil
}

func headerOps(o types.Object) (*router.IstioHeaderOps, error) {
	var m IstioHeaderOpsModel
	ok, err := decode(o, &m)
	if err != nil || !ok {
		return nil, err
	}
	ops := &router.IstioHeaderOps{}
	for _, e := range []error{decodeElements(m.Set, &ops.Set), decodeElements(m.Add, &ops.Add), decodeElements(m.Remove, &ops.Remove)} {
		if e != nil {
			return nil, e
		}
	}
	return ops, nil
}

// validateIstioOnly rejects the Istio attributes of `service` with any other mesh_provider,
// where nothing would apply them.
func validateIstioOnly(m ReleaseModel, provider string, known bool, resp *resource.ValidateConfigResponse) {
	if !known || provider == "istio" || m.Service.IsNull() || m.Service.IsUnknown() {
		return
	}
	attrs := m.Service.Attributes()
	for _, name := range istioServiceAttrNames {
		if v, ok := attrs[name]; ok && !v.IsNull() {
			resp.Diagnostics.AddAttributeError(path.Root("service").AtName(name), "service."+name+" needs Istio",
				fmt.Sprintf(`service.%s is only used with mesh_provider = "istio", not %q.`, name, provider))
		}
	}
}

// istioGatewayValidator checks a gateway reference: `mesh`, `<gateway>` or `<namespace>/<gateway>`.
type istioGatewayValidator struct{}

func (istioGatewayValidator) Description(context.Context) string {
	return "`mesh`, a Gateway name or `<namespace>/<gateway>`, in lowercase DNS-1123 form"
}

func (v istioGatewayValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v istioGatewayValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	s := req.ConfigValue.ValueString()
	ns, name, scoped := strings.Cut(s, "/")
	var problems []string
	if !scoped {
		name = ns
	} else {
		problems = append(problems, validation.IsDNS1123Label(ns)...)
	}
	problems = append(problems, validation.IsDNS1123Subdomain(name)...)
	if len(problems) > 0 {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid gateway",
			fmt.Sprintf("%s must be %s; %q is not: %s.", req.Path, v.Description(ctx), s, strings.Join(problems, "; ")))
	}
}

// istioRetryOnValidator checks retry_on: comma-separated Envoy retry policies or HTTP codes.
type istioRetryOnValidator struct{}

func (istioRetryOnValidator) Description(context.Context) string {
	return "a comma-separated list of " + strings.Join(istioRetryOn, ", ") + " or HTTP status codes (100-599)"
}

func (v istioRetryOnValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v istioRetryOnValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	for _, item := range strings.Split(req.ConfigValue.ValueString(), ",") {
		item = strings.TrimSpace(item)
		if code, err := strconv.Atoi(item); err == nil && code >= 100 && code <= 599 {
			continue
		}
		known := false
		for _, p := range istioRetryOn {
			known = known || item == p
		}
		if !known {
			resp.Diagnostics.AddAttributeError(req.Path, "Invalid retry condition",
				fmt.Sprintf("%s must be %s; %q is not one.", req.Path, v.Description(ctx), item))
			return
		}
	}
}

// fieldsSetValidator wants at least one (or, with exactlyOne, exactly one) of an object's
// attributes set. The framework's AtLeastOneOf and ExactlyOneOf count the object itself.
type fieldsSetValidator struct {
	names      []string
	exactlyOne bool
}

func (v fieldsSetValidator) Description(context.Context) string {
	how := "at least one"
	if v.exactlyOne {
		how = "exactly one"
	}
	return fmt.Sprintf("%s of %s", how, strings.Join(v.names, ", "))
}

func (v fieldsSetValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v fieldsSetValidator) ValidateObject(ctx context.Context, req validator.ObjectRequest, resp *validator.ObjectResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	attrs := req.ConfigValue.Attributes()
	var set []string
	for _, name := range v.names {
		a, ok := attrs[name]
		if !ok || a.IsNull() {
			continue
		}
		if a.IsUnknown() {
			return // may or may not be set: the apply decides
		}
		set = append(set, name)
	}
	if len(set) == 0 || (v.exactlyOne && len(set) > 1) {
		got := "none"
		if len(set) > 0 {
			got = strings.Join(set, " and ")
		}
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid attribute combination",
			fmt.Sprintf("%s must set %s; it sets %s.", req.Path, v.Description(ctx), got))
	}
}
