package mesh

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// TargetOwner is a driver whose release targets an object of its own kind instead of a
// Deployment: an object whose own controller turns each template into a revision, with its pods,
// and routes between revisions (Knative's Service). The primary is then a pinned revision, not
// a `-primary` copy, and a promotion pins the canary's revision instead of copying a template.
// The engine asks this interface, never a kind, so it names no mesh.
type TargetOwner interface {
	Driver
	// TargetKind is the kind of object the release's target names; it never changes.
	TargetKind() TargetKind
	// NewTarget is the target of one release (s.Target names it).
	NewTarget(c router.Clients, s router.Spec) Target
}

// TargetKind is the kind of a driver-owned target.
type TargetKind struct {
	APIVersion, Kind string
	Resource         schema.GroupVersionResource
}

// Target is one release's driver-owned target. Its revisions are the sides of the split: the
// router's weights go to the pinned primary and the pinned canary revision, never to whatever
// revision the target's controller made last, so a template nobody analysed gets no traffic.
type Target interface {
	// Revisions reads the target's revisions as the release sees them.
	Revisions(ctx context.Context) (Revisions, error)
	// Serving reports whether revision has Ready pods: a side may carry weight only then.
	Serving(ctx context.Context, revision string) (bool, error)
	// PinPrimary makes the revision the proof admits the primary. The engine calls it only from
	// its promotion chokepoint, with a proof (promotion.Proof), so there is no other way in.
	PinPrimary(ctx context.Context, proof Admission) error
	// PinCanary names the revision the canary's weight goes to. It refuses while the canary
	// side carries weight on another revision: a new revision starts at 0.
	PinCanary(ctx context.Context, revision string) error
}

// Revisions are a driver-owned target's revisions; an empty name is none.
type Revisions struct {
	// Primary is the pinned primary revision: the one last promoted.
	Primary string
	// Canary is the pinned canary revision, which the canary's weight goes to.
	Canary string
	// LatestCreated is the revision of the template the user applied last: the next canary.
	// It is empty while the target's controller has not made that revision yet (its status
	// still describes an older template), so the engine waits instead of releasing nothing.
	LatestCreated string
	// LatestReady is the newest revision whose pods are Ready.
	LatestReady string
}

// Admission is what lets a revision become the primary (promotion.Proof): the drivers cannot
// import the engine, whose chokepoint makes the only values that admit anything.
type Admission interface {
	Revision() string
	Admits(revision string) bool
}

// InPlace is a Target released in place (a workload driver's, internal/workload): its
// revisions share the object's own pods, so the canary's weight is a share of those pods and
// the target is its own router. Its SetRoutes moves pods to the canary revision and waits for
// them, and the engine calls it only from its one traffic gate; its PinPrimary rolls every pod
// to the admitted revision (restoring that revision's template when the object holds another),
// and the engine calls it only from its promotion chokepoint. Reconcile only ever takes pods
// away from a revision that was not promoted, never gives it any.
type InPlace interface {
	Target
	router.Router
	// Share counts the pods that run revision against the pods the weight of the step reached
	// allows: an autoscaler's scale-up may give new pods the canary revision whatever the
	// router wrote, and a check of more pods than the step allows judges more than the step.
	// It fails with ErrTemplateChanged when the object no longer makes revision.
	Share(ctx context.Context, revision string, weight int) (Share, error)
	// Queries are the built-in queries of the target's revisions by metric name, and the
	// variables its revisions give every query (the updated and the current revision).
	Queries(ctx context.Context) (queries, variables map[string]string, err error)
	// Pinned is the revision a release pinned as the object's primary, as the object itself
	// shows it (the hold that Reconcile puts on it once a release initialised it, and the
	// revision its held pods run); "" when the object shows no release, or is gone. It is the
	// fallback truth of what was promoted when the release's record is lost, and the sign
	// that a release ran, so that a later initialisation is not taken for a first one.
	Pinned(ctx context.Context) (string, error)
}

// Share is how many of an in-place target's pods run a revision.
type Share struct {
	// On is the pods that run the revision, Of all the target's pods, and Allowed the pods
	// the weight allows.
	On, Of, Allowed int32
}

// ErrTemplateChanged is an in-place target whose template changed behind the release: it no
// longer makes the revision under analysis.
var ErrTemplateChanged = errors.New("the target's template changed during the analysis")
