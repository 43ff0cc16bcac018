package rollout

import (
	"context"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/configs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The target's labels and annotations with an included prefix reach the primary and its pods;
// a change of them starts no analysis and is no drift, and the primary takes it when written.
func TestCopiedLabelsReachThePrimary(t *testing.T) {
	ctx := context.Background()
	cs := newCluster()
	d := podinfo("podinfo:1", 2)
	d.Labels = map[string]string{"app.kubernetes.io/part-of": "shop", "team": "a", "app.kubernetes.io/managed-by": "Helm"}
	d.Annotations = map[string]string{"app.kubernetes.io/note": "x", "other": "y", "deployment.kubernetes.io/revision": "3"}
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRouter{}
	e := &Engine{Kube: cs, Router: rt, Metrics: querierFunc(func(context.Context, string) (float64, error) { return 100, nil }), DrainDelay: 1}
	rel := testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Metrics: []Metric{successRate(99)}})
	rel.IncludeLabelPrefix = configs.DefaultIncludeLabelPrefix
	st, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(partOf string) {
		t.Helper()
		p := deployment(t, cs, "podinfo-primary")
		for where, labels := range map[string]map[string]string{"the primary": p.Labels, "the primary's pods": p.Spec.Template.Labels} {
			if labels["app.kubernetes.io/part-of"] != partOf || labels["team"] != "" {
				t.Errorf("%s has labels %v, want app.kubernetes.io/part-of=%s and no team", where, labels, partOf)
			}
		}
		if p.Labels["app.kubernetes.io/managed-by"] != "terraform-provider-canary" {
			t.Errorf("the primary's managed-by is %q: the release's own label was overwritten", p.Labels["app.kubernetes.io/managed-by"])
		}
		for where, a := range map[string]map[string]string{"the primary": p.Annotations, "the primary's pods": p.Spec.Template.Annotations} {
			if a["app.kubernetes.io/note"] != "x" || a["other"] != "" || a["deployment.kubernetes.io/revision"] == "3" {
				t.Errorf("%s has annotations %v, want app.kubernetes.io/note=x only of the target's", where, a)
			}
		}
	}
	check("shop")

	w := workload{kube: cs, rel: rel}
	before, _ := w.revision(ctx, deployment(t, cs, "podinfo"))
	target := deployment(t, cs, "podinfo")
	target.Labels["app.kubernetes.io/part-of"] = "mall"
	if _, err := cs.AppsV1().Deployments("test").Update(ctx, target, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if after, _ := w.revision(ctx, deployment(t, cs, "podinfo")); after != before {
		t.Errorf("a copied label changed the revision: %s, then %s", before, after)
	}
	if drift, err := e.Drift(ctx, rel, st); err != nil || len(drift) != 0 {
		t.Errorf("drift %v (%v): a copied label is not an edit of the primary", drift, err)
	}
	rt.history = nil
	if st, err = e.Apply(ctx, rel, nil, st); err != nil {
		t.Fatal(err)
	}
	if _, history := rt.weights(); len(history) != 0 {
		t.Errorf("weights %v: a copied label started an analysis", history)
	}
	check("mall")
	if drift, err := e.Drift(ctx, rel, st); err != nil || len(drift) != 0 {
		t.Errorf("drift %v (%v) after the apply", drift, err)
	}
}
