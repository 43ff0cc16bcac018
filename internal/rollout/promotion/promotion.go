// Package promotion holds the proofs that let a template become a release's primary. A Proof
// can only be made by the constructors below, each of which checks its one rule, and the
// primary's writer takes nothing else: there is no other way to promote.
package promotion

import (
	"fmt"
	"strings"
)

// Route names the rule a proof was made under.
type Route string

// The whole list of ways a template becomes the primary (the invariant's second clause).
const (
	// RouteAnalysis: the template completed its analysis, recorded before the promotion.
	RouteAnalysis Route = "analysis"
	// RouteSkipAnalysis: the release sets skip_analysis.
	RouteSkipAnalysis Route = "skip_analysis"
	// RouteFirstInitialisation: the release was never initialised before.
	RouteFirstInitialisation Route = "first initialisation"
	// RoutePromotedBefore: the template is the one the release last promoted (a re-initialisation
	// after loss, or a primary repaired to what it ran).
	RoutePromotedBefore Route = "promoted before"
	// RouteOperatorPromoteNow: an operator asked to promote now (the canary-release.dev/promote-now
	// annotation), while every check so far had passed, and the run recorded it before the
	// promotion.
	RouteOperatorPromoteNow Route = "operator's promote-now"
	// RouteRollbackWindow: the template is one the release promoted recently (its record's
	// history, within rollback_window), and the run recorded the revert before the promotion.
	RouteRollbackWindow Route = "rollback_window"
)

// Proof says that one revision may become the primary, and why.
type Proof struct {
	revision string
	route    Route
}

// Revision is the revision (template and tracked configs) the proof admits.
func (p Proof) Revision() string { return p.revision }

// Route is the rule the proof was made under.
func (p Proof) Route() Route { return p.route }

// Admits reports whether the proof lets revision become the primary. The zero Proof admits
// nothing.
func (p Proof) Admits(revision string) bool {
	return p.route != "" && revision != "" && p.revision == revision
}

// Analysis proves candidate passed its analysis: passed is the revision whose completed
// analysis the release's record holds, written before the promotion starts.
func Analysis(passed, candidate string) (Proof, error) {
	if passed == "" || passed != candidate {
		return Proof{}, fmt.Errorf("revision %s has no completed analysis on record (the record holds %q)", candidate, passed)
	}
	return Proof{candidate, RouteAnalysis}, nil
}

// SkipAnalysis admits candidate when the release skips its analysis.
func SkipAnalysis(skip bool, candidate string) (Proof, error) {
	if !skip || candidate == "" {
		return Proof{}, fmt.Errorf("revision %s: skip_analysis is not set", candidate)
	}
	return Proof{candidate, RouteSkipAnalysis}, nil
}

// Evidence is what the cluster holds of a release that is about to be initialised.
type Evidence struct {
	// FirstInitRecord is a state record of the release's own first initialisation, unfinished:
	// never initialised, nothing promoted. What that initialisation left is no obstacle.
	FirstInitRecord bool
	// OtherRecord is any other state record of the release.
	OtherRecord bool
	// Primary is the release's primary Deployment; Services its generated Services.
	Primary, Services bool
	// Pinned is a target released in place that shows a revision a release pinned as its
	// primary (mesh.InPlace's Pinned): the release initialised it before.
	Pinned bool
}

// Ran names what shows that the release ran before; empty when nothing does.
func (e Evidence) Ran() []string {
	var seen []string
	if e.OtherRecord {
		seen = append(seen, "its state ConfigMap")
	}
	if !e.FirstInitRecord {
		if e.Primary {
			seen = append(seen, "its primary Deployment")
		}
		if e.Services {
			seen = append(seen, "its generated Services")
		}
		if e.Pinned {
			seen = append(seen, "its target's pinned primary revision")
		}
	}
	return seen
}

// FirstInitialisation admits candidate when nothing shows that the release ever ran beyond
// its own unfinished first initialisation. The caller knows of no promoted template.
func FirstInitialisation(e Evidence, candidate string) (Proof, error) {
	if ran := e.Ran(); len(ran) > 0 || candidate == "" {
		return Proof{}, fmt.Errorf("the release ran before (the cluster holds %s), so this is not its first initialisation", strings.Join(ran, " and "))
	}
	return Proof{candidate, RouteFirstInitialisation}, nil
}

// PromotedBefore admits candidate when it is the revision the release last promoted.
func PromotedBefore(lastPromoted, candidate string) (Proof, error) {
	if lastPromoted == "" || lastPromoted != candidate {
		return Proof{}, fmt.Errorf("revision %s is not the last promoted one (%q)", candidate, lastPromoted)
	}
	return Proof{candidate, RoutePromotedBefore}, nil
}

// OperatorPromoteNow admits candidate when the release's record holds an operator's promote-now
// for that very revision (recorded, the revision it was accepted for), made while no check of
// its analysis had failed (failedChecks, as recorded with it).
func OperatorPromoteNow(recorded string, failedChecks int, candidate string) (Proof, error) {
	switch {
	case recorded == "" || recorded != candidate:
		return Proof{}, fmt.Errorf("revision %s has no operator's promote-now on record (the record holds %q)", candidate, recorded)
	case failedChecks > 0:
		return Proof{}, fmt.Errorf("revision %s: a promote-now is refused after a failed check (%d so far)", candidate, failedChecks)
	}
	return Proof{candidate, RouteOperatorPromoteNow}, nil
}

// RollbackWindow admits candidate when it is one of the templates the release promoted most
// recently: history lists them, the current primary's first, each once, as the release's record
// holds it; revisions is the release's rollback_window.revisions, the number of earlier
// promotions (besides the current one) a revert may return to without analysis. A template
// whose analysis failed is never in the history (the record drops it at the rollback).
func RollbackWindow(history []string, revisions int, candidate string) (Proof, error) {
	if revisions > 0 && candidate != "" {
		for i, promoted := range history {
			if i > revisions {
				break
			}
			if promoted == candidate {
				return Proof{candidate, RouteRollbackWindow}, nil
			}
		}
	}
	return Proof{}, fmt.Errorf("revision %s is not among the last %d promoted templates before the current one (rollback_window.revisions)", candidate, revisions)
}
