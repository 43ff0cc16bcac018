package provider

import (
	"context"
	"net/url"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/canary-release/terraform-provider-canary/internal/pushmetrics"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// PushgatewayModel is the provider's pushgateway setting: where each run pushes Flagger's
// series (see internal/pushmetrics).
type PushgatewayModel struct {
	URL      types.String      `tfsdk:"url"`
	Job      types.String      `tfsdk:"job"`
	Username types.String      `tfsdk:"username"`
	Password types.String      `tfsdk:"password"`
	Headers  map[string]string `tfsdk:"headers"`
}

func pushgatewayAttribute() schema.Attribute {
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "A Prometheus Pushgateway each release pushes Flagger's series to as it runs (`flagger_canary_status`, " +
			"`flagger_canary_weight`, `flagger_canary_metric_analysis`, `flagger_canary_duration_seconds`, and `canary_release_phase`), " +
			"grouped by `job`, `namespace` and `name`, for Flagger's dashboards and alerts and the dashboard in `docs/grafana-dashboard.json`. " +
			"Pushes are best effort: a Pushgateway that does not answer never slows or fails a release. Prometheus scrapes the Pushgateway " +
			"with `honor_labels: true`. No setting or credential is pushed. " +
			"See the [Prometheus and Grafana guide](guides/monitoring.md).",
		Attributes: map[string]schema.Attribute{
			"url": schema.StringAttribute{Required: true,
				MarkdownDescription: "The Pushgateway's base URL, reachable from where Terraform runs, e.g. `http://pushgateway.example:9091`."},
			"job": schema.StringAttribute{Optional: true,
				MarkdownDescription: "The `job` label of the grouping key. Default `" + pushmetrics.DefaultJob + "`."},
			"username": schema.StringAttribute{Optional: true, MarkdownDescription: "Username for HTTP basic authentication."},
			"password": schema.StringAttribute{Optional: true, Sensitive: true, MarkdownDescription: "Password for HTTP basic authentication."},
			"headers": schema.MapAttribute{Optional: true, Sensitive: true, ElementType: types.StringType,
				MarkdownDescription: "Headers sent with each push, e.g. `Authorization`."},
		},
	}
}

// pushgatewayConfig checks the setting; nil when it is not set. The second value lists the
// credentials to mask in the logs.
func pushgatewayConfig(m *PushgatewayModel) (*pushmetrics.Config, []string, diag.Diagnostics) {
	var diags diag.Diagnostics
	if m == nil {
		return nil, nil, nil
	}
	at := path.Root("pushgateway").AtName("url")
	raw := m.URL.ValueString()
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		diags.AddAttributeError(at, "Invalid pushgateway.url",
			"pushgateway.url must be an http:// or https:// URL with a host, such as http://pushgateway.example:9091.")
		return nil, nil, diags
	}
	cfg := &pushmetrics.Config{URL: raw, Job: m.Job.ValueString(), Username: m.Username.ValueString(),
		Password: m.Password.ValueString(), Headers: m.Headers}
	var secrets []string
	if cfg.Password != "" {
		secrets = append(secrets, cfg.Password)
	}
	if p, ok := u.User.Password(); ok && p != "" {
		secrets = append(secrets, p)
	}
	for _, v := range m.Headers {
		if v != "" {
			secrets = append(secrets, v)
		}
	}
	return cfg, secrets, diags
}

// withPush adds the Pushgateway to a run's progress reporter when the provider has one: the
// lines still go to report, and their values to the release's series.
func (c *clients) withPush(ctx context.Context, rel rollout.Release, report func(rollout.Progress)) func(rollout.Progress) {
	if c.push == nil {
		return report
	}
	series := pushmetrics.NewRelease(*c.push, rel.Namespace, rel.Name, rel.Target, time.Now())
	series.OnError = func(err error) {
		tflog.SubsystemWarn(ctx, logRollout, "The release's series were not pushed", map[string]any{
			"namespace": rel.Namespace, "name": rel.Name, "error": err.Error()})
	}
	return func(p rollout.Progress) {
		report(p)
		series.Observe(ctx, p, time.Now())
	}
}

// forgetSeries deletes a destroyed release's group from the Pushgateway, best effort: a
// failure is a warning in the log, never the destroy's error.
func (c *clients) forgetSeries(ctx context.Context, rel rollout.Release) {
	if c.push == nil {
		return
	}
	if err := pushmetrics.Delete(ctx, *c.push, rel.Namespace, rel.Name); err != nil {
		tflog.SubsystemWarn(ctx, logRollout, "The release's series were not deleted from the Pushgateway", map[string]any{
			"namespace": rel.Namespace, "name": rel.Name, "error": err.Error()})
	}
}
