package rollout

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A record that cannot be verified (seal.go: no key, no MAC, a MAC that does not match, or an
// older sequence than the Terraform state saved) takes the analysed path, never the promoted
// one. Nothing in it may let a template become the primary without an analysis:
//
//   - The last promoted template is the Terraform state's (Terraform owns it), else, with no
//     Terraform state (an import, a create), the template the primary's own annotation
//     (AnnotationPrimarySpec) names, or for a target released in place the revision it shows
//     was pinned (its pods run it). The annotation is written in the same update as the
//     primary's template, and whoever may rewrite it may rewrite the primary's template as
//     well: relying on it gives a writer of Deployments nothing more, and a writer of
//     ConfigMaps nothing at all.
//   - The promoted history restarts from that template, so rollback_window reverts to
//     nothing older until new promotions build it up again.
//   - A run it says stopped in Promoting or Finalising is taken as stopped before its analysis
//     completed: it is rolled back, and the target is analysed again.
//   - What only refuses or routes (a rejection, the owner, the router) is kept: at worst it
//     refuses a revision, or rolls back, which is the side a forgery cannot profit from.
//
// A record that says the release's first initialisation never finished is the exception: it
// stays a first-initialisation record while the release has none of its generated Services,
// and its target released in place is not pinned (a create that stopped before Terraform saved
// its key); its initialisation may promote any template, as a first one does.

// untrusted is the status a run goes by instead of an unverifiable record rec: prior is the
// Terraform state's, primaryRuns the primary's annotation (empty without a primary).
func (rec Status) untrusted(prior Status, primaryRuns string) Status {
	st := rec
	st.LastPromotedSpec = prior.LastPromotedSpec
	if st.LastPromotedSpec == "" {
		st.LastPromotedSpec = primaryRuns
	}
	st.Promoted = nil
	st.PassedSpec, st.Revert, st.PromoteNow = "", "", nil
	if st.Phase.analysed() {
		st.Phase = PhaseProgressing
	}
	return st
}

// UntrustedStatus is untrusted for the provider, which shows it on a refresh or an import of a
// record it cannot verify.
func UntrustedStatus(rec, prior Status, primaryRuns string) Status {
	return rec.untrusted(prior, primaryRuns)
}

// claimsDiffer reports whether the record claims, beyond what untrusted keeps, something that
// would let a template be promoted without analysis under rel.
func (rec Status) claimsDiffer(kept Status, rel Release) bool {
	return rec.LastPromotedSpec != kept.LastPromotedSpec || rec.Phase.analysed() ||
		(rel.RollbackWindow > 0 && len(rec.promotedHistory()) > 1)
}

// claimsFirstInit reports a record of a first initialisation that never finished.
func (rec Status) claimsFirstInit() bool {
	return !rec.Initialized && rec.LastPromotedSpec == "" && rec.Phase == PhaseInitializing
}

// distrust is what loadRecord does with a record it could not verify (why): it returns the
// status the run goes by, and whether the record still counts as a first initialisation's.
func (r *run) distrust(ctx context.Context, rec Status, primaryRuns string, why error) (Status, bool, error) {
	prior := r.st
	if rec.claimsFirstInit() && prior.LastPromotedSpec == "" {
		ran, err := r.anyGeneratedService(ctx)
		if err != nil {
			return Status{}, false, err
		}
		// A target released in place is pinned only after its first initialisation.
		if !ran && r.pinned == "" {
			r.note("the cluster's record of canary_release %s/%s could not be verified (%v); it records a first initialisation that never finished and nothing promoted, "+
				"and the release has no Services yet, so the initialisation carries on as a first one; the record is signed again", r.rel.Namespace, r.rel.Name, why)
			return rec, true, nil
		}
	}
	kept := rec.untrusted(prior, primaryRuns)
	if !rec.claimsDiffer(kept, r.rel) {
		r.note("the cluster's record of canary_release %s/%s could not be verified (%v); it agrees with the Terraform state on what was promoted, which this run goes by; the record is signed again",
			r.rel.Namespace, r.rel.Name, why)
		return kept, false, nil
	}
	r.e.warnUntrusted(r.rel, rec, kept, why)
	return kept, false, nil
}

// warnUntrusted tells, once per run, that the record rec could not be verified (why) and what
// the run goes by instead (kept).
func (e *Engine) warnUntrusted(rel Release, rec, kept Status, why error) {
	promoted := "no template (none is known)"
	if kept.LastPromotedSpec != "" {
		promoted = "template " + kept.LastPromotedSpec
	}
	e.warn(rel, "canary_release record not trusted", fmt.Sprintf("the cluster's record of canary_release %s/%s could not be verified (%v): it is not trusted; the target's template goes through the analysis. "+
		"This run takes as promoted only %s, from the Terraform state or else the primary's own annotation; the record said %q, in phase %s. "+
		"The promoted history for rollback_window starts again from there, and a promotion the record said was under way is rolled back. The run then writes a freshly signed record.",
		rel.Namespace, rel.Name, why, promoted, rec.LastPromotedSpec, phaseName(rec.Phase)))
}

// trustedSequence raises seal's sequence to a verified record's: a record ahead of the
// Terraform state was written by a run that stopped before Terraform saved.
func (seal *Seal) trustedSequence(cs ClusterState) {
	if seal.usable() && seal.Sequence < cs.sealed.sequence {
		seal.Sequence = cs.sealed.sequence
	}
}

// anyGeneratedService reports whether the release owns any of its generated Services (the
// apex, -primary or -canary): a first initialisation writes them last, so with one of them the
// release got further than its first initialisation, whatever an unverified record says (a
// destroy that stopped after deleting some of them leaves the others).
func (r *run) anyGeneratedService(ctx context.Context) (bool, error) {
	for _, name := range []string{r.rel.Apex(), r.rel.Apex() + "-primary", r.rel.Apex() + "-canary"} {
		svc, err := r.e.Kube.CoreV1().Services(r.rel.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return false, err
		}
		if r.w.checkOwned(svc, "Service") == nil {
			return true, nil
		}
	}
	return false, nil
}
