package dynatrace

import (
	"context"

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
		Build: backend.Build("Dynatrace", newFromModel),
	}
}

type dynatraceModel struct {
	Address  types.String `tfsdk:"address"`
	APIToken types.String `tfsdk:"api_token"`
	backend.HTTPModel
}

func newFromModel(_ context.Context, m dynatraceModel, hc metrics.HTTPConfig) (metrics.Querier, []string, error) {
	cfg := Config{Address: m.Address.ValueString(), Token: m.APIToken.ValueString(), HTTP: hc}
	q, err := New(cfg)
	return q, []string{cfg.Token}, err
}
