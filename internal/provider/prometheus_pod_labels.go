package provider

import (
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/prometheus"
)

// ProviderPrometheusModel is the provider's own `prometheus`: a metric template's, plus the
// labelling of the application's series that the built-in checks read.
type ProviderPrometheusModel struct {
	prometheus.Model
	NamespaceLabel types.String `tfsdk:"namespace_label"`
	PodLabel       types.String `tfsdk:"pod_label"`
}

// podLabels is the configured labelling; zero when unset, so that each run finds it.
func (m ProviderPrometheusModel) podLabels() metrics.PodLabels {
	return metrics.PodLabels{Namespace: m.NamespaceLabel.ValueString(), Pod: m.PodLabel.ValueString()}
}

// prometheusLabelName is Prometheus's label name syntax.
var prometheusLabelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

func providerPrometheusAttributes() map[string]schema.Attribute {
	attrs := prometheus.Attributes("Prometheus URL. Falls back to `CANARY_PROMETHEUS_ADDRESS`.")
	label := func(desc string, other string) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, MarkdownDescription: desc,
			Validators: []validator.String{
				stringvalidator.RegexMatches(prometheusLabelName, "must be a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)"),
				stringvalidator.AlsoRequires(path.MatchRelative().AtParent().AtName(other)),
			}}
	}
	attrs["namespace_label"] = label("The label that carries a pod's namespace on the application's own series, which the "+
		"built-in checks of `gatewayapi`, `kubernetes` and StatefulSet releases read. Set it with `pod_label`. Unset, each run "+
		"reads Flagger's labels (`kubernetes_namespace`, `kubernetes_pod_name`) where the series carry them, and else the labels "+
		"of kube-prometheus-stack's and prometheus-community/prometheus's pod scraping (`namespace`, `pod`), and says so.", "pod_label")
	attrs["pod_label"] = label("The label that carries a pod's name on the application's own series (`kubernetes_pod_name` "+
		"in Flagger's relabelling, `pod` in kube-prometheus-stack and prometheus-community/prometheus). Set it with "+
		"`namespace_label`.", "namespace_label")
	return attrs
}
