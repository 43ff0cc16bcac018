package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/dynatrace"
)

// The dynatrace backend: Flagger's `dynatrace` provider type.
func init() {
	registerMetricBackend("dynatrace", metricBackend{
		description: "Dynatrace (Flagger's `dynatrace`): `query` is a metric selector of the Metrics API v2, run with `resolution=Inf` over the " +
			"10 metric intervals before now (`GET /api/v2/metrics/query`); the value is the last series' first value, as in Flagger. No series or value fails the check, as no values.",
		attributes: httpBackendAttributes(map[string]schema.Attribute{
			"address": schema.StringAttribute{Required: true,
				MarkdownDescription: "The environment's URL, such as `https://abc123.live.dynatrace.com` (the API paths are appended)."},
			"api_token": schema.StringAttribute{Required: true, Sensitive: true,
				MarkdownDescription: "Dynatrace API token with the `metrics.read` scope (Flagger's `dynatrace_token`), sent as `Authorization: Api-Token …`."},
		}),
		build: buildDynatraceBackend,
	})
}

type dynatraceModel struct {
	Address  types.String `tfsdk:"address"`
	APIToken types.String `tfsdk:"api_token"`
	httpBackendModel
}

func buildDynatraceBackend(ctx context.Context, obj types.Object, _ metricBackendEnv, at path.Path) (metrics.Querier, []string, diag.Diagnostics) {
	var m dynatraceModel
	known, diags := decodeKnownBackend(ctx, obj, &m)
	if !known {
		return nil, nil, diags
	}
	hc, d := m.config(at)
	if diags.Append(d...); diags.HasError() {
		return nil, nil, diags
	}
	cfg := dynatrace.Config{Address: m.Address.ValueString(), Token: m.APIToken.ValueString(), HTTP: hc}
	client, err := dynatrace.New(cfg)
	if err != nil {
		diags.AddAttributeError(at, "Invalid Dynatrace configuration", fmt.Sprintf("%s: %v.", at, err))
		return nil, nil, diags
	}
	return client, []string{cfg.Token}, diags
}
