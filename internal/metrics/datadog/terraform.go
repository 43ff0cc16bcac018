package datadog

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
)

// Backend is the datadog metric backend: Flagger's `datadog` provider type.
func Backend() backend.Backend {
	return backend.Backend{
		Description: "Datadog (Flagger's `datadog`): `query` is a Datadog metrics query, run over the 10 metric intervals before now " +
			"(`GET /api/v1/query`); the value is the first series' oldest point, as in Flagger. No series or point fails the check, as no values.",
		Attributes: backend.HTTPAttributes(map[string]schema.Attribute{
			"address": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Datadog API URL of your site. Default `" + DefaultAddress + "`."},
			"api_key": schema.StringAttribute{Required: true, Sensitive: true,
				MarkdownDescription: "Datadog API key (Flagger's `datadog_api_key`), sent as `DD-API-KEY`."},
			"application_key": schema.StringAttribute{Required: true, Sensitive: true,
				MarkdownDescription: "Datadog application key (Flagger's `datadog_application_key`), sent as `DD-APPLICATION-KEY`."},
		}),
		Build: backend.Build("Datadog", newFromModel),
	}
}

type datadogModel struct {
	Address        types.String `tfsdk:"address"`
	APIKey         types.String `tfsdk:"api_key"`
	ApplicationKey types.String `tfsdk:"application_key"`
	backend.HTTPModel
}

func newFromModel(_ context.Context, m datadogModel, hc metrics.HTTPConfig) (metrics.Querier, []string, error) {
	cfg := Config{Address: m.Address.ValueString(), APIKey: m.APIKey.ValueString(), ApplicationKey: m.ApplicationKey.ValueString(), HTTP: hc}
	q, err := New(cfg)
	return q, []string{cfg.APIKey, cfg.ApplicationKey}, err
}
