package rollout

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// configured is podinfo with a ConfigMap in envFrom and a Secret in a projected volume.
func configured(t *testing.T, cs *fake.Clientset, trackSecret bool) {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-config", Namespace: "test"}, Data: map[string]string{"LEVEL": "info"}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-token", Namespace: "test"}, Data: map[string][]byte{"token": []byte("s3cret")}}
	if !trackSecret {
		secret.Annotations = map[string]string{"flagger.app/config-tracking": "disabled"}
	}
	if _, err := cs.CoreV1().ConfigMaps("test").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets("test").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := podinfo("podinfo:1", 2)
	d.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "podinfo-config"}}}}
	d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "podinfo-token"}}}}}}}}
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setConfig(t *testing.T, cs *fake.Clientset, level string) {
	t.Helper()
	cm, _ := cs.CoreV1().ConfigMaps("test").Get(context.Background(), "podinfo-config", metav1.GetOptions{})
	cm.Data["LEVEL"] = level
	if _, err := cs.CoreV1().ConfigMaps("test").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func primaryConfig(t *testing.T, cs *fake.Clientset) string {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps("test").Get(context.Background(), "podinfo-config-primary", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the primary's copy of the ConfigMap: %v", err)
	}
	return cm.Data["LEVEL"]
}

// A change to a tracked ConfigMap alone is a new revision: it is analysed, and the primary's
// copy takes the new data only when the analysis passes.
func TestConfigChangeIsReleasedThroughAnalysis(t *testing.T) {
	ctx := context.Background()
	cs := newCluster()
	configured(t, cs, true)
	rt := &fakeRouter{}
	healthy := true
	q := querierFunc(func(context.Context, string) (float64, error) {
		if healthy {
			return 100, nil
		}
		return 50, nil
	})
	e := &Engine{Kube: cs, Router: rt, Metrics: q, DrainDelay: 1}
	rel := testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Metrics: []Metric{successRate(99)}})
	st, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatal(err)
	}
	primary := deployment(t, cs, "podinfo-primary")
	if ref := primary.Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name; ref != "podinfo-config-primary" {
		t.Errorf("the primary uses ConfigMap %s, want its own copy", ref)
	}
	if ref := primary.Spec.Template.Spec.Volumes[0].Projected.Sources[0].Secret.Name; ref != "podinfo-token-primary" {
		t.Errorf("the primary uses Secret %s, want its own copy", ref)
	}
	if primaryConfig(t, cs) != "info" {
		t.Errorf("the primary's copy holds %q", primaryConfig(t, cs))
	}

	// A failing analysis of a config-only change: rolled back, the primary keeps the old config.
	setConfig(t, cs, "debug")
	healthy = false
	st, err = e.Apply(ctx, rel, nil, st)
	if err == nil || st.Phase != PhaseFailed {
		t.Fatalf("a config-only change must be analysed: phase %s, error %v", st.Phase, err)
	}
	if _, history := rt.weights(); len(history) == 0 {
		t.Error("no traffic was shifted: the config change was not analysed")
	}
	if primaryConfig(t, cs) != "info" {
		t.Errorf("after the rollback the primary's copy holds %q, want the promoted info", primaryConfig(t, cs))
	}

	// The same change, healthy this time and retried on purpose (a rejected revision stays
	// rejected until retry_rejected changes): promoted, and the primary's copy follows.
	healthy = true
	rel.RetryRejected = "again"
	if st, err = e.Apply(ctx, rel, nil, st); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("phase %s, error %v", st.Phase, err)
	}
	if primaryConfig(t, cs) != "debug" {
		t.Errorf("after the promotion the primary's copy holds %q, want debug", primaryConfig(t, cs))
	}
	if strings.Contains(st.LastPromotedSpec, "s3cret") || len(st.LastPromotedSpec) != 16 {
		t.Errorf("recorded revision %q: only a hash may leave the cluster", st.LastPromotedSpec)
	}

	// Nothing changed: nothing to release.
	rt.history = nil
	if st, err = e.Apply(ctx, rel, nil, st); err != nil {
		t.Fatal(err)
	}
	if _, history := rt.weights(); len(history) != 0 {
		t.Errorf("weights %v: an unchanged revision ran a rollout", history)
	}
	if drift, _ := e.Drift(ctx, rel, st); len(drift) != 0 {
		t.Errorf("drift %v on an unchanged release", drift)
	}
	setConfig(t, cs, "warn")
	if drift, _ := e.Drift(ctx, rel, st); len(drift) == 0 || !strings.Contains(drift[0], "ConfigMap or Secret") {
		t.Errorf("drift %v: the plan must show a changed tracked config", drift)
	}

	// Destroy with revert takes the primary's copies with it, and leaves the user's own (without
	// revert the primary keeps serving, on its copies).
	setConfig(t, cs, "debug")
	if err := e.Delete(ctx, rel, true); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("test").Get(ctx, "podinfo-config-primary", metav1.GetOptions{}); err == nil {
		t.Error("the primary's ConfigMap copy outlived the release")
	}
	if _, err := cs.CoreV1().ConfigMaps("test").Get(ctx, "podinfo-config", metav1.GetOptions{}); err != nil {
		t.Errorf("the user's ConfigMap: %v", err)
	}
}

// An opted-out config is shared and outside the revision.
func TestUntrackedConfigIsShared(t *testing.T) {
	ctx := context.Background()
	cs := newCluster()
	configured(t, cs, false)
	w := workload{kube: cs, rel: testRelease(Analysis{})}
	target := deployment(t, cs, "podinfo")
	tracked, err := w.trackedConfigs(ctx, target)
	if err != nil || len(tracked) != 1 || tracked[0].Name != "podinfo-config" {
		t.Fatalf("tracked = %v, %v: the opted-out Secret must not be tracked", tracked, err)
	}
	before, _ := w.revision(ctx, target)
	secret, _ := cs.CoreV1().Secrets("test").Get(ctx, "podinfo-token", metav1.GetOptions{})
	secret.Data["token"] = []byte("rotated")
	if _, err := cs.CoreV1().Secrets("test").Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if after, _ := w.revision(ctx, target); after != before {
		t.Errorf("an untracked Secret changed the revision")
	}
	primary, err := w.primaryFrom(target, 1, before, tracked)
	if err != nil {
		t.Fatal(err)
	}
	if ref := primary.Spec.Template.Spec.Volumes[0].Projected.Sources[0].Secret.Name; ref != "podinfo-token" {
		t.Errorf("the primary uses %s: an untracked Secret is shared", ref)
	}
}

// Without tracked configs the revision is the template hash, so releases made before config
// tracking see no change.
func TestRevisionWithoutConfigsIsTheTemplateHash(t *testing.T) {
	cs := newCluster()
	d := podinfo("podinfo:1", 1)
	w := workload{kube: cs, rel: testRelease(Analysis{})}
	if got, err := w.revision(context.Background(), d); err != nil || got != TemplateHash(d) {
		t.Errorf("revision = %s, %v; want the template hash %s", got, err, TemplateHash(d))
	}
}

// port_discovery puts the target's other container ports on the Services; the main port stays
// first, and the drift check is content with what it wrote.
func TestPortDiscovery(t *testing.T) {
	ctx := context.Background()
	cs := newCluster()
	d := podinfo("podinfo:1", 1)
	d.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 9898}, {Name: "metrics", ContainerPort: 9797}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rel := testRelease(Analysis{StepWeights: []int{50}})
	rel.Service.PortDiscovery = true
	e := &Engine{Kube: cs, Router: &fakeRouter{}, DrainDelay: 1}
	st, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"podinfo", "podinfo-primary", "podinfo-canary"} {
		svc, err := cs.CoreV1().Services("test").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ports []string
		for _, p := range svc.Spec.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d", p.Name, p.Port))
		}
		if got := strings.Join(ports, " "); got != "http:9898 metrics:9797" {
			t.Errorf("Service %s ports = %s, want the main port and the discovered TCP one", name, got)
		}
	}
	if drift, err := e.Drift(ctx, rel, st); err != nil || len(drift) != 0 {
		t.Errorf("drift %v, %v", drift, err)
	}
}
