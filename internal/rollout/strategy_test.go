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
		splits = append(splits, fmt.Sprintf("%d/%d%s", w.Primary, w.Canary, map[bool]string{true: "+match"}[w.Matched]))
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
