package provider

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hpaRushWitness plays the primary's autoscaler during an analysis: once the canary has
// weight, it scales the primary down to one replica, as an HPA does when the canary takes
// load (the stack has no metrics API, so no HPA scales on load there). It notes the primary's
// Ready replicas each time the TrafficSplit gives the primary all traffic back.
type hpaRushWitness struct {
	mu       sync.Mutex
	scaled   bool
	atReturn []int32
}

func (c *testCluster) playHPARush(t *testing.T, ns string) *hpaRushWitness {
	t.Helper()
	w := &hpaRushWitness{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	deployments := c.kube.AppsV1().Deployments(ns)
	go func() {
		split := false
		for ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			_, canary, err := c.splitWeights(ns, "podinfo")
			if err != nil {
				continue
			}
			switch {
			case canary > 0 && !split:
				split = true
				_, err := deployments.UpdateScale(ctx, "podinfo-primary", &autoscalingv1.Scale{
					ObjectMeta: metav1.ObjectMeta{Name: "podinfo-primary", Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 1},
				}, metav1.UpdateOptions{})
				w.mu.Lock()
				w.scaled = w.scaled || err == nil
				w.mu.Unlock()
			case canary == 0 && split:
				split = false
				if p, err := deployments.Get(ctx, "podinfo-primary", metav1.GetOptions{}); err == nil {
					w.mu.Lock()
					w.atReturn = append(w.atReturn, p.Status.ReadyReplicas)
					w.mu.Unlock()
				}
			}
		}
	}()
	return w
}

// check asserts that the primary was scaled down during the analysis and had at least want
// Ready replicas every time the traffic came back to it.
func (w *hpaRushWitness) check(want int32) resource.TestCheckFunc {
	return checkCluster(func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.scaled {
			return fmt.Errorf("the primary was never scaled down during the analysis")
		}
		if len(w.atReturn) == 0 {
			return fmt.Errorf("the traffic never came back to the primary")
		}
		for _, n := range w.atReturn {
			if n < want {
				return fmt.Errorf("the traffic came back to the primary with %d Ready replicas (at each return: %v), want its %d pre-rollout ones", n, w.atReturn, want)
			}
		}
		w.atReturn = nil
		w.scaled = false
		return nil
	})
}

// TestAccRelease_hpaRush (issue 24): the primary's autoscaler scales it down as the canary
// takes traffic; at promotion and at rollback the primary has its pre-rollout replicas Ready
// before the traffic returns to it, and its autoscaler's minimum is put back afterwards.
func TestAccRelease_hpaRush(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	d := podinfoDeployment(ns, "podinfo:6.0.0", nil)
	four := int32(4)
	d.Spec.Replicas = &four
	c.createDeployment(t, d)
	hpas := c.kube.AutoscalingV2().HorizontalPodAutoscalers(ns)
	one := int32(1)
	if _, err := hpas.Create(context.Background(), &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "podinfo"},
			MinReplicas:    &one, MaxReplicas: 6,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	minPutBack := checkCluster(func() error {
		h, err := hpas.Get(context.Background(), "podinfo-primary", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if *h.Spec.MinReplicas != 1 || h.Annotations["canary-release.dev/held-min-replicas"] != "" {
			return fmt.Errorf("the primary's HPA has min %d and annotations %v after the run, want its min 1 put back", *h.Spec.MinReplicas, h.Annotations)
		}
		return nil
	})
	config := releaseConfig(ns, `target_ref = { name = "podinfo" }`, healthyAnalysis, `autoscaler_ref = { name = "podinfo" }`)
	var rush *hpaRushWitness
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: config, Check: c.checkReplicas(ns, "podinfo-primary", 4)},
			{
				PreConfig: func() {
					rush = c.playHPARush(t, ns)
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
				},
				Config: config,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Succeeded"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					c.checkSplit(ns, 100, 0),
					func(s *terraform.State) error { return rush.check(4)(s) },
					minPutBack,
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
					func(s *terraform.State) error { return rush.check(4)(s) },
					minPutBack,
				),
			},
			{
				// The user sets the target back to the promoted revision: nothing to release.
				PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil) },
				Config:    config,
				Check:     resource.ComposeAggregateTestCheckFunc(c.checkSplit(ns, 100, 0), minPutBack),
			},
		},
	})
}
