package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/datadog"
)

// The datadog backend: Flagger's `datadog` provider type.
func init() {
	registerMetricBackend("datadog", metricBackend{
		description: "Datadog (Flagger's `datadog`): `query` is a Datadog metrics query, run over the 10 metric intervals before now " +
			"(`GET /api/v1/query`); the value is the first series' oldest point, as in Flagger. No series or point fails the check, as no values.",
		attributes: httpBackendAttributes(map[string]schema.Attribute{
			"address": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Datadog API URL of your site. Default `" + datadog.DefaultAddress + "`."},
			"api_key": schema.StringAttribute{Required: true, Sensitive: true,
				MarkdownDescription: "Datadog API key (Flagger's `datadog_api_key`), sent as `DD-API-KEY`."},
			"application_key": schema.StringAttribute{Required: true, Sensitive: true,
				MarkdownDescription: "Datadog application key (Flagger's `datadog_application_key`), sent as `DD-APPLICATION-KEY`."},
		}),
		build: buildDatadogBackend,
	})
}

type datadogModel struct {
	Address        types.String `tfsdk:"address"`
	APIKey         types.String `tfsdk:"api_key"`
	ApplicationKey types.String `tfsdk:"application_key"`
	httpBackendModel
}

func buildDatadogBackend(ctx context.Context, obj types.Object, _ metricBackendEnv, at path.Path) (metrics.Querier, []string, diag.Diagnostics) {
	var m datadogModel
	known, diags := decodeKnownBackend(ctx, obj, &m)
	if !known {
		return nil, nil, diags
	}
	hc, d := m.config(at)
	if diags.Append(d...); diags.HasError() {
		return nil, nil, diags
	}
	cfg := datadog.Config{Address: m.Address.ValueString(), APIKey: m.APIKey.ValueString(), ApplicationKey: m.ApplicationKey.ValueString(), HTTP: hc}
	client, err := datadog.New(cfg)
	if err != nil {
		diags.AddAttributeError(at, "Invalid Datadog configuration", fmt.Sprintf("%s: %v.", at, err))
		return nil, nil, diags
	}
	return client, []string{cfg.APIKey, cfg.ApplicationKey}, diags
}
