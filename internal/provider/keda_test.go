package provider

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

// ensureKEDACRD installs KEDA's ScaledObject CRD on a stack started before the stack had it
// (applying it again changes nothing).
func (c *testCluster) ensureKEDACRD(t *testing.T) {
	t.Helper()
	files, err := localstack.CRDFiles(c.env.Root)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.env.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if filepath.Base(f) == "keda.sh_scaledobjects.yaml" {
			if err := localstack.InstallCRDs(context.Background(), cfg, []string{f}); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("no keda.sh_scaledobjects.yaml among the stack's CRDs")
}

// TestAccRelease_keda (issue 24): a KEDA-scaled Deployment promotes a good revision and rolls
// back a bad one. No KEDA operator runs on the stack: the test checks the ScaledObjects the
// release writes (the primary's copy, the target's pause) besides the traffic.
func TestAccRelease_keda(t *testing.T) {
	c := testAccStack(t)
	c.ensureKEDACRD(t)
	t.Parallel()
	ns := c.namespace(t)
	c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
	sos := c.dyn.Resource(autoscaler.ScaledObjects).Namespace(ns)
	if _, err := sos.Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": "podinfo"},
		"spec": map[string]any{
			"scaleTargetRef":  map[string]any{"name": "podinfo"},
			"minReplicaCount": int64(2), "maxReplicaCount": int64(4),
			"triggers": []any{map[string]any{"type": "prometheus", "name": "rps", "metadata": map[string]any{
				"serverAddress": "http://prometheus:9090", "threshold": "100",
				"query": `sum(rate(osm_request_total{destination_name="podinfo"}[1m]))`,
			}}},
		},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkScaledObjects := checkCluster(func() error {
		target, err := sos.Get(context.Background(), "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := target.GetAnnotations()[autoscaler.AnnotationPausedReplicas]; got != "0" {
			return fmt.Errorf("the target's ScaledObject is paused at %q, want \"0\" (the canary is scaled to zero)", got)
		}
		primary, err := sos.Get(context.Background(), "podinfo-primary", metav1.GetOptions{})
		if err != nil {
			return err
		}
		name, _, _ := unstructured.NestedString(primary.Object, "spec", "scaleTargetRef", "name")
		minCount, _, _ := unstructured.NestedInt64(primary.Object, "spec", "minReplicaCount")
		triggers, _, _ := unstructured.NestedSlice(primary.Object, "spec", "triggers")
		query, _, _ := unstructured.NestedString(triggers[0].(map[string]any), "metadata", "query")
		if name != "podinfo-primary" || minCount != 2 || query != `sum(rate(osm_request_total{destination_name="podinfo-primary"}[1m]))` {
			return fmt.Errorf("the primary's ScaledObject scales %q from %d on %q; want podinfo-primary from 2 on the primary's query", name, minCount, query)
		}
		if _, held := primary.GetAnnotations()[autoscaler.AnnotationHeldMinReplicas]; held {
			return fmt.Errorf("the primary's ScaledObject still holds its minimum")
		}
		return nil
	})
	config := releaseConfig(ns, `target_ref = { name = "podinfo" }`, healthyAnalysis,
		`autoscaler_ref = { api_version = "keda.sh/v1alpha1", kind = "ScaledObject", name = "podinfo" }`)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: config, Check: resource.ComposeAggregateTestCheckFunc(checkScaledObjects, c.checkReplicas(ns, "podinfo", 0))},
			{
				PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil) },
				Config:    config,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Succeeded"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					c.checkSplit(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					checkScaledObjects,
				),
			},
			{
				PreConfig: func() {
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.2", map[string]string{"sim.canary-release.dev/error-rate": "1"})
				},
				Config:      config,
				ExpectError: wrappedPattern(`metric request-success-rate returned`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					c.checkSplit(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					checkScaledObjects,
				),
			},
			{
				PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil) },
				Config:    config,
				Check:     resource.ComposeAggregateTestCheckFunc(c.checkSplit(ns, 100, 0), checkScaledObjects),
			},
		},
	})
}
