package stackdriver

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
)

// Backend is the stackdriver metric backend: Google Cloud Monitoring's MQL (internal/metrics/stackdriver).
func Backend() backend.Backend {
	return backend.Backend{
		Description: "Google Cloud Monitoring (Flagger's `stackdriver`): the template's `query` is MQL, as in Flagger, with its " +
			"window in the query (`| within 1m`). Flagger calls QueryTimeSeries over gRPC; this backend calls the same method's REST " +
			"form, `POST /v3/projects/<project>/timeSeries:query`, which takes the same MQL and answers the same time series, so a " +
			"Flagger query gives the same number. The value is the first point of the first time series; none fails the check.",
		Attributes: map[string]schema.Attribute{
			"project": schema.StringAttribute{Required: true, MarkdownDescription: "Google Cloud project ID (Flagger's `project`)."},
			"service_account_key": schema.StringAttribute{Required: true, Sensitive: true,
				MarkdownDescription: "A service account's JSON key (Flagger's `serviceAccountKey`), with the `monitoring.read` scope's rights (roles/monitoring.viewer)."},
			"endpoint": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Cloud Monitoring API URL. Default `" + DefaultEndpoint + "`."},
		},
		Build: backend.Build("Cloud Monitoring", newFromModel),
	}
}

type stackdriverBackendModel struct {
	Project           types.String `tfsdk:"project"`
	ServiceAccountKey types.String `tfsdk:"service_account_key"`
	Endpoint          types.String `tfsdk:"endpoint"`
}

func newFromModel(_ context.Context, m stackdriverBackendModel, _ metrics.HTTPConfig) (metrics.Querier, []string, error) {
	cfg := Config{Project: m.Project.ValueString(), ServiceAccountKey: m.ServiceAccountKey.ValueString(), Endpoint: m.Endpoint.ValueString()}
	q, err := New(cfg)
	return q, backend.Secrets(cfg.ServiceAccountKey), err
}
