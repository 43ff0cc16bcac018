package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Traffic moves only through these functions, which keep the invariant's first rule: a side
// gets weight only while it has Ready pods (the gate, gate.go), and loses its pods only after
// the router, read back, sends it nothing and the data plane had the drain delay to catch up.
// setSplitVia is the only caller of Router.SetRoutes (TestOneWeightWriter checks it).

// setCanaryWeight writes the split; the router verifies it by reading the object back. When
// the write fails, the status takes the live weight instead, so that whatever is recorded next
// tells where traffic really is, not where it was meant to go.
func (r *run) setCanaryWeight(ctx context.Context, canary int) error {
	return r.setSplit(ctx, router.Weights{Primary: 100 - canary, Canary: canary})
}

// setSplit is setCanaryWeight for any split, A/B matching and mirroring included. With
// session affinity, a canary with weight keeps the clients it answered.
func (r *run) setSplit(ctx context.Context, w router.Weights) error {
	return r.setSplitVia(ctx, nil, w)
}

// setSplitVia is setSplit through old, the router the release takes the traffic over from (see
// takeOverRouting), or, when nil, the release's own. It is the traffic gate's one writer.
func (r *run) setSplitVia(ctx context.Context, old router.Router, w router.Weights) error {
	rt := r.e.Router
	if old != nil {
		rt = old
	}
	if r.rel.Analysis.SessionAffinity != nil && old == nil {
		if w.Canary > 0 {
			w.Session = sessionValue(r.rel, r.st.LastAppliedSpec)
		} else {
			w.Expired = r.expiringSession()
		}
	}
	if err := r.admit(ctx, w); err != nil {
		return err
	}
	if r.inPlace() != nil && w.Canary > r.split().Canary {
		// A target released in place is its own router: its record is the only place that
		// tells the step reached, so the step is recorded ahead of the pods it moves.
		r.st.CanaryWeight = w.Canary
		if err := r.save(ctx); err != nil {
			r.syncLiveWeight(ctx)
			return err
		}
	}
	// The kubernetes router writes the apex Service: the run's copy of it is old from now on.
	r.services = nil
	if err := rt.SetRoutes(ctx, w); err != nil {
		if old == nil {
			r.syncLiveWeight(ctx)
		}
		return err
	}
	if rounding, ok := rt.(router.Rounding); ok {
		// A replica ratio gives the canary its share in whole pods: record that share.
		w = rounding.Written(w)
	}
	r.st.recordSplit(w)
	r.report(Progress{Kind: ProgressWeight, Message: splitText(w)})
	return nil
}

// WithLiveSplit is st with the router's live split when its phase is active: a run writes
// its state before each phase and the router at each step, so while a run is under way, or
// after it stopped half-way, the router holds the weights. A router that cannot be read
// leaves st as recorded.
func WithLiveSplit(ctx context.Context, rt router.Router, st Status) Status {
	if !st.Phase.active() {
		return st
	}
	if live, err := rt.GetRoutes(ctx); err == nil {
		st.recordSplit(live)
	}
	return st
}

// split is the split the status records.
func (r *run) split() router.Weights { return r.st.recordedSplit() }

// recordSplit records where w sends traffic, and the session cookie its router expires: a
// canary with weight hands cookies out again, a split that expires none keeps the record.
func (s *Status) recordSplit(w router.Weights) {
	s.CanaryWeight, s.Matched, s.Mirrored = w.Canary, w.Matched, w.Mirrored
	switch {
	case w.Canary > 0:
		s.ExpiredSession = ""
	case w.Expired != "":
		s.ExpiredSession = w.Expired
	}
}

// expiringSession is the session cookie value a split without canary weight expires: that of
// the revision whose canary had weight until now, or else the one expired already, so that the
// route expiring a release's cookies stays until the next release gives the canary weight.
func (r *run) expiringSession() string {
	if r.split().Canary > 0 {
		return sessionValue(r.rel, r.st.LastAppliedSpec)
	}
	return r.st.ExpiredSession
}

// recordedSplit is the split the status records (the session cookie aside).
func (s Status) recordedSplit() router.Weights {
	return router.Weights{Primary: 100 - s.CanaryWeight, Canary: s.CanaryWeight, Matched: s.Matched, Mirrored: s.Mirrored}
}

// sessionValue is the session-affinity cookie value of one revision of a release: a new
// revision gets new cookies, so clients of an earlier canary are not held on this one.
func sessionValue(rel Release, revision string) string {
	sum := sha256.Sum256([]byte(rel.Namespace + "/" + rel.Name + "/" + revision))
	return hex.EncodeToString(sum[:])[:16]
}

// canaryHasTraffic reports a split that sends the canary anything, mirrored copies included.
func canaryHasTraffic(w router.Weights) bool { return w.Canary != 0 || w.Matched || w.Mirrored }

// syncLiveWeight sets the status's canary weight to the router's live one, when it can be read.
func (r *run) syncLiveWeight(ctx context.Context) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if live, err := r.e.Router.GetRoutes(cctx); err == nil {
		r.st.recordSplit(live)
	}
}

// routeToPrimary sends all traffic to the primary and then scales the canary to zero. The
// caller has checked that the primary serves. When this run sent the canary traffic, the
// write goes without a read first: the router writes onto the object its last write returned,
// and the API server refuses that write (then it reads) if anyone changed the object since.
// Otherwise the live weights are read, in case someone else did.
func (r *run) routeToPrimary(ctx context.Context) error {
	return r.routeToPrimaryDraining(ctx, func(ctx context.Context) error { return sleep(ctx, r.e.drainDelay()) })
}

// routeToPrimaryDraining is routeToPrimary with drain as the wait between the write and the
// canary's scale-down.
func (r *run) routeToPrimaryDraining(ctx context.Context, drain func(context.Context) error) error {
	hasTraffic := canaryHasTraffic(r.split())
	if !hasTraffic {
		live, err := r.e.Router.GetRoutes(ctx)
		if err != nil {
			return fmt.Errorf("reading the live weights: %w", err)
		}
		hasTraffic = canaryHasTraffic(live)
	}
	if hasTraffic {
		if err := r.setCanaryWeight(ctx, 0); err != nil {
			return fmt.Errorf("routing traffic back to the primary: %w", err)
		}
		// The canary's pods keep serving what the data plane still sends them.
		if err := drain(ctx); err != nil {
			return err
		}
	}
	r.st.recordSplit(router.Weights{Primary: 100})
	return r.w.scale(ctx, r.rel.Target, 0)
}

// routeToCanary sends all traffic to the canary, which must run a template that passed. A
// canary without Ready pods gets nothing: traffic stays where it is.
func (r *run) routeToCanary(ctx context.Context) error {
	serves, err := r.w.serving(ctx, r.rel.Target)
	if err != nil {
		return fmt.Errorf("checking the canary: %w", err)
	}
	if !serves {
		return fmt.Errorf("the canary %s has no Ready pods", r.rel.Target)
	}
	return r.setCanaryWeight(ctx, 100)
}

// whereTraffic words the live split for a message.
func (r *run) whereTraffic(ctx context.Context) string {
	live, err := r.e.Router.GetRoutes(ctx)
	if err != nil {
		return fmt.Sprintf("the live weights could not be read (%v)", err)
	}
	return trafficText(r.rel, live)
}

// trafficText words where the split live sends a release's traffic.
func trafficText(rel Release, live router.Weights) string {
	switch {
	case live.Matched:
		return fmt.Sprintf("requests matching analysis.match go to the canary %s and the rest to the primary %s", rel.Target, rel.PrimaryName())
	case live.Mirrored && live.Canary == 0:
		return fmt.Sprintf("100%% of traffic is on the primary %s, and requests are mirrored to the canary %s", rel.PrimaryName(), rel.Target)
	case live.Canary == 0:
		return fmt.Sprintf("100%% of traffic is on the primary %s", rel.PrimaryName())
	case live.Canary == 100:
		return fmt.Sprintf("100%% of traffic is on the canary %s", rel.Target)
	}
	return fmt.Sprintf("%d%% of traffic is on the primary %s and %d%% on the canary %s", live.Primary, rel.PrimaryName(), live.Canary, rel.Target)
}
