package web

import (
	"context"
	"maps"
	"net/http"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
)

// Backend is the web metric backend: Argo Rollouts' generic `web` metric provider.
func Backend() backend.Backend {
	return backend.Backend{
		Description: "Any HTTP endpoint that answers JSON, as Argo Rollouts' `web` provider. With `GET`, `query` is a path and query on `url`, " +
			"resolved against it (such as `?service={{ target }}&window={{ interval }}` or `/api/v1/x?y=z`): it cannot name another scheme, host, " +
			"port or user (`http://…`, `//…`, a backslash in the path or an encoded `//` at its start), as written (a plan error) or once rendered " +
			"(an apply error, before any request), since `headers` go where it points. With `POST`, `query` is the JSON body. `json_path` picks the number; " +
			"nothing picked or `null` fails the check, as no values.",
		Attributes: backend.HTTPAttributes(map[string]schema.Attribute{
			"url":    schema.StringAttribute{Required: true, MarkdownDescription: "The endpoint's http or https URL."},
			"method": schema.StringAttribute{Optional: true, MarkdownDescription: "`GET` (default) or `POST`."},
			"headers": schema.MapAttribute{Optional: true, Sensitive: true, ElementType: types.StringType,
				MarkdownDescription: "HTTP headers sent with every request, such as `Authorization`. Sensitive: they may hold credentials."},
			"json_path": schema.StringAttribute{Required: true,
				MarkdownDescription: "JSONPath of the number in the answer, in kubectl's syntax, such as `{$.data.value}`."},
		}),
		Build:      backend.Build("web", newFromModel),
		CheckQuery: checkWebQuery,
	}
}

// checkWebQuery: with GET, the default, the query is a path and query on url. With POST it is
// a body, any text; a method not known yet is checked at apply, an invalid one by New.
func checkWebQuery(obj types.Object, rendered string) error {
	method, ok := obj.Attributes()["method"].(types.String)
	if !ok || method.IsUnknown() || (!method.IsNull() && method.ValueString() != http.MethodGet) {
		return nil
	}
	return CheckQuery(rendered)
}

type webModel struct {
	URL      types.String      `tfsdk:"url"`
	Method   types.String      `tfsdk:"method"`
	Headers  map[string]string `tfsdk:"headers"`
	JSONPath types.String      `tfsdk:"json_path"`
	backend.HTTPModel
}

func newFromModel(_ context.Context, m webModel, hc metrics.HTTPConfig) (metrics.Querier, []string, error) {
	cfg := Config{URL: m.URL.ValueString(), Method: m.Method.ValueString(), Headers: m.Headers, JSONPath: m.JSONPath.ValueString(), HTTP: hc}
	q, err := New(cfg)
	return q, backend.Secrets(slices.Collect(maps.Values(cfg.Headers))...), err
}
