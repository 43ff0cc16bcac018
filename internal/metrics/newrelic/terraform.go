package newrelic

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
)

// Backend is the newrelic metric backend: Flagger's `newrelic` provider type, through NerdGraph.
func Backend() backend.Backend {
	return backend.Backend{
		Description: "New Relic (Flagger's `newrelic`): `query` is NRQL without a `SINCE` clause; ` SINCE <metric interval> seconds ago` is appended, as in Flagger. " +
			"It is posted to NerdGraph, New Relic's GraphQL API (Flagger's Insights query API is retired). It must give one row with one number " +
			"(or a column named `result`); no row or null fails the check, as no values.",
		Attributes: backend.HTTPAttributes(map[string]schema.Attribute{
			"account_id": schema.Int64Attribute{Required: true,
				MarkdownDescription: "The New Relic account the NRQL runs in (Flagger's `newrelic_account_id`)."},
			"api_key": schema.StringAttribute{Required: true, Sensitive: true,
				MarkdownDescription: "A New Relic user key (`NRAK-…`), sent as `API-Key`. Flagger's `newrelic_query_key` was an Insights key, which NerdGraph does not take."},
			"region": schema.StringAttribute{Optional: true,
				MarkdownDescription: "New Relic's data centre: `US` (default), `EU`, `JP` or `GOV`."},
			"address": schema.StringAttribute{Optional: true,
				MarkdownDescription: "NerdGraph URL, replacing the region's (such as `https://api.newrelic.com/graphql`)."},
		}),
		Build: backend.Build("New Relic", newFromModel),
	}
}

type newRelicModel struct {
	AccountID types.Int64  `tfsdk:"account_id"`
	APIKey    types.String `tfsdk:"api_key"`
	Region    types.String `tfsdk:"region"`
	Address   types.String `tfsdk:"address"`
	backend.HTTPModel
}

func newFromModel(_ context.Context, m newRelicModel, hc metrics.HTTPConfig) (metrics.Querier, []string, error) {
	cfg := Config{AccountID: int(m.AccountID.ValueInt64()), APIKey: m.APIKey.ValueString(), Region: m.Region.ValueString(),
		Address: m.Address.ValueString(), HTTP: hc}
	q, err := New(cfg)
	return q, []string{cfg.APIKey}, err
}
