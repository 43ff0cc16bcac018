package knative

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

// userService is the user's Knative Service, with labels, annotations and a template the
// router must never touch; Knative made revisions 1 to 3 of it.
const userService = `
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: podinfo
  namespace: test
  labels: {team: web}
  annotations: {owner: alice}
spec:
  template:
    metadata: {annotations: {autoscaling.knative.dev/min-scale: "1"}}
    spec:
      containers: [{image: "podinfo:3"}]
status:
  latestCreatedRevisionName: podinfo-00003
  latestReadyRevisionName: podinfo-00003
`

func revision(name, service string, ready bool) string {
	status := "False"
	if ready {
		status = "True"
	}
	return `
apiVersion: serving.knative.dev/v1
kind: Revision
metadata:
  name: ` + name + `
  namespace: test
  labels: {serving.knative.dev/service: ` + service + `}
status:
  conditions: [{type: Ready, status: "` + status + `"}]
`
}

func revisionPod(rev string) *corev1.Pod {
	p := routertest.ReadyPod(rev + "-deployment-0")
	p.Labels = map[string]string{LabelRevision: rev}
	return p
}

// proof is an Admission for the tests: the engine's promotion.Proof plays it in production.
type proof struct {
	rev   string
	admit bool
}

func (p proof) Revision() string            { return p.rev }
func (p proof) Admits(revision string) bool { return p.admit && revision == p.rev }

// fixture: the Service, revisions 1 to 3 (3 has no Ready pod yet), and another Service's
// revision.
func fixture(t *testing.T) (router.Clients, router.Router, mesh.Target) {
	t.Helper()
	c := routertest.FakeClients(t, []string{userService,
		revision("podinfo-00001", "podinfo", true), revision("podinfo-00002", "podinfo", true),
		revision("podinfo-00003", "podinfo", true), revision("other-00001", "other", true)},
		revisionPod("podinfo-00001"), revisionPod("podinfo-00002"))
	routertest.EnforceResourceVersions(t, c, ServiceResource)
	return c, Driver{}.NewRouter(c, spec), Driver{}.NewTarget(c, spec)
}

func trafficJSON(t *testing.T, c router.Clients) string {
	t.Helper()
	svc := routertest.Get(t, c, ServiceResource, "test", "podinfo")
	traffic, _, _ := unstructured.NestedSlice(svc.Object, "spec", "traffic")
	return routertest.MustJSON(t, traffic)
}

// mustUntouched: everything of the user's Service but spec.traffic and the pin annotations is
// as the user wrote it.
func mustUntouched(t *testing.T, c router.Clients) {
	t.Helper()
	svc := routertest.Get(t, c, ServiceResource, "test", "podinfo")
	want := routertest.ParseYAML(t, userService)
	if svc.GetLabels()["team"] != "web" || svc.GetAnnotations()["owner"] != "alice" {
		t.Fatalf("metadata changed: labels %v annotations %v", svc.GetLabels(), svc.GetAnnotations())
	}
	if !router.JSONEqual(svc.Object["spec"].(map[string]any)["template"], want.Object["spec"].(map[string]any)["template"]) {
		t.Fatalf("template changed: %v", svc.Object["spec"])
	}
}

func TestKnativeNothingBeforeThePrimaryIsPinned(t *testing.T) {
	ctx := context.Background()
	c, r, _ := fixture(t)
	routertest.WantErr(t, r.Reconcile(ctx), "no primary revision is pinned yet (annotation canary-release.dev/primary-revision)")
	if _, err := r.GetRoutes(ctx); !router.IsNotFound(err) {
		t.Fatalf("GetRoutes: %v, want not found", err)
	}
	routertest.MustDrift(t, r, "Knative Service test/podinfo has no pinned primary revision (annotation canary-release.dev/primary-revision)")
	if got := trafficJSON(t, c); got != "null" {
		t.Fatalf("traffic %s", got)
	}
}

// Pinning is the promotion: only an admitting proof pins, and the first pin starts the split
// at 100% on the primary, by name.
func TestKnativePinPrimaryNeedsAProof(t *testing.T) {
	ctx := context.Background()
	c, r, tgt := fixture(t)
	routertest.WantErr(t, tgt.PinPrimary(ctx, proof{rev: "podinfo-00001"}), `no proof admits revision "podinfo-00001"`)
	routertest.WantErr(t, tgt.PinPrimary(ctx, proof{rev: "other-00001", admit: true}), `belongs to Service "other", not podinfo`)
	routertest.WantErr(t, tgt.PinPrimary(ctx, proof{rev: "podinfo-00003", admit: true}), "revision podinfo-00003 has no Ready pods, so it cannot take the primary's 100%")
	if got := trafficJSON(t, c); got != "null" {
		t.Fatalf("a refused pin wrote traffic %s", got)
	}
	if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00001", admit: true}); err != nil {
		t.Fatal(err)
	}
	if got, want := trafficJSON(t, c), `[{"latestRevision":false,"percent":100,"revisionName":"podinfo-00001"}]`; got != want {
		t.Fatalf("traffic %s\nwant %s", got, want)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	routertest.MustDrift(t, r)
	revs, err := tgt.Revisions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (mesh.Revisions{Primary: "podinfo-00001", LatestCreated: "podinfo-00003", LatestReady: "podinfo-00003"}); revs != want {
		t.Fatalf("revisions %+v", revs)
	}
	mustUntouched(t, c)
}

// The canary's share goes to the pinned canary revision by name; a new canary revision starts
// at 0, and the promotion moves the primary's share to the canary's revision in one write.
func TestKnativeSplitBetweenPinnedRevisions(t *testing.T) {
	ctx := context.Background()
	c, r, tgt := fixture(t)
	if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00001", admit: true}); err != nil {
		t.Fatal(err)
	}
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 90, Canary: 10}), "no canary revision is pinned")
	if err := tgt.PinCanary(ctx, "podinfo-00002"); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	if err := r.SetRoutes(ctx, router.Weights{Primary: 70, Canary: 30}); err != nil {
		t.Fatal(err)
	}
	want := `[{"latestRevision":false,"percent":30,"revisionName":"podinfo-00002"},{"latestRevision":false,"percent":70,"revisionName":"podinfo-00001"}]`
	if got := trafficJSON(t, c); got != want {
		t.Fatalf("traffic %s\nwant %s", got, want)
	}
	if err := (Driver{}).NewRouter(c, spec).Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 70, Canary: 30})

	routertest.WantErr(t, tgt.PinCanary(ctx, "podinfo-00003"), "the canary revision podinfo-00002 still carries 30%; a new canary revision starts at 0")
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 50, Canary: 50, Matched: true}), "A/B testing (analysis.match) is not available with mesh_provider knative")

	// Promotion: the primary's share moves to the revision that passed.
	if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00002", admit: true}); err != nil {
		t.Fatal(err)
	}
	want = `[{"latestRevision":false,"percent":30,"revisionName":"podinfo-00002"},{"latestRevision":false,"percent":70,"revisionName":"podinfo-00002"}]`
	if got := trafficJSON(t, c); got != want {
		t.Fatalf("traffic after promotion %s\nwant %s", got, want)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	if err := tgt.PinCanary(ctx, "podinfo-00003"); err != nil {
		t.Fatal(err)
	}
	want = `[{"latestRevision":false,"percent":0,"revisionName":"podinfo-00003"},{"latestRevision":false,"percent":100,"revisionName":"podinfo-00002"}]`
	if got := trafficJSON(t, c); got != want {
		t.Fatalf("traffic after the new canary pin %s\nwant %s", got, want)
	}
	mustUntouched(t, c)
}

func TestKnativeForeignTrafficAndDrift(t *testing.T) {
	ctx := context.Background()
	c, r, tgt := fixture(t)
	if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00001", admit: true}); err != nil {
		t.Fatal(err)
	}
	// Someone sends everything to the latest revision: GetRoutes refuses to read it as a split,
	// the plan says so, and Reconcile puts the release's split back at 100/0.
	svc := routertest.Get(t, c, ServiceResource, "test", "podinfo")
	_ = unstructured.SetNestedSlice(svc.Object, []any{map[string]any{"latestRevision": true, "percent": int64(100)}}, "spec", "traffic")
	routertest.Update(t, c, ServiceResource, svc)
	_, err := r.GetRoutes(ctx)
	routertest.WantErr(t, err, "spec.traffic holds 100% to latestRevision, not the release's split")
	routertest.MustDrift(t, r, `Knative Service test/podinfo: spec.traffic holds 100% to latestRevision, not the release's split between pinned revisions`)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})

	// Knative observed the spec but serves something else: drift.
	svc = routertest.Get(t, c, ServiceResource, "test", "podinfo")
	svc.SetGeneration(4)
	_ = unstructured.SetNestedField(svc.Object, int64(4), "status", "observedGeneration")
	_ = unstructured.SetNestedSlice(svc.Object, []any{map[string]any{"revisionName": "podinfo-00003", "percent": int64(100)}}, "status", "traffic")
	routertest.Update(t, c, ServiceResource, svc)
	routertest.MustDrift(t, r, "Knative Service test/podinfo: Knative serves 100% to podinfo-00003, not the spec.traffic it observed (100% to podinfo-00001)")
}

// An API server that keeps another split than the one written fails the write.
func TestKnativeVerifiesTheWrite(t *testing.T) {
	ctx := context.Background()
	c, r, tgt := fixture(t)
	if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00001", admit: true}); err != nil {
		t.Fatal(err)
	}
	if err := tgt.PinCanary(ctx, "podinfo-00002"); err != nil {
		t.Fatal(err)
	}
	svc := routertest.Get(t, c, ServiceResource, "test", "podinfo")
	routertest.FakeDynamic(c).PrependReactor("update", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, svc, nil
	})
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 60, Canary: 40}), "wrote primary=60 canary=40 but the API server holds primary=100 canary=0")
}

func TestKnativeFinalize(t *testing.T) {
	ctx := context.Background()
	t.Run("primary is the latest revision: Knative's default serves it", func(t *testing.T) {
		c, r, tgt := fixture(t)
		if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00002", admit: true}); err != nil {
			t.Fatal(err)
		}
		svc := routertest.Get(t, c, ServiceResource, "test", "podinfo")
		_ = unstructured.SetNestedField(svc.Object, "podinfo-00002", "status", "latestCreatedRevisionName")
		_ = unstructured.SetNestedField(svc.Object, "podinfo-00002", "status", "latestReadyRevisionName")
		routertest.Update(t, c, ServiceResource, svc)
		if err := r.Finalize(ctx); err != nil {
			t.Fatal(err)
		}
		svc = routertest.Get(t, c, ServiceResource, "test", "podinfo")
		if got := trafficJSON(t, c); got != "null" {
			t.Fatalf("traffic %s", got)
		}
		if a := svc.GetAnnotations(); len(a) != 1 || a["owner"] != "alice" {
			t.Fatalf("annotations %v", a)
		}
		mustUntouched(t, c)
	})
	t.Run("a newer revision nobody promoted: the primary keeps everything", func(t *testing.T) {
		c, r, tgt := fixture(t)
		if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00002", admit: true}); err != nil {
			t.Fatal(err)
		}
		if err := tgt.PinCanary(ctx, "podinfo-00003"); err != nil {
			t.Fatal(err)
		}
		if err := r.Finalize(ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := trafficJSON(t, c), `[{"latestRevision":false,"percent":100,"revisionName":"podinfo-00002"}]`; got != want {
			t.Fatalf("traffic %s", got)
		}
		svc := routertest.Get(t, c, ServiceResource, "test", "podinfo")
		if note := svc.GetAnnotations()[router.AnnotationLeftBehind]; !strings.Contains(note, "left all traffic on revision podinfo-00002, the last it promoted; the latest revision (podinfo-00003) was never promoted") {
			t.Fatalf("left-behind note %q", note)
		}
		if a := svc.GetAnnotations(); a[AnnotationPrimaryRevision] != "" || a[AnnotationCanaryRevision] != "" {
			t.Fatalf("pins left: %v", a)
		}
		mustUntouched(t, c)
	})
	t.Run("a missing Service", func(t *testing.T) {
		c := routertest.FakeClients(t, nil)
		if err := (Driver{}).NewRouter(c, spec).Finalize(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// The release's target pins with writes of its own: the router's held copy of the Service,
// from before the pin, must not refuse the canary's first step.
func TestKnativeRouterSeesAPinMadeAfterItsLastWrite(t *testing.T) {
	ctx := context.Background()
	_, r, tgt := fixture(t)
	if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00001", admit: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tgt.PinCanary(ctx, "podinfo-00002"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 90, Canary: 10}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 90, Canary: 10})
}

// A run that recovers a killed one reads the live split (GetRoutes) before its target pins the
// canary: the copy held from that read predates the pin, and must not refuse the canary's
// first step (make chaos's Knative schedules killed at Progressing 0%: the recovery apply
// failed with "no canary revision is pinned ..., so the canary cannot take 10%").
func TestKnativeRouterSeesAPinMadeAfterItsLastRead(t *testing.T) {
	ctx := context.Background()
	c, r, tgt := fixture(t)
	if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00001", admit: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	if err := tgt.PinCanary(ctx, "podinfo-00002"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 90, Canary: 10}); err != nil {
		t.Fatalf("the canary's first step after a read that predates its pin: %v", err)
	}
	want := `[{"latestRevision":false,"percent":10,"revisionName":"podinfo-00002"},{"latestRevision":false,"percent":90,"revisionName":"podinfo-00001"}]`
	if got := trafficJSON(t, c); got != want {
		t.Fatalf("traffic %s\nwant %s", got, want)
	}
}

// A rollback before the canary's first step writes 100/0 while the router's held copy of the
// Service predates the canary's pin, and that copy's traffic already says 100/0: the write is
// planned again on the fresh Service, between both pins. Before, the plan of the stale copy
// (the primary alone) was written onto the fresh one, whose canary pin then made its split
// unreadable ("wrote primary=100 canary=0 but the API server holds no readable split": the
// chaos campaign's Knative schedules with Prometheus unreachable from the start).
func TestKnativeRollbackBeforeTheFirstStepPlansOnTheFreshService(t *testing.T) {
	ctx := context.Background()
	c, r, tgt := fixture(t)
	if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00001", admit: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tgt.PinCanary(ctx, "podinfo-00002"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatalf("the rollback's 100/0 before any step: %v", err)
	}
	want := `[{"latestRevision":false,"percent":0,"revisionName":"podinfo-00002"},{"latestRevision":false,"percent":100,"revisionName":"podinfo-00001"}]`
	if got := trafficJSON(t, c); got != want {
		t.Fatalf("traffic %s\nwant %s", got, want)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
}

// The router's held copy of the Service may already hold the split it is asked for, between the
// pins it had then: the promotion's PinPrimary (the target's own write) moved the primary's pin
// since. The write re-reads the Service to verify the copy, and must plan the split again on
// the pins it read, not write the old primary's name under the new pins (the campaign's Knative
// schedules: every skip_analysis or promote-now promotion failed with "wrote primary=100
// canary=0 but the API server holds no readable split").
func TestKnativeWriteFromAHeldCopyFollowsANewPrimaryPin(t *testing.T) {
	ctx := context.Background()
	c, r, tgt := fixture(t)
	if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00001", admit: true}); err != nil {
		t.Fatal(err)
	}
	if err := tgt.PinCanary(ctx, "podinfo-00002"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	// The canary at 0% is promoted (skip_analysis, a promote-now before the first step).
	if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00002", admit: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	want := `[{"latestRevision":false,"percent":0,"revisionName":"podinfo-00002"},{"latestRevision":false,"percent":100,"revisionName":"podinfo-00002"}]`
	if got := trafficJSON(t, c); got != want {
		t.Fatalf("traffic %s\nwant %s", got, want)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
}

// Right after the user applies a template, the Service's status still names the revision of
// the template before: until Knative has observed the new generation, the next canary is not
// known, so the engine waits for it instead of finding nothing to release (TestAccKnative
// found the primary still on the old image when the simulator's status lagged the apply).
func TestKnativeLatestRevisionWaitsForKnativeToObserveTheTemplate(t *testing.T) {
	ctx := context.Background()
	c, _, tgt := fixture(t)
	svc := routertest.Get(t, c, ServiceResource, "test", "podinfo")
	svc.SetGeneration(4)
	_ = unstructured.SetNestedField(svc.Object, int64(3), "status", "observedGeneration")
	routertest.Update(t, c, ServiceResource, svc)
	revs, err := tgt.Revisions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if revs.LatestCreated != "" || revs.LatestReady != "" {
		t.Fatalf("generation 4 not observed yet, but the latest revisions read %+v", revs)
	}

	svc = routertest.Get(t, c, ServiceResource, "test", "podinfo")
	_ = unstructured.SetNestedField(svc.Object, int64(4), "status", "observedGeneration")
	_ = unstructured.SetNestedField(svc.Object, "podinfo-00004", "status", "latestCreatedRevisionName")
	routertest.Update(t, c, ServiceResource, svc)
	if revs, err = tgt.Revisions(ctx); err != nil {
		t.Fatal(err)
	}
	if revs.LatestCreated != "podinfo-00004" || revs.LatestReady != "podinfo-00003" {
		t.Fatalf("observed: latest revisions %+v, want created podinfo-00004, ready podinfo-00003", revs)
	}
}

// Knative's Service reconciler sets observedGeneration whether or not its Configuration has
// caught up: until the Configuration made a revision of the new template, the Service's
// ConfigurationsReady is Unknown (OutOfDate) and latestCreatedRevisionName still names the
// revision before. Read as the latest, it ended the apply of a new template in "nothing to
// release: the target's latest revision is the primary" (the campaign's Knative schedules
// whose Configuration lags the Service: seeds 32, 142, 183).
func TestKnativeLatestRevisionWaitsForTheConfigurationToCatchUp(t *testing.T) {
	ctx := context.Background()
	c, _, tgt := fixture(t)
	svc := routertest.Get(t, c, ServiceResource, "test", "podinfo")
	svc.SetGeneration(4)
	_ = unstructured.SetNestedField(svc.Object, int64(4), "status", "observedGeneration")
	_ = unstructured.SetNestedSlice(svc.Object, []any{map[string]any{"type": "ConfigurationsReady", "status": "Unknown", "reason": "OutOfDate",
		"message": "The Configuration is still working to reflect the latest desired specification."}}, "status", "conditions")
	routertest.Update(t, c, ServiceResource, svc)
	revs, err := tgt.Revisions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if revs.LatestCreated != "" || revs.LatestReady != "" {
		t.Fatalf("the Configuration has not made a revision of generation 4 yet, but the latest revisions read %+v", revs)
	}

	svc = routertest.Get(t, c, ServiceResource, "test", "podinfo")
	_ = unstructured.SetNestedSlice(svc.Object, []any{map[string]any{"type": "ConfigurationsReady", "status": "Unknown", "reason": "RevisionMissing"}}, "status", "conditions")
	_ = unstructured.SetNestedField(svc.Object, "podinfo-00004", "status", "latestCreatedRevisionName")
	routertest.Update(t, c, ServiceResource, svc)
	if revs, err = tgt.Revisions(ctx); err != nil {
		t.Fatal(err)
	}
	if revs.LatestCreated != "podinfo-00004" || revs.LatestReady != "podinfo-00003" {
		t.Fatalf("caught up (its revision still deploying): latest revisions %+v, want created podinfo-00004, ready podinfo-00003", revs)
	}
}
