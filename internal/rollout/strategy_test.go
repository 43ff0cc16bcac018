package rollout

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// recordSplits keeps every split the engine writes, as words.
func recordSplits(rt *fakeRouter) *[]string {
	var splits []string
	rt.onSet = func(w router.Weights) {
		splits = append(splits, fmt.Sprintf("%d/%d%s%s%s", w.Primary, w.Canary, map[bool]string{true: "+match"}[w.Matched],
			map[bool]string{true: "+mirror"}[w.Mirrored], map[bool]string{true: "+session"}[w.Session != ""]))
	}
	return &splits
}

// A/B testing: every iteration sends the matching requests to the canary with the weights at
// 100/0; the promotion takes the match away.
func TestABTestingRun(t *testing.T) {
	match := []router.Match{{Headers: map[string]router.StringMatch{"x-canary": {Exact: "insider"}}}}
	rel := testRelease(Analysis{Iterations: 3, Threshold: 1, Match: match})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	splits := recordSplits(rt)
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("phase %s, error %v", st.Phase, err)
	}
	if got := strings.Join(*splits, " "); got != "100/0+match 100/0+match 100/0+match 100/0" {
		t.Errorf("splits = %s", got)
	}
	if live, _ := rt.weights(); live.Matched || st.Matched {
		t.Errorf("live %+v, recorded matched %v after the promotion", live, st.Matched)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary runs %s", img)
	}
}

// A failing A/B run rolls back: the match goes, and the message says where the run was.
func TestABTestingRollback(t *testing.T) {
	match := []router.Match{{Headers: map[string]router.StringMatch{"x-canary": {Exact: "insider"}}}}
	rel := testRelease(Analysis{Iterations: 3, Threshold: 1, Match: match, Metrics: []Metric{successRate(99)}})
	failing := querierFunc(func(context.Context, string) (float64, error) { return 50, nil })
	e, _, rt, prior := setup(t, rel, failing, "podinfo:2")
	_, err := e.Apply(context.Background(), rel, nil, prior)
	if err == nil || !strings.Contains(err.Error(), "Canary analysis failed at requests matching analysis.match on the canary") {
		t.Fatalf("error = %v", err)
	}
	if live, _ := rt.weights(); live.Matched || live.Canary != 0 {
		t.Errorf("live %+v after the rollback", live)
	}
}

// Blue/green: the iterations keep all user traffic on the primary, then one interval sends all
// of it to the canary, then the promotion brings it back.
func TestBlueGreenRun(t *testing.T) {
	rel := testRelease(Analysis{Iterations: 2, Threshold: 1})
	e, _, rt, prior := setup(t, rel, nil, "podinfo:2")
	splits := recordSplits(rt)
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("phase %s, error %v", st.Phase, err)
	}
	if got := strings.Join(*splits, " "); got != "100/0 100/0 0/100 100/0" {
		t.Errorf("splits = %s", got)
	}
}

// Mirroring, as in Flagger: one interval mirrored at weight 0 before the first step.
func TestMirroredCanaryRun(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Mirror: true})
	e, _, rt, prior := setup(t, rel, nil, "podinfo:2")
	splits := recordSplits(rt)
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("phase %s, error %v", st.Phase, err)
	}
	if got := strings.Join(*splits, " "); got != "100/0+mirror 50/50 100/0" {
		t.Errorf("splits = %s", got)
	}
	if st.Mirrored {
		t.Error("recorded mirrored after the promotion")
	}
}

// A canary failing on mirrored requests rolls back before it gets weight, and the mirror goes.
func TestMirroredCanaryRollback(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Mirror: true, Metrics: []Metric{successRate(99)}})
	failing := querierFunc(func(context.Context, string) (float64, error) { return 0, nil })
	e, _, rt, prior := setup(t, rel, failing, "podinfo:2")
	splits := recordSplits(rt)
	_, err := e.Apply(context.Background(), rel, nil, prior)
	if err == nil || !strings.Contains(err.Error(), "Canary analysis failed at canary weight 0%, requests mirrored to the canary") {
		t.Fatalf("error = %v", err)
	}
	if got := strings.Join(*splits, " "); got != "100/0+mirror 100/0" {
		t.Errorf("splits = %s", got)
	}
	if live, _ := rt.weights(); live.Mirrored {
		t.Errorf("live %+v after the rollback", live)
	}
}

// Session affinity: every split that gives the canary weight carries the revision's cookie
// value; the split back to the primary carries none. Another revision gets another value.
func TestSessionCookieFollowsTheRevision(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{10, 20}, Threshold: 1, SessionAffinity: &router.SessionAffinity{CookieName: "canary"}})
	e, _, rt, prior := setup(t, rel, nil, "podinfo:2")
	var sessions []string
	rt.onSet = func(w router.Weights) { sessions = append(sessions, w.Session) }
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("phase %s, error %v", st.Phase, err)
	}
	want := sessionValue(rel, st.LastPromotedSpec)
	if len(sessions) != 3 || sessions[0] != want || sessions[1] != want || sessions[2] != "" {
		t.Fatalf("session values %q, want %q twice then none", sessions, want)
	}
	if other := sessionValue(rel, "another-revision"); other == want {
		t.Errorf("two revisions share the cookie value %q", want)
	}
}
