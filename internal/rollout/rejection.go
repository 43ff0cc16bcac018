package rollout

import (
	"context"
	"fmt"
	"time"
)

// A rejected revision stays rejected. When an analysis fails (a check at the threshold, a
// rollback webhook, an operator's abort), the cluster's record keeps the revision, when and
// why. A later apply whose target still holds that revision refuses it before it writes
// anything of it, so an unattended apply never shows it to users again; the plan warns. The
// user retries it on purpose by changing retry_rejected, or releases another template.

// Rejection is a revision a failed analysis rejected.
type Rejection struct {
	Revision string    `json:"revision"`
	At       time.Time `json:"at"`
	// Check names what failed: a metric, a webhook, "abort".
	Check  string `json:"check"`
	Reason string `json:"reason"`
	// Retry is the release's retry_rejected when the revision was rejected.
	Retry string `json:"retry,omitempty"`
}

// OperatorAction is an operator's control that a run recorded: for which revision, who set it
// (the field manager) and when, and the failed checks the run had counted then.
type OperatorAction struct {
	Revision     string    `json:"revision"`
	Manager      string    `json:"manager,omitempty"`
	At           time.Time `json:"at"`
	FailedChecks int       `json:"failedChecks"`
}

// Holds reports whether the rejection still holds for candidate under the release's
// retry_rejected: the same revision, never promoted since, and no deliberate retry.
func (j *Rejection) Holds(candidate, lastPromoted, retry string) bool {
	return j != nil && candidate != "" && candidate == j.Revision && candidate != lastPromoted && retry == j.Retry
}

// Describe says which revision was rejected, when and by which check.
func (j *Rejection) Describe() string {
	return fmt.Sprintf("revision %s was rejected at %s: its analysis failed on %s (%s)",
		j.Revision, j.At.UTC().Format(time.RFC3339), j.Check, j.Reason)
}

// Remedy is what the user may do about a rejected revision.
func (j *Rejection) Remedy() string {
	return "To release another template, change the target's pod template (a new image, a changed config) and apply. " +
		"To analyse this revision again on purpose, set retry_rejected to a new value (any string, for example the date) and apply"
}

// rejectionHolds finds whether the release's record rejects what the target (or the manifest)
// holds now. It reads, and writes nothing.
func (r *run) rejectionHolds(ctx context.Context) (*Rejection, error) {
	j := r.st.Rejected
	if j == nil || j.Retry != r.rel.RetryRejected {
		return nil, nil
	}
	candidate, err := r.candidateRevision(ctx)
	if err != nil {
		return nil, err
	}
	if !j.Holds(candidate, r.st.LastPromotedSpec, r.rel.RetryRejected) {
		return nil, nil
	}
	return j, nil
}

// refuseRejected fails the apply of a rejected revision before anything of it is written.
func (r *run) refuseRejected(ctx context.Context) error {
	j, err := r.rejectionHolds(ctx)
	if err != nil || j == nil {
		return err
	}
	return &Failure{Status: r.st, Reason: fmt.Sprintf("canary_release %s/%s refuses the target's template: %s. This apply changed nothing, and no user was sent to it. %s.",
		r.rel.Namespace, r.rel.Name, j.Describe(), j.Remedy())}
}

// recordRejection keeps, in the status of a run that rolls back, the rejection that caused it.
func (r *run) recordRejection() {
	if r.rejection == nil || r.hash == "" {
		return
	}
	j := *r.rejection
	j.Revision, j.At, j.Retry = r.hash, r.e.now().UTC().Truncate(time.Second), r.rel.RetryRejected
	r.st.Rejected = &j
	r.rejection = nil
}

// Rejection reports the rejection that the apply of rel would refuse, if any: the plan warns of
// it. It reads the release's record and the target's revision, without the release's lock.
func (e *Engine) Rejection(ctx context.Context, rel Release) (*Rejection, error) {
	e.bindTarget(rel)
	cs, ok, err := LoadState(ctx, e.Kube, rel.Namespace, rel.Name)
	if err != nil || !ok {
		return nil, err
	}
	r := e.newRun(rel, cs.Status, nil)
	return r.rejectionHolds(ctx)
}

// candidateRevision is the revision the target would run, read without applying a manifest.
func (r *run) candidateRevision(ctx context.Context) (string, error) {
	if r.e.Owned != nil {
		// A driver-owned target's next revision is the one its controller made last.
		revs, err := r.e.Owned.Revisions(ctx)
		return revs.LatestCreated, err
	}
	if r.rel.Manifest != nil {
		return r.w.manifestTemplate(ctx)
	}
	target, err := r.w.target(ctx)
	if err != nil {
		return "", err
	}
	return r.w.revision(ctx, target)
}
