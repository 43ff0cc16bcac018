package provider

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"k8s.io/client-go/rest"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// metricBackend is one kind of monitoring a metric template can query: the attribute of a
// metric template named after its type (Flagger's provider type). Each lives in a file of
// its own, metric_backend_<type>.go, which registers it from init with registerMetricBackend.
type metricBackend struct {
	// description is the attribute's MarkdownDescription.
	description string
	// attributes are the backend object's attributes, each with a MarkdownDescription;
	// credentials are Sensitive.
	attributes map[string]schema.Attribute
	// build checks the backend's object, found at `at` (the plan-time checks: the provider is
	// configured at plan), and builds its querier. secrets are the object's credentials, masked
	// in every log line. build is only called with a known, non-null object.
	build func(ctx context.Context, obj types.Object, env metricBackendEnv, at path.Path) (q metrics.Querier, secrets []string, diags diag.Diagnostics)
	// checkQuery, when set, checks at plan what a template's query may be for this backend,
	// on the query rendered with placeholder values (the querier checks the real rendering
	// at apply). obj is the backend's object, whose values may be unknown yet.
	checkQuery func(obj types.Object, rendered string) error
}

// checkTemplateQuery runs b's checkQuery on a metric template's query, found at `at`. A query
// that does not render is left to the query's own validator.
func (b metricBackend) checkTemplateQuery(obj types.Object, query string, at path.Path) diag.Diagnostics {
	var diags diag.Diagnostics
	if b.checkQuery == nil {
		return diags
	}
	rendered, err := renderWithPlaceholders(query, true)
	if err != nil {
		return diags
	}
	if err := b.checkQuery(obj, rendered); err != nil {
		detail := fmt.Sprintf("%s %v.", at, err)
		if strings.TrimSpace(rendered) != strings.TrimSpace(query) {
			detail += fmt.Sprintf(" (Rendered with each variable as its own name: %q.)", strings.TrimSpace(rendered))
		}
		diags.AddAttributeError(at, "Invalid query for its backend", detail)
	}
	return diags
}

// metricBackendEnv is what a backend may need from the provider's configuration.
type metricBackendEnv struct {
	// prometheusAddress is the provider's prometheus.address (or CANARY_PROMETHEUS_ADDRESS).
	prometheusAddress string
	// kube reaches the cluster, for an address that names a cluster Service; nil in unit tests.
	kube *rest.Config
}

var metricBackends = map[string]metricBackend{}

// registerMetricBackend adds a backend under its type name; called from init.
func registerMetricBackend(name string, b metricBackend) {
	if _, dup := metricBackends[name]; dup || name == "query" {
		panic("metric backend registered twice or under a reserved name: " + name)
	}
	metricBackends[name] = b
}

// metricBackendNames are the registered backends' type names, sorted.
func metricBackendNames() []string { return slices.Sorted(maps.Keys(metricBackends)) }

// metricBackendAttributes are the metric template's backend attributes, one per backend.
func metricBackendAttributes() map[string]schema.Attribute {
	attrs := make(map[string]schema.Attribute, len(metricBackends))
	for name, b := range metricBackends {
		attrs[name] = schema.SingleNestedAttribute{Optional: true, MarkdownDescription: b.description, Attributes: b.attributes}
	}
	return attrs
}

// setBackends are the backend attributes a template object sets (or may set: unknown counts).
func setBackends(obj types.Object) []string {
	var set []string
	for name, v := range obj.Attributes() {
		if _, ok := metricBackends[name]; ok && !v.IsNull() {
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

// decodeBackendObject decodes a backend's object into its model, a struct with tfsdk tags.
func decodeBackendObject(ctx context.Context, obj types.Object, model any) diag.Diagnostics {
	return obj.As(ctx, model, basetypes.ObjectAsOptions{})
}

// decodeKnownBackend decodes a backend's block into model; known is false when it could not,
// or while any of its values is unknown (a plan before the values it reads exist): nothing is
// built from a half-known configuration.
func decodeKnownBackend(ctx context.Context, obj types.Object, model any) (known bool, diags diag.Diagnostics) {
	if diags = decodeBackendObject(ctx, obj, model); diags.HasError() {
		return false, diags
	}
	for _, v := range obj.Attributes() {
		if v.IsUnknown() {
			return false, diags
		}
	}
	return true, diags
}

// httpBackendAttributes are the connection attributes every HTTP backend shares, added to
// its own.
func httpBackendAttributes(own map[string]schema.Attribute) map[string]schema.Attribute {
	own["ca_certificate"] = schema.StringAttribute{Optional: true,
		MarkdownDescription: "PEM-encoded CA certificate that signs the backend's TLS certificate (added to the system roots)."}
	own["insecure_skip_verify"] = schema.BoolAttribute{Optional: true,
		MarkdownDescription: "Skip TLS verification of the backend. Off unless set."}
	own["timeout"] = schema.StringAttribute{Optional: true,
		MarkdownDescription: "Timeout of one query, as a Go duration. Default `5s`, Flagger's."}
	return own
}

// httpBackendModel is the decoded form of httpBackendAttributes; backends embed its fields
// in their model with the same tfsdk tags.
type httpBackendModel struct {
	CACertificate      types.String `tfsdk:"ca_certificate"`
	InsecureSkipVerify types.Bool   `tfsdk:"insecure_skip_verify"`
	Timeout            types.String `tfsdk:"timeout"`
}

// config is the connection of a backend found at `at`.
func (m httpBackendModel) config(at path.Path) (metrics.HTTPConfig, diag.Diagnostics) {
	var diags diag.Diagnostics
	cfg := metrics.HTTPConfig{CACertificate: m.CACertificate.ValueString(), InsecureSkipVerify: m.InsecureSkipVerify.ValueBool(), Timeout: metrics.DefaultTimeout}
	if t := m.Timeout.ValueString(); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			diags.AddAttributeError(at.AtName("timeout"), "Invalid timeout",
				fmt.Sprintf("%s.timeout must be a positive Go duration such as \"5s\", got %q.", at, t))
		}
		cfg.Timeout = d
	}
	return cfg, diags
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
