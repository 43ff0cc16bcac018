package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// The prometheus backend: a template's own Prometheus, with the provider's `prometheus`
// attributes. A template that sets no backend uses the provider's client instead.
func init() {
	registerMetricBackend("prometheus", metricBackend{
		description: "The Prometheus this template queries (Flagger's `spec.provider`), with the provider's `prometheus` " +
			"attributes. Unset, with no other backend set: the provider's Prometheus. Only the address falls back to the provider's; credentials, headers " +
			"and TLS settings are this object's own. An address that names a cluster Service is reached through the API server's service proxy.",
		attributes: prometheusAttributes("Prometheus URL. Falls back to the provider's `prometheus.address` (or `CANARY_PROMETHEUS_ADDRESS`)."),
		build:      buildPrometheusBackend,
	})
}

func buildPrometheusBackend(ctx context.Context, obj types.Object, env metricBackendEnv, at path.Path) (metrics.Querier, []string, diag.Diagnostics) {
	var pm PrometheusModel
	diags := decodeBackendObject(ctx, obj, &pm)
	if diags.HasError() {
		return nil, nil, diags
	}
	mc, d := prometheusConfig(&pm, metrics.Config{Address: env.prometheusAddress, Timeout: defaultPrometheusTimeout}, at)
	diags.Append(d...)
	if d.HasError() {
		return nil, nil, diags
	}
	if mc.Address == "" {
		diags.AddAttributeError(at.AtName("address"), "Missing Prometheus address",
			fmt.Sprintf("%s sets no address, and neither the provider's prometheus.address nor CANARY_PROMETHEUS_ADDRESS gives one.", at))
		return nil, nil, diags
	}
	client, err := metrics.NewClient(mc, env.kube)
	if err != nil {
		diags.AddAttributeError(at, "Invalid Prometheus configuration", fmt.Sprintf("%s: %v", at, err))
		return nil, nil, diags
	}
	return client, prometheusSecrets(mc), diags
}
