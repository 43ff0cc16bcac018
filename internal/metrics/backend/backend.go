// Package backend is the Terraform side of a metric backend: the attributes it adds to a
// metric template, and how it builds its querier from them. Each backend declares its own in
// its package (internal/metrics/<type>, Backend()); internal/metrics/registry lists them, and
// the provider names none.
package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"k8s.io/client-go/rest"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// Backend is one kind of monitoring a metric template can query: the attribute of a metric
// template named after its type (Flagger's provider type).
type Backend struct {
	// Description is the attribute's MarkdownDescription.
	Description string
	// Attributes are the backend object's attributes, each with a MarkdownDescription;
	// credentials are Sensitive.
	Attributes map[string]schema.Attribute
	// Build checks the backend's object, found at `at` (the plan-time checks: the provider is
	// configured at plan), and builds its querier. secrets are the object's credentials, masked
	// in every log line. Build is only called with a known, non-null object.
	Build func(ctx context.Context, obj types.Object, env Env, at path.Path) (q metrics.Querier, secrets []string, diags diag.Diagnostics)
	// CheckQuery, when set, checks at plan what a template's query may be for this backend, on
	// the query rendered with placeholder values (the querier checks the real rendering at
	// apply). obj is the backend's object, whose values may be unknown yet.
	CheckQuery func(obj types.Object, rendered string) error
}

// Env is what a backend may need from the provider's configuration.
type Env struct {
	// PrometheusAddress is the provider's prometheus.address (or CANARY_PROMETHEUS_ADDRESS).
	PrometheusAddress string
	// Kube reaches the cluster, for an address that names a cluster Service; nil in unit tests.
	Kube *rest.Config
}

// Decode decodes a backend's object into its model, a struct with tfsdk tags.
func Decode(ctx context.Context, obj types.Object, model any) diag.Diagnostics {
	return obj.As(ctx, model, basetypes.ObjectAsOptions{})
}

// DecodeKnown decodes a backend's object into model; known is false when it could not, or
// while any of its values is unknown (a plan before the values it reads exist): nothing is
// built from a half-known configuration.
func DecodeKnown(ctx context.Context, obj types.Object, model any) (known bool, diags diag.Diagnostics) {
	if diags = Decode(ctx, obj, model); diags.HasError() {
		return false, diags
	}
	for _, v := range obj.Attributes() {
		if v.IsUnknown() {
			return false, diags
		}
	}
	return true, diags
}

// HTTPAttributes are the connection attributes every HTTP backend shares, added to its own.
func HTTPAttributes(own map[string]schema.Attribute) map[string]schema.Attribute {
	own["ca_certificate"] = schema.StringAttribute{Optional: true,
		MarkdownDescription: "PEM-encoded CA certificate that signs the backend's TLS certificate (added to the system roots)."}
	own["insecure_skip_verify"] = schema.BoolAttribute{Optional: true,
		MarkdownDescription: "Skip TLS verification of the backend. Off unless set."}
	own["timeout"] = schema.StringAttribute{Optional: true,
		MarkdownDescription: "Timeout of one query, as a Go duration. Default `5s`, Flagger's."}
	return own
}

// HTTPModel is the decoded form of HTTPAttributes; backends embed it in their model.
type HTTPModel struct {
	CACertificate      types.String `tfsdk:"ca_certificate"`
	InsecureSkipVerify types.Bool   `tfsdk:"insecure_skip_verify"`
	Timeout            types.String `tfsdk:"timeout"`
}

// Config is the connection of a backend found at `at`.
func (m HTTPModel) Config(at path.Path) (metrics.HTTPConfig, diag.Diagnostics) {
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

// Secrets are the given values that are set: the credentials to mask.
func Secrets(values ...string) []string {
	var out []string
	for _, v := range values {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// httpModel is implemented by a model that embeds HTTPModel.
func (m *HTTPModel) httpModel() *HTTPModel { return m }

// AttributeError is an error of one attribute of a backend's object, which Build reports on
// that attribute.
type AttributeError struct {
	Attribute, Summary, Detail string
}

func (e *AttributeError) Error() string { return e.Detail }

// Build is a Backend's Build for the model M: it decodes the object into M (nothing is built
// while a value is unknown), reads the connection when M embeds HTTPModel, and calls
// newQuerier with them. An error of newQuerier is an attribute error "Invalid <title>
// configuration" naming the object, with the secrets it returned redacted (an *AttributeError
// is reported on its attribute).
func Build[M any](title string, newQuerier func(ctx context.Context, m M, hc metrics.HTTPConfig) (q metrics.Querier, secrets []string, err error)) func(context.Context, types.Object, Env, path.Path) (metrics.Querier, []string, diag.Diagnostics) {
	return func(ctx context.Context, obj types.Object, _ Env, at path.Path) (metrics.Querier, []string, diag.Diagnostics) {
		var m M
		known, diags := DecodeKnown(ctx, obj, &m)
		if !known {
			return nil, nil, diags
		}
		var hc metrics.HTTPConfig
		if h, ok := any(&m).(interface{ httpModel() *HTTPModel }); ok {
			var d diag.Diagnostics
			hc, d = h.httpModel().Config(at)
			if diags.Append(d...); diags.HasError() {
				return nil, nil, diags
			}
		}
		q, secrets, err := newQuerier(ctx, m, hc)
		var attrErr *AttributeError
		switch {
		case errors.As(err, &attrErr):
			diags.AddAttributeError(at.AtName(attrErr.Attribute), attrErr.Summary, fmt.Sprintf("%s.%s %s", at, attrErr.Attribute, attrErr.Detail))
			return nil, nil, diags
		case err != nil:
			diags.AddAttributeError(at, "Invalid "+title+" configuration", fmt.Sprintf("%s: %s.", at, strings.TrimSuffix(metrics.Redact(err.Error(), secrets...), ".")))
			return nil, nil, diags
		}
		return q, secrets, diags
	}
}
