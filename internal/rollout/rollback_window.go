package rollout

import (
	"context"
	"fmt"
	"slices"

	"github.com/canary-release/terraform-provider-canary/internal/rollout/promotion"
)

// MaxRollbackWindow bounds rollback_window.revisions, and so the promoted-template history
// the state ConfigMap keeps (the current primary's template and this many before it).
const MaxRollbackWindow = 10

// promotedHistory is the record's promoted templates, most recent first, each once: the last
// promoted one leads. Records older than the history (state format 1 and 2), and paths that set
// LastPromotedSpec alone (a record rebuilt from the primary), start it from that one.
func (st *Status) promotedHistory() []string {
	h := slices.Clone(st.Promoted)
	if last := st.LastPromotedSpec; last != "" && (len(h) == 0 || h[0] != last) {
		h = append([]string{last}, slices.DeleteFunc(h, func(s string) bool { return s == last })...)
	}
	if len(h) > MaxRollbackWindow+1 {
		h = h[:MaxRollbackWindow+1]
	}
	return h
}

// notePromoted records revision as the last promoted template, at the head of the history.
func (st *Status) notePromoted(revision string) {
	st.LastPromotedSpec = revision
	st.Promoted = st.promotedHistory()
}

// forgetPromoted drops revision from the history: a template whose analysis failed (or whose
// run rolled back for any reason) is never promoted again without one. The current primary's
// template stays: it serves, and the next promotion pushes it down.
func (st *Status) forgetPromoted(revision string) {
	if revision == "" || revision == st.LastPromotedSpec {
		return
	}
	st.Promoted = slices.DeleteFunc(st.promotedHistory(), func(s string) bool { return s == revision })
}

// revertProof is the promotion proof of a revert within rollback_window: the template the
// target returns to is in the record's history, within the window.
func (r *run) revertProof(revision string) (promotion.Proof, error) {
	return promotion.RollbackWindow(r.st.promotedHistory(), r.rel.RollbackWindow, revision)
}

// revertsWithinWindow reports whether revision would get the rollback_window proof.
func (r *run) revertsWithinWindow(revision string) bool {
	_, err := r.revertProof(revision)
	return err == nil
}

// promotionsAgo is how many promotions back revision was promoted (1 for the one before the
// current primary's), or 0 when the history does not hold it.
func (st *Status) promotionsAgo(revision string) int {
	if i := slices.Index(st.promotedHistory(), revision); i > 0 {
		return i
	}
	return 0
}

// Revert is what the plan says of a revert within rollback_window.
type Revert struct {
	Revision string
	// Ago is how many promotions back the release promoted it.
	Ago int
}

// Revert reports the revert within rollback_window that the apply of rel would promote without
// analysis, if any. It reads the release's record and the target's revision, without the lock;
// rel.Seal is the key and sequence the Terraform state holds.
func (e *Engine) Revert(ctx context.Context, rel Release) (*Revert, error) {
	if rel.RollbackWindow <= 0 {
		return nil, nil
	}
	cs, ok, err := LoadState(ctx, e.Kube, rel.Namespace, rel.Name)
	if err != nil || !ok || cs.Verify(rel.Seal) != nil {
		// An unverifiable record's history is not believed: the apply analyses (untrusted.go).
		return nil, err
	}
	r := e.newRun(rel, cs.Status, nil)
	candidate, err := r.candidateRevision(ctx)
	if err != nil || candidate == r.st.LastPromotedSpec {
		return nil, err
	}
	if !r.revertsWithinWindow(candidate) {
		// The apply analyses it, and the plan says nothing.
		return nil, nil
	}
	return &Revert{Revision: candidate, Ago: r.st.promotionsAgo(candidate)}, nil
}

// Describe is the plan's line for the revert.
func (v *Revert) Describe(revisions int) string {
	return fmt.Sprintf("the target returns to revision %s, which this release promoted %d promotion(s) ago, within rollback_window.revisions (%d): "+
		"it is promoted as soon as the canary is Ready, without analysis (no analysis steps, no canary weight)", v.Revision, v.Ago, revisions)
}

// PromotedHistory is the promoted templates as rollback_window reads them, most recent first.
func (st Status) PromotedHistory() []string { return st.promotedHistory() }
