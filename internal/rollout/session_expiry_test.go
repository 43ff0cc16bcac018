package rollout

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// With session affinity, a release that ends leaves the router expiring the cookies its canary
// handed out: after a promotion, and after the next release's rollback (then the cookies of
// that canary). Until the next release gives the canary weight, the expiry stays, also through
// a run that writes no weight.
func TestEndedReleaseExpiresItsSessionCookies(t *testing.T) {
	sa := &router.SessionAffinity{CookieName: "canary", MaxAge: 60}
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}, SessionAffinity: sa})
	rate := 99.5
	q := querierFunc(func(context.Context, string) (float64, error) { return rate, nil })
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	var sessions []string
	rt.onSet = func(w router.Weights) {
		if w.Session != "" {
			sessions = append(sessions, w.Session)
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply: %v, phase %s", err, st.Phase)
	}
	w, _ := rt.weights()
	if len(sessions) == 0 || w != (router.Weights{Primary: 100, Expired: sessions[0]}) {
		t.Fatalf("weights after the promotion %+v, want 100/0 expiring the canary's cookie %v", w, sessions)
	}
	promoted := sessions[0]

	// The same template again: nothing to release, and the expiry stays.
	if st, err = e.Apply(context.Background(), rel, nil, st); err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	if w, _ := rt.weights(); w.Expired != promoted {
		t.Fatalf("weights %+v after an apply that released nothing, want the expiry of %s kept", w, promoted)
	}

	// The next release rolls back: its own cookie is expired instead.
	target := deployment(t, cs, "podinfo")
	target.Spec.Template.Spec.Containers[0].Image = "podinfo:3"
	if _, err := cs.AppsV1().Deployments("test").Update(context.Background(), target, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rate = 50
	sessions = nil
	_, err = e.Apply(context.Background(), rel, nil, st)
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("Apply error = %v, want a rollback", err)
	}
	w, _ = rt.weights()
	if len(sessions) == 0 || sessions[0] == promoted || w != (router.Weights{Primary: 100, Expired: sessions[0]}) {
		t.Fatalf("weights after the rollback %+v, want 100/0 expiring the rolled-back canary's cookie %v (not %s)", w, sessions, promoted)
	}
}
