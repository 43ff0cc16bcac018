package rollout

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/alert"
	"github.com/canary-release/terraform-provider-canary/internal/webhook"
)

// hookServer answers each path with the status its handler gives, and records the calls.
type hookServer struct {
	*httptest.Server
	mu    sync.Mutex
	calls []hookCall
}

type hookCall struct {
	path    string
	payload webhook.Payload
	weight  int
}

func newHookServer(t *testing.T, rt *fakeRouter, status func(path string, n int) int) *hookServer {
	t.Helper()
	s := &hookServer{}
	counts := map[string]int{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p webhook.Payload
		_ = json.NewDecoder(r.Body).Decode(&p)
		s.mu.Lock()
		counts[r.URL.Path]++
		n := counts[r.URL.Path]
		weight := 0
		if rt != nil {
			live, _ := rt.weights()
			weight = live.Canary
		}
		s.calls = append(s.calls, hookCall{path: r.URL.Path, payload: p, weight: weight})
		s.mu.Unlock()
		w.WriteHeader(status(r.URL.Path, n))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *hookServer) paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.calls {
		if len(out) == 0 || out[len(out)-1] != c.path {
			out = append(out, c.path)
		}
	}
	return out
}

func (s *hookServer) callsTo(path string) []hookCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []hookCall
	for _, c := range s.calls {
		if c.path == path {
			out = append(out, c)
		}
	}
	return out
}

func hook(srv *hookServer, typ string) Webhook {
	return Webhook{Name: typ, Type: typ, URL: srv.URL + "/" + typ, Timeout: time.Second}
}

// Every hook type is called at its moment, in Flagger's order, with Flagger's payload.
func TestEveryHookTypeAtItsMoment(t *testing.T) {
	var srv *hookServer
	rel := testRelease(Analysis{StepWeights: []int{20, 40}, Threshold: 1})
	e, _, rt, prior := setup(t, rel, nil, "podinfo:2")
	srv = newHookServer(t, rt, func(path string, _ int) int {
		if path == "/rollback" {
			return http.StatusForbidden // a closed rollback gate asks for nothing
		}
		return http.StatusOK
	})
	for _, typ := range HookTypes {
		rel.Analysis.Webhooks = append(rel.Analysis.Webhooks, hook(srv, typ))
	}
	if _, err := e.Apply(context.Background(), rel, nil, prior); err != nil {
		t.Fatal(err)
	}
	var gates []string
	for _, p := range srv.paths() {
		if p != "/event" && p != "/rollback" && p != "/rollout" {
			gates = append(gates, p)
		}
	}
	want := "/confirm-rollout /pre-rollout /confirm-traffic-increase /confirm-traffic-increase /confirm-promotion /post-rollout"
	if got := strings.Join(gates, " "); got != want {
		t.Errorf("gates and hooks in order: %s\nwant %s", got, want)
	}
	if n := len(srv.callsTo("/rollout")); n != 2 {
		t.Errorf("rollout hook called %d times, want once per step", n)
	}
	if n := len(srv.callsTo("/rollback")); n != 2 {
		t.Errorf("rollback hook called %d times, want once per interval", n)
	}
	increases := srv.callsTo("/confirm-traffic-increase")
	if increases[0].weight != 0 || increases[1].weight != 20 {
		t.Errorf("confirm-traffic-increase at weights %d and %d, want before each increase (0, 20)", increases[0].weight, increases[1].weight)
	}
	events := srv.callsTo("/event")
	if len(events) < 4 {
		t.Fatalf("%d events, want every phase change and step", len(events))
	}
	first := events[0].payload
	if first.Name != "podinfo" || first.Namespace != "test" || first.Metadata["eventMessage"] == "" ||
		first.Metadata["eventType"] != "Normal" || first.Metadata["timestamp"] == "" {
		t.Errorf("event payload = %+v, want Flagger's event metadata", first)
	}
	post := srv.callsTo("/post-rollout")[0].payload
	if post.Phase != string(PhaseSucceeded) || post.Checksum == "" {
		t.Errorf("post-rollout payload = %+v", post)
	}
}

// A closed confirm-promotion gate holds the canary at its last weight, with its checks
// running, until it opens; then the release promotes.
func TestConfirmPromotionHoldsThenOpens(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{30}, Threshold: 1})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	srv := newHookServer(t, rt, func(path string, n int) int {
		if path == "/confirm-promotion" && n < 4 {
			return http.StatusForbidden
		}
		return http.StatusOK
	})
	rel.Analysis.Webhooks = []Webhook{hook(srv, HookConfirmPromotion), hook(srv, HookRollout)}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("phase %s, error %v", st.Phase, err)
	}
	for _, c := range srv.callsTo("/confirm-promotion") {
		if c.weight != 30 {
			t.Errorf("gate asked at weight %d, want the canary held at 30", c.weight)
		}
	}
	if n := len(srv.callsTo("/rollout")); n < 4 {
		t.Errorf("rollout hook called %d times: the checks must keep running while the gate holds", n)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary runs %s after the gate opened", img)
	}
}

// gate_timeout rolls back a gate that stays closed, naming it.
func TestGateTimeoutRollsBackNamingTheGate(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{30}, Threshold: 1, GateTimeout: 30 * time.Millisecond})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	srv := newHookServer(t, rt, func(string, int) int { return http.StatusForbidden })
	gate := hook(srv, HookConfirmPromotion)
	gate.Name = "approval"
	rel.Analysis.Webhooks = []Webhook{gate}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err == nil || !strings.Contains(err.Error(), "the confirm-promotion gate approval stayed closed for 30ms (analysis.gate_timeout)") {
		t.Fatalf("error = %v, want the gate timeout naming the gate", err)
	}
	if live, _ := rt.weights(); live.Canary != 0 || st.Phase != PhaseFailed {
		t.Errorf("phase %s, live canary weight %d after the gate timed out", st.Phase, live.Canary)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("primary runs %s: a gate that never opened promoted", img)
	}
}

// A rollback webhook that answers success rolls back at once, whatever the threshold.
func TestRollbackHookRollsBackAtOnce(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{10, 20, 30, 40}, Threshold: 10})
	e, _, rt, prior := setup(t, rel, nil, "podinfo:2")
	srv := newHookServer(t, rt, func(path string, n int) int {
		if path == "/rollback" && n >= 2 {
			return http.StatusOK
		}
		return http.StatusForbidden
	})
	abort := hook(srv, HookRollback)
	abort.Name = "abort"
	rel.Analysis.Webhooks = []Webhook{abort}
	_, err := e.Apply(context.Background(), rel, nil, prior)
	if err == nil || !strings.Contains(err.Error(), "the rollback webhook abort asked for a rollback at canary weight 20%") {
		t.Fatalf("error = %v, want the rollback webhook named at the second step", err)
	}
}

// A failed post-rollout webhook is reported, and the verdict stands.
func TestPostRolloutFailureIsReported(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{50}, Threshold: 1})
	e, _, rt, prior := setup(t, rel, nil, "podinfo:2")
	srv := newHookServer(t, rt, func(path string, _ int) int {
		if path == "/post-rollout" {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	rel.Analysis.Webhooks = []Webhook{hook(srv, HookPostRollout)}
	var warnings []string
	e.Warn = func(summary, detail string) { warnings = append(warnings, summary+": "+detail) }
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("phase %s, error %v: a post-rollout failure must not change the verdict", st.Phase, err)
	}
	if !strings.Contains(st.Message, "post-rollout webhook post-rollout failed: status 500") || len(warnings) != 1 {
		t.Errorf("message %q, warnings %v: the failure must be reported", st.Message, warnings)
	}
}

// Alerts hear of a promotion and of a rollback (with error severity), in the services' own
// formats; an alert that cannot be delivered is a warning, not a changed verdict.
func TestAlertsOnPromotionAndRollback(t *testing.T) {
	srv := newHookServer(t, nil, func(path string, _ int) int {
		if path == "/broken" {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	alerts := []alert.Alert{
		{Name: "team", Provider: alert.Provider{Type: "slack", Address: srv.URL + "/slack-hook"}},
		{Name: "pager", Severity: "error", Provider: alert.Provider{Type: "generic", Address: srv.URL + "/generic"}},
		{Name: "broken", Provider: alert.Provider{Type: "generic", Address: srv.URL + "/broken"}},
	}
	rel := testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Alerts: alerts})
	e, _, _, prior := setup(t, rel, nil, "podinfo:2")
	var warnings []string
	e.Warn = func(summary, _ string) { warnings = append(warnings, summary) }
	if st, err := e.Apply(context.Background(), rel, nil, prior); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("phase %s, error %v: an undelivered alert must not change the verdict", st.Phase, err)
	}
	slack := srv.callsTo("/slack-hook")
	if len(slack) != 3 { // Initialized (setup), Progressing, Succeeded
		t.Errorf("slack alerts: %d, want the initialisation, the new revision and the success", len(slack))
	}
	if n := len(srv.callsTo("/generic")); n != 0 {
		t.Errorf("an error-severity alert heard of a promotion (%d calls)", n)
	}
	if len(warnings) == 0 || warnings[0] != "canary_release alert not delivered" {
		t.Errorf("warnings = %v, want the undelivered alert reported", warnings)
	}

	// A rollback: the error-severity alert hears of it.
	rel.Analysis.Webhooks = []Webhook{{Name: "gate", Type: HookPreRollout, URL: srv.URL + "/broken", Timeout: time.Second}}
	e2, _, _, prior2 := setup(t, rel, nil, "podinfo:3")
	if _, err := e2.Apply(context.Background(), rel, nil, prior2); err == nil {
		t.Fatal("the failing pre-rollout hook must roll back")
	}
	generic := srv.callsTo("/generic")
	if len(generic) != 1 || generic[0].payload.Metadata["eventType"] != "Warning" ||
		!strings.Contains(generic[0].payload.Metadata["eventMessage"], "pre-rollout webhook gate failed") {
		t.Errorf("generic alerts on rollback = %+v, want one Warning naming the failed check", generic)
	}
}
