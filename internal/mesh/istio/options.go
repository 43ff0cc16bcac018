package istio

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
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/tfschema"
)

// MeshGateway is Istio's reserved name for the sidecars of the whole mesh.
const MeshGateway = "mesh"

// Options are the Istio service settings (Flagger's service.gateways, match, retries, timeout,
// headers, corsPolicy and trafficPolicy): the service attributes this driver adds. The zero
// value is Flagger's default route.
type Options struct {
	// Gateways the VirtualService is bound to; empty means [mesh].
	Gateways []string
	// Match narrows every route to the requests it matches (Flagger's service.match); A/B
	// and session-affinity conditions are added to each entry.
	Match         []Match
	Retries       *Retries
	Timeout       string
	Headers       *Headers
	CorsPolicy    *CorsPolicy
	TrafficPolicy *TrafficPolicy
	// Delegation makes the VirtualService a delegate (Flagger's service.delegation): no hosts
	// and no gateways; a root VirtualService the user owns routes to it with `delegate`.
	Delegation bool
}

// Retries is Istio's HTTPRetry.
type Retries struct {
	Attempts      int
	PerTryTimeout string
	RetryOn       string
}

// Headers are the header operations of the route.
type Headers struct {
	Request, Response *HeaderOps
}

// HeaderOps is one direction of Istio's Headers.
type HeaderOps struct {
	Set, Add map[string]string
	Remove   []string
}

// CorsPolicy is Istio's CorsPolicy.
type CorsPolicy struct {
	AllowOrigins                              []StringMatch
	AllowMethods, AllowHeaders, ExposeHeaders []string
	MaxAge                                    string
	AllowCredentials                          *bool
}

// Match is one HTTPMatchRequest of service.match.
type Match struct {
	URI, Method          *StringMatch
	Headers, QueryParams map[string]router.StringMatch
}

// StringMatch is one of exact, prefix or regex.
type StringMatch struct {
	Exact, Prefix, Regex string
}

// TrafficPolicy is the part of a DestinationRule's trafficPolicy that can be set.
type TrafficPolicy struct {
	TLSMode      string // DISABLE, SIMPLE, ISTIO_MUTUAL
	LoadBalancer string // simple load balancer: ROUND_ROBIN, LEAST_REQUEST, ...
}

// serviceAttrNames are the attributes this driver adds to `service`, in the order the docs
// list them.
var serviceAttrNames = []string{"gateways", "delegation", "match", "retries", "timeout", "headers", "cors_policy", "traffic_policy"}

// Values Istio accepts, checked at plan time so that a typo fails before anything is written.
var (
	tlsModes      = []string{"DISABLE", "SIMPLE", "ISTIO_MUTUAL"}
	loadBalancers = []string{"ROUND_ROBIN", "LEAST_REQUEST", "LEAST_CONN", "RANDOM", "PASSTHROUGH"}
	// retryOn are Envoy's x-envoy-retry-on and x-envoy-retry-grpc-on policies; Istio also
	// takes HTTP status codes, which retry_on allows as numbers.
	retryOn = []string{
		"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "envoy-ratelimited", "retriable-4xx",
		"refused-stream", "retriable-status-codes", "retriable-headers", "http3-post-connect-failure",
		"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable",
	}
)

// duration is Istio's duration rule (a valid duration of at least 1ms).
var duration = []validator.String{tfschema.Duration{Minimum: time.Millisecond}}

func istioOnly(text string) string {
	return text + " Istio only (`mesh_provider = \"istio\"`)."
}

func headerOpsAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"set": schema.MapAttribute{Optional: true, ElementType: types.StringType,
			MarkdownDescription: "Headers to set, overwriting any value present."},
		"add": schema.MapAttribute{Optional: true, ElementType: types.StringType,
			MarkdownDescription: "Headers to append a value to."},
		"remove": schema.ListAttribute{Optional: true, ElementType: types.StringType,
			MarkdownDescription: "Headers to remove.",
			Validators:          []validator.List{listvalidator.ValueStringsAre(stringvalidator.LengthAtLeast(1))}},
	}
}

// stringMatchAttribute is one of Istio's StringMatch forms.
func stringMatchAttribute(description string) schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{Optional: true,
		MarkdownDescription: description + " Exactly one of `exact`, `prefix` and `regex`.",
		Attributes: map[string]schema.Attribute{
			"exact":  schema.StringAttribute{Optional: true, MarkdownDescription: "The whole value."},
			"prefix": schema.StringAttribute{Optional: true, MarkdownDescription: "The beginning of the value."},
			"regex":  schema.StringAttribute{Optional: true, MarkdownDescription: "An RE2 regular expression the whole value matches."},
		},
		Validators: []validator.Object{tfschema.FieldsSet{Names: []string{"exact", "prefix", "regex"}, ExactlyOne: true}},
	}
}

// Options declares the service attributes.
func (Driver) Options() mesh.Options {
	return mesh.Options{Mesh: "Istio", Service: map[string]schema.Attribute{
		"match": schema.ListNestedAttribute{Optional: true,
			MarkdownDescription: istioOnly("The requests the VirtualService routes (Flagger's `match`, Istio's `HTTPMatchRequest`): a request is routed when it matches any entry, " +
				"and an entry when all of its conditions do. A/B testing and session affinity add their conditions to each entry. Default: every request."),
			Validators: []validator.List{listvalidator.SizeAtLeast(1)},
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"uri":          stringMatchAttribute("The request path."),
				"method":       stringMatchAttribute("The request method, such as `GET`."),
				"headers":      tfschema.StringMatchMap("Request headers, by name."),
				"query_params": tfschema.StringMatchMap("Query parameters, by name."),
			}}},
		"gateways": schema.ListAttribute{Optional: true, ElementType: types.StringType,
			MarkdownDescription: istioOnly("Gateways the VirtualService applies to, as `<gateway>` or `<namespace>/<gateway>` (Flagger's `gateways`). " +
				"Default: `[\"mesh\"]`, the sidecars of the whole mesh. A list replaces the default: include `\"mesh\"` to split in-mesh traffic as well."),
			Validators: []validator.List{listvalidator.SizeAtLeast(1), listvalidator.UniqueValues(), listvalidator.ValueStringsAre(gatewayValidator{})}},
		"delegation": schema.BoolAttribute{Optional: true,
			MarkdownDescription: istioOnly("Make the VirtualService `<apex>` a delegate (Flagger's `delegation`): it has no hosts and no gateways, and serves only the requests " +
				"a root VirtualService you own sends it with `delegate: {name: <apex>, namespace: <namespace>}` (Istio needs `PILOT_ENABLE_VIRTUAL_SERVICE_DELEGATE`, on by default since 1.8). " +
				"Not with `service.hosts` or `service.gateways`, which the root VirtualService lists. On destroy the delegate is handed over to the apex Service rather than deleted, " +
				"so the root's route keeps answering."),
		},
		"retries": schema.SingleNestedAttribute{Optional: true,
			MarkdownDescription: istioOnly("Retry policy of the route (Istio's `HTTPRetry`, Flagger's `retries`)."),
			Attributes: map[string]schema.Attribute{
				"attempts": schema.Int64Attribute{Required: true,
					MarkdownDescription: "Number of retries for a request; 0 turns retries off.",
					Validators:          []validator.Int64{int64validator.Between(0, 2147483647)}},
				"per_try_timeout": schema.StringAttribute{Optional: true,
					MarkdownDescription: "Timeout of each attempt, a duration such as `2s`, at least `1ms`. Default: the route's `timeout`.",
					Validators:          duration},
				"retry_on": schema.StringAttribute{Optional: true,
					MarkdownDescription: "Comma-separated conditions to retry on: Envoy's policies (`5xx`, `gateway-error`, `reset`, `connect-failure`, " +
						"`retriable-4xx`, `refused-stream`, …, gRPC's `cancelled`, `deadline-exceeded`, `internal`, `resource-exhausted`, `unavailable`) or HTTP status codes such as `503`.",
					Validators: []validator.String{retryOnValidator{}}},
			}},
		"timeout": schema.StringAttribute{Optional: true,
			MarkdownDescription: istioOnly("Timeout of the route's requests, a duration such as `30s`, at least `1ms` (Flagger's `timeout`). Default: Istio's (none)."),
			Validators:          duration},
		"headers": schema.SingleNestedAttribute{Optional: true,
			MarkdownDescription: istioOnly("Header operations on the route's requests and responses (Flagger's `headers`)."),
			Attributes: map[string]schema.Attribute{
				"request": schema.SingleNestedAttribute{Optional: true, MarkdownDescription: "Operations on request headers.",
					Attributes: headerOpsAttributes()},
				"response": schema.SingleNestedAttribute{Optional: true, MarkdownDescription: "Operations on response headers.",
					Attributes: headerOpsAttributes()},
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
						Validators: []validator.Object{tfschema.FieldsSet{Names: []string{"exact", "prefix", "regex"}, ExactlyOne: true}},
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
					Validators:          duration},
				"allow_credentials": schema.BoolAttribute{Optional: true,
					MarkdownDescription: "Whether credentialed requests are allowed (`Access-Control-Allow-Credentials`)."},
			}},
		"traffic_policy": schema.SingleNestedAttribute{Optional: true,
			MarkdownDescription: istioOnly("Traffic policy of the generated DestinationRules `<apex>-primary` and `<apex>-canary` (part of Flagger's `trafficPolicy`)."),
			Attributes: map[string]schema.Attribute{
				"tls_mode": schema.StringAttribute{Optional: true,
					MarkdownDescription: "TLS towards the pods: `ISTIO_MUTUAL` (Istio's certificates), `SIMPLE` (TLS origination) or `DISABLE` (plain text). " +
						"`MUTUAL`, which needs client certificates, is not supported yet.",
					Validators: []validator.String{stringvalidator.OneOf(tlsModes...)}},
				"load_balancer": schema.StringAttribute{Optional: true,
					MarkdownDescription: "Load-balancing algorithm across the pods: `" + strings.Join(loadBalancers, "`, `") + "`.",
					Validators:          []validator.String{stringvalidator.OneOf(loadBalancers...)}},
			},
			Validators: []validator.Object{tfschema.FieldsSet{Names: []string{"tls_mode", "load_balancer"}}}},
	}}
}

// Validate refuses what Flagger refuses with service.delegation: a delegate VirtualService has
// no hosts and no gateways of its own.
func (Driver) Validate(_ context.Context, v mesh.Values, diags *diag.Diagnostics) {
	delegation, ok := v.ServiceValue("delegation").(types.Bool)
	if !ok || !delegation.ValueBool() {
		return
	}
	for _, name := range []string{"hosts", "gateways"} {
		if list, ok := v.ServiceValue(name).(types.List); ok && !list.IsNull() && !list.IsUnknown() && len(list.Elements()) > 0 {
			diags.AddAttributeError(mesh.ServicePath(name), "Delegate VirtualService with "+name,
				fmt.Sprintf("service.delegation = true makes the VirtualService a delegate, which Istio requires to have no hosts and no gateways: "+
					"remove service.%s and list them on the root VirtualService that delegates to this one.", name))
		}
	}
}

// serviceModel is the part of the service block this driver owns.
type serviceModel struct {
	Gateways      types.List   `tfsdk:"gateways"`
	Match         types.List   `tfsdk:"match"`
	Retries       types.Object `tfsdk:"retries"`
	Timeout       types.String `tfsdk:"timeout"`
	Headers       types.Object `tfsdk:"headers"`
	CorsPolicy    types.Object `tfsdk:"cors_policy"`
	TrafficPolicy types.Object `tfsdk:"traffic_policy"`
	Delegation    types.Bool   `tfsdk:"delegation"`
}

type retriesModel struct {
	Attempts      types.Int64  `tfsdk:"attempts"`
	PerTryTimeout types.String `tfsdk:"per_try_timeout"`
	RetryOn       types.String `tfsdk:"retry_on"`
}

type headersModel struct {
	Request  types.Object `tfsdk:"request"`
	Response types.Object `tfsdk:"response"`
}

type headerOpsModel struct {
	Set    types.Map  `tfsdk:"set"`
	Add    types.Map  `tfsdk:"add"`
	Remove types.List `tfsdk:"remove"`
}

type corsPolicyModel struct {
	AllowOrigins     types.List   `tfsdk:"allow_origins"`
	AllowMethods     types.List   `tfsdk:"allow_methods"`
	AllowHeaders     types.List   `tfsdk:"allow_headers"`
	ExposeHeaders    types.List   `tfsdk:"expose_headers"`
	MaxAge           types.String `tfsdk:"max_age"`
	AllowCredentials types.Bool   `tfsdk:"allow_credentials"`
}

type matchModel struct {
	URI         types.Object `tfsdk:"uri"`
	Method      types.Object `tfsdk:"method"`
	Headers     types.Map    `tfsdk:"headers"`
	QueryParams types.Map    `tfsdk:"query_params"`
}

type stringMatchModel struct {
	Exact  types.String `tfsdk:"exact"`
	Prefix types.String `tfsdk:"prefix"`
	Regex  types.String `tfsdk:"regex"`
}

type trafficPolicyModel struct {
	TLSMode      types.String `tfsdk:"tls_mode"`
	LoadBalancer types.String `tfsdk:"load_balancer"`
}

func stringMatchOf(o types.Object) (*StringMatch, error) {
	var m stringMatchModel
	ok, err := tfschema.Decode(o, &m)
	if err != nil || !ok {
		return nil, err
	}
	return &StringMatch{Exact: m.Exact.ValueString(), Prefix: m.Prefix.ValueString(), Regex: m.Regex.ValueString()}, nil
}

// Decode reads the service attributes into Options. Every value must be known.
func (Driver) Decode(v mesh.Values) (any, error) {
	var out Options
	o, err := tfschema.Object(v.Service, serviceAttrNames...)
	if err != nil {
		return out, tfschema.Prefixed("service", err)
	}
	var s serviceModel
	if _, err := tfschema.Decode(o, &s); err != nil {
		return out, tfschema.Prefixed("service", err)
	}
	if err := tfschema.DecodeElements(s.Gateways, &out.Gateways); err != nil {
		return out, tfschema.Prefixed("service.gateways", err)
	}
	out.Timeout = s.Timeout.ValueString()
	out.Delegation = s.Delegation.ValueBool()
	var matches []matchModel
	if err := tfschema.DecodeElements(s.Match, &matches); err != nil {
		return out, tfschema.Prefixed("service.match", err)
	}
	for _, mm := range matches {
		var m Match
		var errs [4]error
		m.URI, errs[0] = stringMatchOf(mm.URI)
		m.Method, errs[1] = stringMatchOf(mm.Method)
		m.Headers, errs[2] = tfschema.StringMatches(mm.Headers)
		m.QueryParams, errs[3] = tfschema.StringMatches(mm.QueryParams)
		if err := errors.Join(errs[:]...); err != nil {
			return out, tfschema.Prefixed("service.match", err)
		}
		out.Match = append(out.Match, m)
	}
	var retries retriesModel
	if ok, err := tfschema.Decode(s.Retries, &retries); err != nil {
		return out, tfschema.Prefixed("service.retries", err)
	} else if ok {
		out.Retries = &Retries{Attempts: int(retries.Attempts.ValueInt64()),
			PerTryTimeout: retries.PerTryTimeout.ValueString(), RetryOn: retries.RetryOn.ValueString()}
	}
	var headers headersModel
	if ok, err := tfschema.Decode(s.Headers, &headers); err != nil {
		return out, tfschema.Prefixed("service.headers", err)
	} else if ok {
		out.Headers = &Headers{}
		if out.Headers.Request, err = headerOpsOf(headers.Request); err != nil {
			return out, tfschema.Prefixed("service.headers.request", err)
		}
		if out.Headers.Response, err = headerOpsOf(headers.Response); err != nil {
			return out, tfschema.Prefixed("service.headers.response", err)
		}
	}
	var cors corsPolicyModel
	if ok, err := tfschema.Decode(s.CorsPolicy, &cors); err != nil {
		return out, tfschema.Prefixed("service.cors_policy", err)
	} else if ok {
		c := &CorsPolicy{MaxAge: cors.MaxAge.ValueString(), AllowCredentials: cors.AllowCredentials.ValueBoolPointer()}
		var origins []stringMatchModel
		for _, e := range []error{
			tfschema.DecodeElements(cors.AllowOrigins, &origins), tfschema.DecodeElements(cors.AllowMethods, &c.AllowMethods),
			tfschema.DecodeElements(cors.AllowHeaders, &c.AllowHeaders), tfschema.DecodeElements(cors.ExposeHeaders, &c.ExposeHeaders),
		} {
			if e != nil {
				return out, tfschema.Prefixed("service.cors_policy", e)
			}
		}
		for _, o := range origins {
			c.AllowOrigins = append(c.AllowOrigins, StringMatch{Exact: o.Exact.ValueString(), Prefix: o.Prefix.ValueString(), Regex: o.Regex.ValueString()})
		}
		out.CorsPolicy = c
	}
	var tp trafficPolicyModel
	if ok, err := tfschema.Decode(s.TrafficPolicy, &tp); err != nil {
		return out, tfschema.Prefixed("service.traffic_policy", err)
	} else if ok {
		out.TrafficPolicy = &TrafficPolicy{TLSMode: tp.TLSMode.ValueString(), LoadBalancer: tp.LoadBalancer.ValueString()}
	}
	return out, nil
}

func headerOpsOf(o types.Object) (*HeaderOps, error) {
	var m headerOpsModel
	ok, err := tfschema.Decode(o, &m)
	if err != nil || !ok {
		return nil, err
	}
	ops := &HeaderOps{}
	for _, e := range []error{tfschema.DecodeElements(m.Set, &ops.Set), tfschema.DecodeElements(m.Add, &ops.Add), tfschema.DecodeElements(m.Remove, &ops.Remove)} {
		if e != nil {
			return nil, e
		}
	}
	return ops, nil
}

// gatewayValidator checks a gateway reference: `mesh`, `<gateway>` or `<namespace>/<gateway>`.
type gatewayValidator struct{}

func (gatewayValidator) Description(context.Context) string {
	return "`mesh`, a Gateway name or `<namespace>/<gateway>`, in lowercase DNS-1123 form"
}

func (v gatewayValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v gatewayValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
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

// retryOnValidator checks retry_on: comma-separated Envoy retry policies or HTTP codes.
type retryOnValidator struct{}

func (retryOnValidator) Description(context.Context) string {
	return "a comma-separated list of " + strings.Join(retryOn, ", ") + " or HTTP status codes (100-599)"
}

func (v retryOnValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v retryOnValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	for _, item := range strings.Split(req.ConfigValue.ValueString(), ",") {
		item = strings.TrimSpace(item)
		if code, err := strconv.Atoi(item); err == nil && code >= 100 && code <= 599 {
			continue
		}
		known := false
		for _, p := range retryOn {
			known = known || item == p
		}
		if !known {
			resp.Diagnostics.AddAttributeError(req.Path, "Invalid retry condition",
				fmt.Sprintf("%s must be %s; %q is not one.", req.Path, v.Description(ctx), item))
			return
		}
	}
}
