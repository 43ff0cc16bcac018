package datadog

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
		Build: buildDatadogBackend,
	}
}

type datadogModel struct {
	Address        types.String `tfsdk:"address"`
	APIKey         types.String `tfsdk:"api_key"`
	ApplicationKey types.String `tfsdk:"application_key"`
	backend.HTTPModel
}

func buildDatadogBackend(ctx context.Context, obj types.Object, _ backend.Env, at path.Path) (metrics.Querier, []string, diag.Diagnostics) {
	var m datadogModel
	known, diags := backend.DecodeKnown(ctx, obj, &m)
	if !known {
		return nil, nil, diags
	}
	hc, d := m.Config(at)
	if diags.Append(d...); diags.HasError() {
		return nil, nil, diags
	}
	cfg := Config{Address: m.Address.ValueString(), APIKey: m.APIKey.ValueString(), ApplicationKey: m.ApplicationKey.ValueString(), HTTP: hc}
	client, err := New(cfg)
	if err != nil {
		diags.AddAttributeError(at, "Invalid Datadog configuration", fmt.Sprintf("%s: %v.", at, err))
		return nil, nil, diags
	}
	return client, []string{cfg.APIKey, cfg.ApplicationKey}, diags
}
