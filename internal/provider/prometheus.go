package provider

import (
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// prometheusAttributes are the attributes of a Prometheus connection: the provider's
// `prometheus` and each metric template's. addressDescription says what an unset address
// falls back to.
func prometheusAttributes(addressDescription string) map[string]schema.Attribute {
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

// defaultPrometheusTimeout bounds one query when `timeout` is unset.
const defaultPrometheusTimeout = 30 * time.Second

// prometheusConfig applies a `prometheus` object, found at `at`, over base: base's address
// stays when the object sets none; nothing else of base is kept but its timeout default.
// A nil object gives base.
func prometheusConfig(pm *PrometheusModel, base metrics.Config, at path.Path) (metrics.Config, diag.Diagnostics) {
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

// prometheusSecrets are the credentials of a connection, masked in every log line.
func prometheusSecrets(mc metrics.Config) []string {
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
