package splunk

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
)

// Backend is the splunk metric backend: Splunk Observability Cloud's SignalFlow (internal/metrics/splunk).
func Backend() backend.Backend {
	return backend.Backend{
		Description: "Splunk Observability Cloud, formerly SignalFx (Flagger's `splunk`): the template's `query` is a SignalFlow " +
			"program that publishes one stream, as in Flagger. Flagger runs it over SignalFlow's WebSocket API; this backend uses " +
			"SignalFlow's HTTP API, `POST /v2/signalflow/execute`, which runs the same program and streams the same data messages. " +
			"As in Flagger, the program runs over the ten metric intervals before now and the value is its last non-null datapoint; " +
			"none fails the check, and datapoints of several time series are an error.",
		Attributes: map[string]schema.Attribute{
			"address": schema.StringAttribute{Required: true,
				MarkdownDescription: "API address, `https://api.<realm>.signalfx.com`, as in Flagger. SignalFlow runs on `stream.<realm>`; an address whose host does not start with `api.` serves both."},
			"token": schema.StringAttribute{Required: true, Sensitive: true, MarkdownDescription: "Access token (Flagger's `sf_token_key`)."},
		},
		Build: backend.Build("Splunk", newFromModel),
	}
}

type splunkBackendModel struct {
	Address types.String `tfsdk:"address"`
	Token   types.String `tfsdk:"token"`
}

func newFromModel(_ context.Context, m splunkBackendModel, _ metrics.HTTPConfig) (metrics.Querier, []string, error) {
	cfg := Config{Address: m.Address.ValueString(), Token: m.Token.ValueString()}
	q, err := New(cfg)
	return q, backend.Secrets(cfg.Token), err
}
