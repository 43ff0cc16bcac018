package dynatrace

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
)

// Backend is the dynatrace metric backend: Flagger's `dynatrace` provider type.
func Backend() backend.Backend {
	return backend.Backend{
		Description: "Dynatrace (Flagger's `dynatrace`): `query` is a metric selector of the Metrics API v2, run with `resolution=Inf` over the " +
			"10 metric intervals before now (`GET /api/v2/metrics/query`); the value is the last series' first value, as in Flagger. No series or value fails the check, as no values.",
		Attributes: backend.HTTPAttributes(map[string]schema.Attribute{
			"address": schema.StringAttribute{Required: true,
				MarkdownDescription: "The environment's URL, such as `https://abc123.live.dynatrace.com` (the API paths are appended)."},
			"api_token": schema.StringAttribute{Required: true, Sensitive: true,
				MarkdownDescription: "Dynatrace API token with the `metrics.read` scope (Flagger's `dynatrace_token`), sent as `Authorization: Api-Token …`."},
		}),
		Build: buildDynatraceBackend,
	}
}

type dynatraceModel struct {
	Address  types.String `tfsdk:"address"`
	APIToken types.String `tfsdk:"api_token"`
	backend.HTTPModel
}

func buildDynatraceBackend(ctx context.Context, obj types.Object, _ backend.Env, at path.Path) (metrics.Querier, []string, diag.Diagnostics) {
	var m dynatraceModel
	known, diags := backend.DecodeKnown(ctx, obj, &m)
	if !known {
		return nil, nil, diags
	}
	hc, d := m.Config(at)
	if diags.Append(d...); diags.HasError() {
		return nil, nil, diags
	}
	cfg := Config{Address: m.Address.ValueString(), Token: m.APIToken.ValueString(), HTTP: hc}
	client, err := New(cfg)
	if err != nil {
		diags.AddAttributeError(at, "Invalid Dynatrace configuration", fmt.Sprintf("%s: %v.", at, err))
		return nil, nil, diags
	}
	return client, []string{cfg.Token}, diags
}
