package influxdb

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
)

// Backend is the influxdb metric backend: InfluxDB 2.x's Flux (internal/metrics/influxdb).
func Backend() backend.Backend {
	return backend.Backend{
		Description: "InfluxDB 2.x (Flagger's `influxdb`): the template's `query` is Flux, with its window in the query " +
			"(`|> range(start: -1m)`). The value is the first record's `_value`. As in Flagger, a result without any record reads 0 " +
			"(a Flux `count()` over no rows gives no table at all); a null `_value` or NaN fails the check.",
		Attributes: map[string]schema.Attribute{
			"address": schema.StringAttribute{Required: true, MarkdownDescription: "InfluxDB URL, such as `https://influx.example.com:8086`."},
			"token":   schema.StringAttribute{Required: true, Sensitive: true, MarkdownDescription: "API token with read access to the queried buckets (Flagger's `token`)."},
			"org":     schema.StringAttribute{Required: true, MarkdownDescription: "Organization name (Flagger's `org`)."},
		},
		Build: backend.Build("InfluxDB", newFromModel),
	}
}

type influxDBBackendModel struct {
	Address types.String `tfsdk:"address"`
	Token   types.String `tfsdk:"token"`
	Org     types.String `tfsdk:"org"`
}

func newFromModel(_ context.Context, m influxDBBackendModel, _ metrics.HTTPConfig) (metrics.Querier, []string, error) {
	cfg := Config{Address: m.Address.ValueString(), Token: m.Token.ValueString(), Org: m.Org.ValueString()}
	if cfg.Token == "" {
		return nil, nil, &backend.AttributeError{Attribute: "token", Summary: "Missing InfluxDB token", Detail: "is empty: set an API token."}
	}
	q, err := New(cfg)
	return q, backend.Secrets(cfg.Token), err
}
