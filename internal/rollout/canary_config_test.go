package rollout

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// canaryPods plays kubelet for the target's pods: they read the tracked ConfigMap's LEVEL when
// they start (the Deployment is created, scaled up from zero, or gets a new template) and keep
// it, as env and envFrom do. level is what they run, "" without pods.
type canaryPods struct {
	mu     sync.Mutex
	level  string
	checks []string
	// onStart, when set, runs as the pods start, before they read the ConfigMap.
	onStart func()
}

func followCanaryPods(cs *fake.Clientset) *canaryPods {
	pods := &canaryPods{}
	deployments := appsv1.SchemeGroupVersion.WithResource("deployments")
	configMaps := corev1.SchemeGroupVersion.WithResource("configmaps")
	cs.PrependReactor("*", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() != "create" && a.GetVerb() != "update" {
			return false, nil, nil
		}
		var name string
		var replicas int32 = 1
		var template *corev1.PodTemplateSpec
		switch obj := a.(interface{ GetObject() runtime.Object }).GetObject().(type) {
		case *autoscalingv1.Scale:
			name, replicas = obj.Name, obj.Spec.Replicas
		case *appsv1.Deployment:
			name, template = obj.Name, &obj.Spec.Template
			if obj.Spec.Replicas != nil {
				replicas = *obj.Spec.Replicas
			}
		}
		if name != "podinfo" {
			return false, nil, nil
		}
		start := true
		if old, err := cs.Tracker().Get(deployments, a.GetNamespace(), name); err == nil {
			o := old.(*appsv1.Deployment)
			start = o.Spec.Replicas != nil && *o.Spec.Replicas == 0 ||
				template != nil && !equality.Semantic.DeepEqual(o.Spec.Template, *template)
		}
		pods.mu.Lock()
		defer pods.mu.Unlock()
		switch {
		case replicas == 0:
			pods.level = ""
		case start:
			if pods.onStart != nil {
				pods.onStart()
			}
			cm, err := cs.Tracker().Get(configMaps, a.GetNamespace(), "podinfo-config")
			if err != nil {
				return true, nil, err
			}
			pods.level = cm.(*corev1.ConfigMap).Data["LEVEL"]
		}
		return false, nil, nil
	})
	return pods
}

// check is the analysis' metric: it measures the canary's pods, which fail with LEVEL broken.
func (p *canaryPods) check(context.Context, string) (float64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checks = append(p.checks, p.level)
	if p.level == "broken" {
		return 50, nil
	}
	return 100, nil
}

// takeChecks returns the levels the checks measured since the last call.
func (p *canaryPods) takeChecks() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.checks
	p.checks = nil
	return out
}

// A canary left running by an earlier run (a rollback held while the primary had no Ready
// pods, or a scale-down that failed) runs pods that read the tracked config when they started.
// A config changed since is only analysed on pods that read it: the canary restarts first, and
// only the config its Ready pods run can be recorded as passed and promoted.
func TestCanaryLeftRunningIsAnalysedOnTheChangedConfig(t *testing.T) {
	ctx := context.Background()
	cs := newCluster()
	configured(t, cs, true)
	pods := followCanaryPods(cs)
	rt := &fakeRouter{}
	e := &Engine{Kube: cs, Router: rt, Metrics: querierFunc(pods.check), DrainDelay: 1}
	rel := testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Metrics: []Metric{successRate(99)}})
	st, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaveCanaryRunning := func() {
		t.Helper()
		if err := (workload{kube: cs, rel: rel}).scale(ctx, "podinfo", 2); err != nil {
			t.Fatal(err)
		}
	}

	// The canary runs on info; the config becomes broken.
	leaveCanaryRunning()
	setConfig(t, cs, "broken")
	st, err = e.Apply(ctx, rel, nil, st)
	if checks := pods.takeChecks(); len(checks) == 0 || slices.ContainsFunc(checks, func(l string) bool { return l != "broken" }) {
		t.Errorf("the checks measured canary pods on %v; the revision under analysis has LEVEL broken", checks)
	}
	if err == nil || st.Phase != PhaseFailed {
		t.Fatalf("a broken config must fail its analysis: phase %s, error %v", st.Phase, err)
	}
	if got := primaryConfig(t, cs); got != "info" {
		t.Fatalf("the primary's copy holds %q, which never passed analysis; want the promoted info", got)
	}

	// The canary runs on broken (started from zero after the rollback); the config becomes
	// warn, which is healthy: analysed on warn, promoted as warn.
	leaveCanaryRunning()
	setConfig(t, cs, "warn")
	if st, err = e.Apply(ctx, rel, nil, st); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("phase %s, error %v", st.Phase, err)
	}
	if checks := pods.takeChecks(); len(checks) == 0 || slices.ContainsFunc(checks, func(l string) bool { return l != "warn" }) {
		t.Errorf("the checks measured canary pods on %v; the revision under analysis has LEVEL warn", checks)
	}
	if got := primaryConfig(t, cs); got != "warn" {
		t.Errorf("the primary's copy holds %q, want the analysed warn", got)
	}
	if st.PassedSpec != st.LastPromotedSpec || st.LastPromotedSpec != st.PrimarySpec {
		t.Errorf("passed %s, promoted %s, primary %s: the promoted revision is the one analysed", st.PassedSpec, st.LastPromotedSpec, st.PrimarySpec)
	}

	// The config changes again while the canary's pods start: they may read either version,
	// so neither is analysed (nor promoted) by this run.
	pods.onStart = func() {
		pods.onStart = nil
		cm := &corev1.ConfigMap{}
		obj, _ := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), "test", "podinfo-config")
		obj.(*corev1.ConfigMap).DeepCopyInto(cm)
		cm.Data["LEVEL"] = "broken"
		if err := cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), cm, "test"); err != nil {
			t.Error(err)
		}
	}
	setConfig(t, cs, "error")
	st, err = e.Apply(ctx, rel, nil, st)
	if err == nil || !strings.Contains(err.Error(), "changed while the canary's pods started") {
		t.Errorf("a config changed while the canary started: error %v", err)
	}
	if checks := pods.takeChecks(); len(checks) != 0 {
		t.Errorf("the checks measured canary pods on %v, whose config is not the revision under analysis", checks)
	}
	if got := primaryConfig(t, cs); got != "warn" {
		t.Errorf("the primary's copy holds %q, want the promoted warn", got)
	}
}
