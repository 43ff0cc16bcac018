package influxdb

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
		Build: buildInfluxDBBackend,
	}
}

type influxDBBackendModel struct {
	Address types.String `tfsdk:"address"`
	Token   types.String `tfsdk:"token"`
	Org     types.String `tfsdk:"org"`
}

func buildInfluxDBBackend(ctx context.Context, obj types.Object, _ backend.Env, at path.Path) (metrics.Querier, []string, diag.Diagnostics) {
	var m influxDBBackendModel
	known, diags := backend.DecodeKnown(ctx, obj, &m)
	if !known {
		return nil, nil, diags
	}
	cfg := Config{Address: m.Address.ValueString(), Token: m.Token.ValueString(), Org: m.Org.ValueString()}
	secrets := backend.Secrets(cfg.Token)
	if cfg.Token == "" {
		diags.AddAttributeError(at.AtName("token"), "Missing InfluxDB token", fmt.Sprintf("%s.token is empty: set an API token.", at))
		return nil, nil, diags
	}
	c, err := New(cfg)
	if err != nil {
		diags.AddAttributeError(at, "Invalid InfluxDB configuration", fmt.Sprintf("%s: %s", at, metrics.Redact(err.Error(), secrets...)))
		return nil, nil, diags
	}
	return c, secrets, diags
}
