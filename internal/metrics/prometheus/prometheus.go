// Package prometheus is the Terraform side of the Prometheus metric backend: the attributes of
// a Prometheus connection, shared by the provider's `prometheus` and each metric template's,
// and the backend that queries a template's own Prometheus (the client is metrics.Client).
package prometheus

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
)

// Model is a decoded Prometheus connection: the provider's `prometheus` and each metric
// template's.
type Model struct {
	Address            types.String      `tfsdk:"address"`
	BearerToken        types.String      `tfsdk:"bearer_token"`
	Username           types.String      `tfsdk:"username"`
	Password           types.String      `tfsdk:"password"`
	Headers            map[string]string `tfsdk:"headers"`
	CACertificate      types.String      `tfsdk:"ca_certificate"`
	InsecureSkipVerify types.Bool        `tfsdk:"insecure_skip_verify"`
	Timeout            types.String      `tfsdk:"timeout"`
}

// Backend is the prometheus metric backend: a template's own Prometheus, with the provider's
// `prometheus` attributes. A template that sets no backend uses the provider's client instead.
func Backend() backend.Backend {
	return backend.Backend{
		Description: "The Prometheus this template queries (Flagger's `spec.provider`), with the provider's `prometheus` " +
			"attributes. Unset, with no other backend set: the provider's Prometheus. Only the address falls back to the provider's; credentials, headers " +
			"and TLS settings are this object's own. An address that names a cluster Service is reached through the API server's service proxy.",
		Attributes: Attributes("Prometheus URL. Falls back to the provider's `prometheus.address` (or `CANARY_PROMETHEUS_ADDRESS`)."),
		Build:      build,
	}
}

func build(ctx context.Context, obj types.Object, env backend.Env, at path.Path) (metrics.Querier, []string, diag.Diagnostics) {
	var pm Model
	diags := backend.Decode(ctx, obj, &pm)
	if diags.HasError() {
		return nil, nil, diags
	}
	mc, d := Configure(&pm, metrics.Config{Address: env.PrometheusAddress, Timeout: DefaultTimeout}, at)
	diags.Append(d...)
	if d.HasError() {
		return nil, nil, diags
	}
	if mc.Address == "" {
		diags.AddAttributeError(at.AtName("address"), "Missing Prometheus address",
			fmt.Sprintf("%s sets no address, and neither the provider's prometheus.address nor CANARY_PROMETHEUS_ADDRESS gives one.", at))
		return nil, nil, diags
	}
	client, err := metrics.NewClient(mc, env.Kube)
	if err != nil {
		diags.AddAttributeError(at, "Invalid Prometheus configuration", fmt.Sprintf("%s: %v", at, err))
		return nil, nil, diags
	}
	return client, Secrets(mc), diags
}

// Attributes are the attributes of a Prometheus connection: the provider's
// `prometheus` and each metric template's. addressDescription says what an unset address
// falls back to.
func Attributes(addressDescription string) map[string]schema.Attribute {
	str := func(desc string, sensitive bool) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, Sensitive: sensitive, MarkdownDescription: desc}
	}
	return map[string]schema.Attribute{
		"address":      str(addressDescription, false),
		"bearer_token": str("Bearer token sent with every query.", true),
		"username":     str("Basic-auth user name.", false),
		"password":     str("Basic-auth password.", true),
		"headers": schema.MapAttribute{Optional: true, Sensitive: true, ElementType: types.StringType,
			MarkdownDescription: "Extra HTTP headers sent with every query (e.g. `X-Scope-OrgID`)."},
		"ca_certificate": str("PEM-encoded CA certificate that signs Prometheus' TLS certificate.", false),
		"insecure_skip_verify": schema.BoolAttribute{Optional: true,
			MarkdownDescription: "Skip TLS verification of Prometheus. Off unless set."},
		"timeout": str("Timeout of one query, as a Go duration. Default `30s`.", false),
	}
}

// DefaultTimeout bounds one query when `timeout` is unset.
const DefaultTimeout = 30 * time.Second

// Configure applies a `prometheus` object, found at `at`, over base: base's address
// stays when the object sets none; nothing else of base is kept but its timeout default.
// A nil object gives base.
func Configure(pm *Model, base metrics.Config, at path.Path) (metrics.Config, diag.Diagnostics) {
	var diags diag.Diagnostics
	mc := base
	if pm == nil {
		return mc, diags
	}
	if v := pm.Address.ValueString(); v != "" {
		mc.Address = v
	}
	mc.BearerToken = pm.BearerToken.ValueString()
	mc.Username = pm.Username.ValueString()
	mc.Password = pm.Password.ValueString()
	mc.Headers = pm.Headers
	mc.CACertificate = pm.CACertificate.ValueString()
	mc.InsecureSkipVerify = pm.InsecureSkipVerify.ValueBool()
	if t := pm.Timeout.ValueString(); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			diags.AddAttributeError(at.AtName("timeout"), "Invalid timeout",
				at.String()+".timeout must be a positive Go duration such as \"30s\", got "+t+".")
			return mc, diags
		}
		mc.Timeout = d
	}
	return mc, diags
}

// Secrets are the credentials of a connection, masked in every log line.
func Secrets(mc metrics.Config) []string {
	var secrets []string
	for _, s := range []string{mc.BearerToken, mc.Password} {
		if s != "" {
			secrets = append(secrets, s)
		}
	}
	for _, v := range mc.Headers {
		if v != "" {
			secrets = append(secrets, v)
		}
	}
	return secrets
}
