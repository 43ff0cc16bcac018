package provider

import (
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// TestPrometheusPodLabelsAreCheckedAtPlan: the labels of the application's series are set in
// pairs and must be Prometheus label names; a plan says which attribute and what is allowed.
func TestPrometheusPodLabelsAreCheckedAtPlan(t *testing.T) {
	kubeconfig := offlineKubeconfig(t)
	withLabels := func(labels string) string {
		return strings.Replace(invalidConfig(kubeconfig, nil, nil),
			`prometheus = { address = "http://127.0.0.1:1" }`,
			`prometheus = { address = "http://127.0.0.1:1"`+labels+` }`, 1)
	}
	t.Run("both set", func(t *testing.T) {
		t.Parallel()
		resource.UnitTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{{
				Config: withLabels(`, namespace_label = "namespace", pod_label = "pod"`), PlanOnly: true, ExpectNonEmptyPlan: true,
			}},
		})
	})
	for name, tc := range map[string]struct{ labels, want string }{
		"pod_label alone":       {`, pod_label = "pod"`, `Attribute "prometheus.namespace_label" must be specified when "prometheus.pod_label" is specified`},
		"not a label name":      {`, namespace_label = "kube-namespace", pod_label = "pod"`, `prometheus.namespace_label must be a Prometheus label name`},
		"namespace_label alone": {`, namespace_label = "namespace"`, `Attribute "prometheus.pod_label" must be specified`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{{
					Config: withLabels(tc.labels), PlanOnly: true,
					ExpectError: phrasesRegexp(strings.Fields(tc.want)),
				}},
			})
		})
	}
}
