package graphite

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
)

// Backend is the graphite metric backend: Flagger's `graphite` provider type.
func Backend() backend.Backend {
	return backend.Backend{
		Description: "Graphite (Flagger's `graphite`): `query` is the render API's parameters, such as " +
			"`target=summarize(app.{{ target }}.errors,'1min','sum')&from=-{{ interval }}` (`GET /render?format=json`); the value is the " +
			"last non-null datapoint, as in Flagger. Only nulls fail the check, as no values. The window is the query's own `from`.",
		Attributes: backend.HTTPAttributes(map[string]schema.Attribute{
			"address": schema.StringAttribute{Required: true,
				MarkdownDescription: "Graphite's URL, such as `http://graphite:8080` (`/render` is appended)."},
			"username": schema.StringAttribute{Optional: true, MarkdownDescription: "Basic-auth user name."},
			"password": schema.StringAttribute{Optional: true, Sensitive: true, MarkdownDescription: "Basic-auth password."},
		}),
		Build: backend.Build("Graphite", newFromModel),
	}
}

type graphiteModel struct {
	Address  types.String `tfsdk:"address"`
	Username types.String `tfsdk:"username"`
	Password types.String `tfsdk:"password"`
	backend.HTTPModel
}

func newFromModel(_ context.Context, m graphiteModel, hc metrics.HTTPConfig) (metrics.Querier, []string, error) {
	cfg := Config{Address: m.Address.ValueString(), Username: m.Username.ValueString(), Password: m.Password.ValueString(), HTTP: hc}
	q, err := New(cfg)
	return q, backend.Secrets(cfg.Password), err
}
