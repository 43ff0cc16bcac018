package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Issue 32, hole 5: the cluster's record is signed, so that one who may write ConfigMaps but
// not run the release cannot decide what is promoted.

// rewriteRecord changes the status in the state ConfigMap as someone with write access to
// ConfigMaps could: the MAC and the sequence stay as the engine wrote them.
func rewriteRecord(t *testing.T, cs *fake.Clientset, edit func(*Status)) {
	t.Helper()
	rewriteRecordOf(t, cs, "podinfo", edit)
}

func rewriteRecordOf(t *testing.T, cs *fake.Clientset, release string, edit func(*Status)) {
	t.Helper()
	ctx := context.Background()
	cm, err := cs.CoreV1().ConfigMaps("test").Get(ctx, StateConfigMapName(release), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var st Status
	if err := json.Unmarshal([]byte(cm.Data[stateKeyStatus]), &st); err != nil {
		t.Fatal(err)
	}
	edit(&st)
	b, _ := json.Marshal(st)
	cm.Data[stateKeyStatus] = string(b)
	if _, err := cs.CoreV1().ConfigMaps("test").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// recordData is the state ConfigMap's data, to put back later (a replay).
func recordData(t *testing.T, cs *fake.Clientset) map[string]string {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps("test").Get(context.Background(), StateConfigMapName("podinfo"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return maps.Clone(cm.Data)
}

func putBackRecord(t *testing.T, cs *fake.Clientset, data map[string]string) {
	t.Helper()
	ctx := context.Background()
	cm, err := cs.CoreV1().ConfigMaps("test").Get(ctx, StateConfigMapName("podinfo"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = maps.Clone(data)
	if _, err := cs.CoreV1().ConfigMaps("test").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// warnings collects the engine's warnings, summary and detail.
func warnings(e *Engine) *[]string {
	var got []string
	e.Warn = func(summary, detail string) { got = append(got, summary+": "+detail) }
	return &got
}

func wantUntrustedWarning(t *testing.T, got []string, reason string) {
	t.Helper()
	for _, w := range got {
		if strings.Contains(w, "the cluster's record of canary_release test/podinfo could not be verified (") &&
			strings.Contains(w, "it is not trusted; the target's template goes through the analysis") && strings.Contains(w, reason) {
			if n := strings.Count(strings.Join(got, "\n"), "could not be verified"); n != 1 {
				t.Errorf("the record was warned of %d times, want once: %q", n, got)
			}
			return
		}
	}
	t.Errorf("warnings = %q, want one saying the record could not be verified (%s)", got, reason)
}

// The reproduced hole: after podinfo:2 was rejected, lastPromotedSpec was rewritten to its
// revision in the ConfigMap. The next unattended apply said "nothing to release" and copied
// podinfo:2 into the primary, which then had 100 % of the traffic.
func TestRewrittenLastPromotedSpecIsNotTrusted(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	q := newCountingQuerier(50)
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	rejected, err := e.Apply(ctx, rel, nil, prior)
	if err == nil || rejected.Rejected == nil {
		t.Fatalf("the failing analysis = %+v, %v; want a rejection", rejected.Rejected, err)
	}
	rewriteRecord(t, cs, func(st *Status) { st.LastPromotedSpec = rejected.Rejected.Revision })

	got := warnings(e)
	st, err := e.Apply(ctx, rel, nil, rejected)
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(f.Reason, "refuses the target's template") {
		t.Fatalf("Apply after the rewrite = %s %q, %v; want the rejected revision refused", st.Phase, st.Message, err)
	}
	if strings.Contains(st.Message, "nothing to release") {
		t.Errorf("message %q: the rewritten record was trusted", st.Message)
	}
	if img := primaryImage(t, e); img != "podinfo:1" {
		t.Errorf("the primary runs %s, want podinfo:1: the rejected revision took the traffic", img)
	}
	if w, _ := rt.weights(); w != (router.Weights{Primary: 100}) {
		t.Errorf("weights = %+v, want all traffic on the primary", w)
	}
	wantUntrustedWarning(t, *got, "its MAC does not match")

	// The rejection rewritten away too: the revision is analysed again, and fails again.
	rewriteRecord(t, cs, func(st *Status) { st.LastPromotedSpec, st.Rejected = rejected.Rejected.Revision, nil })
	*got = nil
	before := q.queries.Load()
	if _, err := e.Apply(ctx, rel, nil, rejected); !errors.As(err, &f) || !strings.Contains(f.Reason, "request-success-rate") {
		t.Fatalf("Apply with the rejection rewritten away = %v; want its analysis to fail", err)
	}
	if q.queries.Load() == before {
		t.Error("no query ran: the revision was not analysed")
	}
	if img := primaryImage(t, e); img != "podinfo:1" {
		t.Errorf("the primary runs %s, want podinfo:1", img)
	}
	wantUntrustedWarning(t, *got, "its MAC does not match")
}

// A record the engine signed itself, put back after later writes (a replay), is refused: its
// MAC holds, but its sequence is older than the one the Terraform state saved.
func TestReplayedOlderRecordIsNotTrusted(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Metrics: []Metric{successRate(99)}})
	q := newCountingQuerier(100)
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	promoted2, err := e.Apply(ctx, rel, nil, prior)
	if err != nil {
		t.Fatal(err)
	}
	podinfo2 := recordData(t, cs) // promoted podinfo:2
	setImage(t, e, "podinfo", "podinfo:3")
	promoted3, err := e.Apply(ctx, rel, nil, promoted2)
	if err != nil || primaryImage(t, e) != "podinfo:3" {
		t.Fatalf("releasing podinfo:3: %v", err)
	}

	// Back to podinfo:2, which is no longer what the primary runs: it must be analysed. The
	// replayed record says it is the last promoted one.
	setImage(t, e, "podinfo", "podinfo:2")
	putBackRecord(t, cs, podinfo2)
	q.value.Store(50.0)
	got := warnings(e)
	rt.history = nil
	before := q.queries.Load()
	st, err := e.Apply(ctx, rel, nil, promoted3)
	if err == nil || strings.Contains(st.Message, "nothing to release") {
		t.Fatalf("Apply over the replayed record = %s %q, %v; want podinfo:2 analysed and refused", st.Phase, st.Message, err)
	}
	if q.queries.Load() == before {
		t.Error("no query ran: podinfo:2 was not analysed")
	}
	if img := primaryImage(t, e); img != "podinfo:3" {
		t.Errorf("the primary runs %s, want podinfo:3 kept", img)
	}
	wantUntrustedWarning(t, *got, "older than the last one this resource saved")
}

// killedInPromoting leaves the release as a run killed right after its analysis passed: the
// record says Promoting with the passed revision, the primary still runs the old template and
// the canary has weight.
func killedInPromoting(t *testing.T, e *Engine, rt *fakeRouter, rel Release, prior Status, weight int) {
	t.Helper()
	ctx := context.Background()
	r := e.newRun(rel, prior, nil)
	if err := r.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	r.st.LastAppliedSpec, r.st.CanarySpec, r.st.PassedSpec = r.hash, r.hash, r.hash
	r.st.CanaryWeight = weight
	if err := r.record(ctx, PhasePromoting, normalEvent, "killed here"); err != nil {
		t.Fatal(err)
	}
	if err := r.w.scale(ctx, rel.Target, 2); err != nil {
		t.Fatal(err)
	}
	if err := rt.SetRoutes(ctx, router.Weights{Primary: 100 - weight, Canary: weight}); err != nil {
		t.Fatal(err)
	}
}

// A killed apply wrote records that Terraform never saved: they are ahead of the private
// state's sequence, signed with its key, and trusted: the promotion the analysis allowed
// finishes, without analysing again.
func TestRecordAheadOfTheTerraformStateIsTrusted(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Metrics: []Metric{successRate(99)}})
	q := newCountingQuerier(50)
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	saved := *rel.Seal // what Terraform's private state holds: the killed apply's writes are not in it
	killedInPromoting(t, e, rt, rel, prior, 50)
	if rel.Seal.Sequence <= saved.Sequence {
		t.Fatalf("the killed run's writes left the sequence at %d", rel.Seal.Sequence)
	}
	next := rel
	next.Seal = &saved
	got := warnings(e)
	st, err := e.Apply(ctx, next, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply after the killed promotion = %s, %v; want it finished", st.Phase, err)
	}
	if img := primaryImage(t, e); img != "podinfo:2" {
		t.Errorf("the primary runs %s, want the passed podinfo:2", img)
	}
	if n := q.queries.Load(); n != 0 {
		t.Errorf("%d queries ran: the passed revision was analysed again", n)
	}
	if len(*got) != 0 {
		t.Errorf("warnings = %q, want none", *got)
	}
	if after := recordData(t, cs)[stateKeySequence]; fmt.Sprint(saved.Sequence) != after {
		t.Errorf("the record's sequence is %s, the one returned for the private state %d", after, saved.Sequence)
	}
}

// The same record, written by someone else (no valid MAC): the promotion it claims is rolled
// back, and the target is analysed.
func TestRewrittenPromotingRecordIsRolledBackAndAnalysed(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Metrics: []Metric{successRate(99)}})
	q := newCountingQuerier(50)
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	killAt(t, e, rt, rel, prior, 50)
	rewriteRecord(t, cs, func(st *Status) { st.Phase, st.PassedSpec = PhasePromoting, st.CanarySpec })
	got := warnings(e)
	_, err := e.Apply(ctx, rel, nil, prior)
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(f.Reason, "request-success-rate") {
		t.Fatalf("Apply over the rewritten record = %v; want podinfo:2 analysed and failed", err)
	}
	if q.queries.Load() == 0 {
		t.Error("no query ran: podinfo:2 was not analysed")
	}
	if img := primaryImage(t, e); img != "podinfo:1" {
		t.Errorf("the primary runs %s, want podinfo:1", img)
	}
	wantUntrustedWarning(t, *got, "its MAC does not match")
}

// No key (an import, terraform state rm and a new resource, a lost create): a record saying
// the target's template was promoted is not believed; the primary's own annotation is, and
// the target's template is analysed.
func TestRecordWithoutAKeyTakesTheAnalysedPath(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Metrics: []Metric{successRate(99)}})
	q := newCountingQuerier(50)
	e, cs, rt, _ := setup(t, rel, q, "podinfo:2")
	target, err := e.Kube.AppsV1().Deployments("test").Get(ctx, "podinfo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	candidate, err := workload{kube: e.Kube, rel: rel}.revision(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	rewriteRecord(t, cs, func(st *Status) { st.LastPromotedSpec = candidate })
	for _, c := range []struct {
		name string
		call func(Release) (Status, error)
	}{
		{"import, then apply", func(r Release) (Status, error) { return e.Apply(ctx, r, nil, Status{}) }},
		{"create", func(r Release) (Status, error) { return e.Initialize(ctx, r, nil) }},
	} {
		name, call := c.name, c.call
		t.Run(name, func(t *testing.T) {
			fresh := rel
			if fresh.Seal, err = NewSeal(); err != nil {
				t.Fatal(err)
			}
			got := warnings(e)
			rt.history = nil
			before := q.queries.Load()
			st, err := call(fresh)
			if err == nil || strings.Contains(st.Message, "nothing to release") {
				t.Fatalf("%s = %s %q, %v; want podinfo:2 analysed and failed", name, st.Phase, st.Message, err)
			}
			if q.queries.Load() == before {
				t.Error("no query ran: podinfo:2 was not analysed")
			}
			if img := primaryImage(t, e); img != "podinfo:1" {
				t.Errorf("the primary runs %s, want podinfo:1", img)
			}
			wantUntrustedWarning(t, *got, "the Terraform state holds no key")
			// The failed run recorded a rejection under its own key: rewrite the record again,
			// without it, so that the next case analyses rather than refuses.
			rewriteRecord(t, cs, func(st *Status) { st.LastPromotedSpec, st.Rejected = candidate, nil })
		})
	}
}

// The first apply after upgrading from a provider that did not sign records (format 3, no
// MAC): a healthy release whose record agrees with the Terraform state settles, without a
// warning, and its record is signed from then on.
func TestUnsignedRecordThatAgreesWithTheTerraformStateSettles(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Metrics: []Metric{successRate(99)}})
	e, cs, _, prior := setup(t, rel, nil, "podinfo:1")
	old := recordData(t, cs)
	old[stateKeyFormat] = "3"
	delete(old, stateKeyMAC)
	delete(old, stateKeySequence)
	putBackRecord(t, cs, old)
	upgraded := rel
	upgraded.Seal = testSeal()
	got := warnings(e)
	st, err := e.Apply(ctx, upgraded, nil, prior)
	if err != nil || !strings.Contains(st.Message, "nothing to release") {
		t.Fatalf("first apply after the upgrade = %s %q, %v; want it settled", st.Phase, st.Message, err)
	}
	if len(*got) != 0 {
		t.Errorf("warnings = %q, want none", *got)
	}
	after := recordData(t, cs)
	if after[stateKeyFormat] != "4" || after[stateKeyMAC] == "" {
		t.Errorf("record after the first apply: format %q, mac %q; want it signed", after[stateKeyFormat], after[stateKeyMAC])
	}
}

// A rejected template written into the record's promoted history is no revert within
// rollback_window: the plan announces none, and the apply analyses it.
func TestRewrittenHistoryIsNoRevert(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	rel.RollbackWindow = 1
	q := newCountingQuerier(50)
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	rejected, err := e.Apply(ctx, rel, nil, prior)
	if err == nil || rejected.Rejected == nil {
		t.Fatalf("the failing analysis = %v; want a rejection", err)
	}
	bad := rejected.Rejected.Revision
	rewriteRecord(t, cs, func(st *Status) { st.Promoted, st.Rejected = []string{st.LastPromotedSpec, bad}, nil })

	if v, err := e.Revert(ctx, rel); err != nil || v != nil {
		t.Errorf("Revert (for the plan) = %+v, %v; want none from a rewritten history", v, err)
	}
	got := warnings(e)
	rt.history = nil
	before := q.queries.Load()
	if _, err := e.Apply(ctx, rel, nil, rejected); err == nil {
		t.Fatal("the rejected template went through")
	}
	if q.queries.Load() == before {
		t.Error("no query ran: the rejected template was not analysed")
	}
	if img := primaryImage(t, e); img != "podinfo:1" {
		t.Errorf("the primary runs %s, want podinfo:1", img)
	}
	wantUntrustedWarning(t, *got, "its MAC does not match")
}

// A create that stopped before Terraform saved it lost its key with it. Its record of an
// unfinished first initialisation cannot be verified, but while the release has no Services it
// stays one: the next create initialises from the target's template, as a first one does.
func TestUnfinishedFirstInitialisationWithALostKeyCarriesOn(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	cs := newCluster()
	if _, err := cs.AppsV1().Deployments("test").Create(context.Background(), podinfo("podinfo:1", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := &Engine{Kube: cs, Router: &fakeRouter{}, DrainDelay: time.Millisecond}
	// The first create stops as soon as it has written the primary.
	killed, kill := context.WithCancel(context.Background())
	cs.PrependReactor("create", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if d, ok := a.(k8stesting.CreateAction).GetObject().(*appsv1.Deployment); ok && d.Name == "podinfo-primary" {
			kill()
		}
		return false, nil, nil
	})
	if _, err := e.Initialize(killed, rel, nil); err == nil {
		t.Fatal("the killed create went through")
	}
	setImage(t, e, "podinfo", "podinfo:2")
	again := rel
	var err error
	if again.Seal, err = NewSeal(); err != nil {
		t.Fatal(err)
	}
	got := warnings(e)
	st, err := e.Initialize(context.Background(), again, nil)
	if err != nil || st.Phase != PhaseInitialized {
		t.Fatalf("the next create = %s, %v; want it initialised", st.Phase, err)
	}
	if img := primaryImage(t, e); img != "podinfo:2" {
		t.Errorf("the primary runs %s, want podinfo:2", img)
	}
	if len(*got) != 0 {
		t.Errorf("warnings = %q, want none", *got)
	}
}

// The same record written over an established release (its Services exist) is no first
// initialisation: the create goes by what the primary runs, and does not promote the target.
func TestRewrittenFirstInitialisationRecordPromotesNothing(t *testing.T) {
	for _, deleted := range []string{"", "podinfo-primary"} {
		t.Run("deleted Service "+deleted, func(t *testing.T) { rewrittenFirstInitialisation(t, deleted) })
	}
}

// rewrittenFirstInitialisation is TestRewrittenFirstInitialisationRecordPromotesNothing with
// the generated Service deleted first ("" for none): a destroy that stopped after deleting the
// -primary Service leaves the apex and -canary ones, so the release is still no first
// initialisation. Before, the -primary Service alone was asked, and podinfo:2 was made the
// primary without analysis (the campaign's seed 1009863).
func rewrittenFirstInitialisation(t *testing.T, deleted string) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	e, cs, _, _ := setup(t, rel, nil, "podinfo:2")
	if deleted != "" {
		if err := cs.CoreV1().Services("test").Delete(context.Background(), deleted, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rewriteRecord(t, cs, func(st *Status) {
		st.Phase, st.Initialized, st.LastPromotedSpec, st.PrimarySpec, st.Promoted = PhaseInitializing, false, "", "", nil
	})
	again := rel
	var err error
	if again.Seal, err = NewSeal(); err != nil {
		t.Fatal(err)
	}
	got := warnings(e)
	_, err = e.Initialize(context.Background(), again, nil)
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(f.Reason, "never passed analysis") {
		t.Fatalf("create over the rewritten record = %v; want the unanalysed template refused", err)
	}
	if img := primaryImage(t, e); img != "podinfo:1" {
		t.Errorf("the primary runs %s, want podinfo:1", img)
	}
	wantUntrustedWarning(t, *got, "the Terraform state holds no key")
}

// A record made to look as an older version wrote it (format 3, no MAC) while the resource
// holds a key is no way around the signature: it is not trusted.
func TestRecordStrippedOfItsSignatureIsNotTrusted(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	q := newCountingQuerier(50)
	e, cs, _, prior := setup(t, rel, q, "podinfo:2")
	rejected, err := e.Apply(ctx, rel, nil, prior)
	if err == nil || rejected.Rejected == nil {
		t.Fatalf("the failing analysis = %v; want a rejection", err)
	}
	rewriteRecord(t, cs, func(st *Status) { st.LastPromotedSpec, st.Rejected = rejected.Rejected.Revision, nil })
	old := recordData(t, cs)
	old[stateKeyFormat] = "3"
	delete(old, stateKeyMAC)
	delete(old, stateKeySequence)
	putBackRecord(t, cs, old)
	got := warnings(e)
	before := q.queries.Load()
	st, err := e.Apply(ctx, rel, nil, rejected)
	if err == nil || strings.Contains(st.Message, "nothing to release") {
		t.Fatalf("Apply over the unsigned record = %s %q, %v; want the revision analysed and failed", st.Phase, st.Message, err)
	}
	if q.queries.Load() == before {
		t.Error("no query ran: the revision was not analysed")
	}
	if img := primaryImage(t, e); img != "podinfo:1" {
		t.Errorf("the primary runs %s, want podinfo:1", img)
	}
	wantUntrustedWarning(t, *got, "the record carries no MAC")
}

// A StatefulSet's record rewritten to say its rejected revision was promoted: the next apply
// analyses it, and no more pods than its first step run it.
func TestStatefulSetRewrittenRecordIsNotTrusted(t *testing.T) {
	ctx := context.Background()
	rel := statefulSetRelease(Analysis{StepWeight: 20, MaxWeight: 60, Threshold: 1})
	var q MetricQuerier
	e, cs, f, _ := initStatefulSet(t, rel, querierFunc(func(ctx context.Context, s string) (float64, error) { return q.Query(ctx, s) }))
	q = badRevisionQuerier(t, cs, "web:bad")
	setStatefulSetImage(t, cs, "web:bad")
	rejected, err := e.Apply(ctx, rel, nil, recorded2(t, e, "web"))
	if err == nil || rejected.Rejected == nil {
		t.Fatalf("the bad revision = %v; want a rejection", err)
	}
	bad := rejected.Rejected.Revision
	rewriteRecordOf(t, cs, "web", func(st *Status) { st.LastPromotedSpec, st.Rejected = bad, nil })
	setStatefulSetImage(t, cs, "web:bad") // the rollback gave the set its template back
	got := warnings(e)
	st, err := e.Apply(ctx, rel, nil, rejected)
	if err == nil || strings.Contains(st.Message, "nothing to release") {
		t.Fatalf("Apply over the rewritten record = %s %q, %v; want web:bad analysed and rolled back", st.Phase, st.Message, err)
	}
	if images := podImages(t, cs, 5); strings.Join(images, ",") != "web:1,web:1,web:1,web:1,web:1" {
		t.Errorf("pods run %v, want web:1 on all five", images)
	}
	if n := f.most(bad); n != 1 {
		t.Errorf("at most %d pods ran the rejected revision, want 1 (its first step)", n)
	}
	if len(*got) != 1 || !strings.Contains((*got)[0], "the cluster's record of canary_release test/web could not be verified (its MAC does not match") {
		t.Errorf("warnings = %q, want one saying the record could not be verified", *got)
	}
}

// A run killed with the canary holding all the traffic (a blue/green switch, say) leaves it
// there, and the target then changes to podinfo:3. A record put back or rewritten to say an
// initialisation is under way makes the run finish it, which it refuses: podinfo:3 never
// passed analysis. The refusal first gives the primary, which serves, the traffic. Before, it
// left podinfo:3, never analysed, with all the traffic (the campaign's seed 4305).
func TestRefusedReinitialisationMovesTrafficOffTheCanary(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	q := newCountingQuerier(100)
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	promoted, err := e.Apply(ctx, rel, nil, prior)
	if err != nil || primaryImage(t, e) != "podinfo:2" {
		t.Fatalf("releasing podinfo:2: %v", err)
	}
	setImage(t, e, "podinfo", "podinfo:3")
	canary := deployment(t, cs, "podinfo")
	canary.Spec.Replicas = ptr(int32(2))
	if _, err := cs.AppsV1().Deployments("test").Update(ctx, canary, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	rt.w = router.Weights{Canary: 100}
	rt.mu.Unlock()
	rewriteRecord(t, cs, func(st *Status) { st.Phase, st.Initialized, st.LastPromotedSpec = PhaseInitializing, false, "" })

	q.value.Store(50.0)
	rt.history = nil
	st, err := e.Apply(ctx, rel, nil, promoted)
	if err == nil {
		t.Fatalf("Apply = %s %q; want podinfo:3 analysed and refused", st.Phase, st.Message)
	}
	if w, _ := rt.weights(); w != (router.Weights{Primary: 100}) {
		t.Errorf("weights = %+v after %v, want all traffic back on the primary: podinfo:3 never passed analysis", w, err)
	}
	if len(rt.history) == 0 || rt.history[0] != 0 {
		t.Errorf("weights written = %v, want the traffic on the primary first", rt.history)
	}
	if img := primaryImage(t, e); img != "podinfo:2" {
		t.Errorf("the primary runs %s, want podinfo:2 kept", img)
	}
}
