package provider

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// The judge of a replica ratio reads the share the apex serves from its EndpointSlices: a
// canary of 3 Ready pods beside a whole primary of 5 at a last step of 40% (3 of 8) is within
// its step, and the same canary beside the 2 pods a node drain left the primary (3 of 5) is
// not, even though nothing the engine records says so (there is no record at all here).
func TestCampaignRatioJudgeFollowsReadyPods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := ratioSchedule(t)
		s.shape.steps = []int{20, 40}
		c := newCampaign(s)
		ctx := t.Context()
		apps, core := c.harness.kube.AppsV1().Deployments(campaignNamespace), c.harness.kube.CoreV1().Services(campaignNamespace)
		for _, d := range []struct {
			name     string
			replicas int32
			image    string
		}{{campaignPrimary, 5, "podinfo:1"}, {campaignTarget, 3, "podinfo:2"}} {
			if _, err := apps.Create(ctx, ratioDeployment(d.name, d.replicas, d.image), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for name, selector := range map[string]map[string]string{
			campaignTarget: {router.LabelApex: campaignTarget}, campaignTarget + "-canary": {"app": campaignTarget}, campaignPrimary: {"app": campaignPrimary},
		} {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: campaignNamespace}, Spec: corev1.ServiceSpec{Selector: selector}}
			if _, err := core.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}

		judgeAWrite := func() []campaignViolation {
			c.judge.checkCanaryCap(apiChange{by: "apply 1", verb: "update", gvr: deploymentsResource, name: campaignTarget}, c.liveTraffic())
			time.Sleep(2 * reactionGrace) // the grace a run gets from its first write
			synctest.Wait()
			c.judge.mu.Lock()
			defer c.judge.mu.Unlock()
			return append([]campaignViolation(nil), c.judge.violations...)
		}

		canary := ratioCanarySide(t, c)
		if canary.pods != 3 || canary.beside != 5 || canary.overCap(40) {
			t.Fatalf("canary side %s with %d pods beside %d: want 3 beside 5, within 40%%", canary, canary.pods, canary.beside)
		}
		if v := judgeAWrite(); len(v) != 0 {
			t.Fatalf("the judge flags a canary at 3 of 8 Ready pods with a last step of 40%%: %v", v)
		}

		c.drainNode(0, "by hand")
		canary = ratioCanarySide(t, c)
		if canary.pods != 3 || canary.beside != 2 {
			t.Fatalf("after the drain the apex serves the canary's %d pods beside %d primary ones, want 3 beside 2", canary.pods, canary.beside)
		}
		v := judgeAWrite()
		if len(v) != 1 || v[0].clause != "clause 2" || !strings.Contains(v[0].text, "podinfo:2 has 60%") {
			t.Fatalf("the judge's entries after the canary got 3 of 5 Ready pods: %v; want one clause 2 entry for podinfo:2 at 60%%", v)
		}
	})
}

// ratioSchedule is the first schedule that draws a replica ratio.
func ratioSchedule(t *testing.T) campaignSchedule {
	t.Helper()
	for seed := int64(1); seed < 1000; seed++ {
		if s := newCampaignSchedule(seed); s.shape.ratioRouted() {
			return s
		}
	}
	t.Fatal("no schedule of seeds 1-999 draws a replica ratio")
	return campaignSchedule{}
}

func ratioDeployment(name string, replicas int32, image string) *appsv1.Deployment {
	labels := map[string]string{"app": name, router.LabelApex: campaignTarget}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: campaignNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "podinfo", Image: image}}}},
		},
	}
}

func ratioCanarySide(t *testing.T, c *campaign) trafficSide {
	t.Helper()
	for _, side := range c.liveTraffic() {
		if side.ratio && side.name == "canary" {
			return side
		}
	}
	t.Fatalf("the judge sees no replica ratio in %s", sidesText(c.liveTraffic()))
	return trafficSide{}
}
