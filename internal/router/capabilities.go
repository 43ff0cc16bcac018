package router

import (
	"errors"
	"fmt"
	"strings"
)

// Capabilities say what a router can do besides, or instead of, a weighted split. Each mesh
// driver declares its own once; its router refuses what it does not declare, rather than
// silently split by weight.
type Capabilities struct {
	// Weighted routers split traffic by percent.
	Weighted bool
	// Match routers can send matching requests to the canary (A/B testing).
	Match bool
	// Mirror routers can copy requests to the canary (Flagger's mirror).
	Mirror bool
	// SessionAffinity routers can keep a client on the side that answered it.
	SessionAffinity bool
	// SelectorOnly routers have no router object: the apex Service's selector is the route, so
	// a weight is a switch (blue/green) or, for a Deployment, a replica ratio of the Ready pods
	// the apex selects on both sides.
	SelectorOnly bool
}

// Offering names the mesh_provider values whose routers have a capability, in the registry's
// order, for errors that point to an alternative. The mesh registry sets it: router cannot
// import the registry, which imports the drivers, which import router.
var Offering = func(has func(Capabilities) bool) []string { return nil }

// Check refuses the parts of w beyond the split that the router cannot write.
func (can Capabilities) Check(provider string, s Spec, w Weights) error {
	switch {
	case w.Matched && !can.Match:
		return MatchUnsupportedError(provider)
	case w.Matched && len(s.Match) == 0:
		return errors.New("A/B testing needs at least one analysis.match condition")
	case w.Mirrored && !can.Mirror:
		return fmt.Errorf("mirroring (analysis.mirror) is not available with mesh_provider %s; it is with %s", provider,
			OrList(Offering(func(c Capabilities) bool { return c.Mirror })))
	case (w.Session != "" || w.Expired != "") && (!can.SessionAffinity || s.SessionAffinity == nil):
		return fmt.Errorf("session affinity (analysis.session_affinity) is not available with mesh_provider %s; it is with %s", provider,
			OrList(Offering(func(c Capabilities) bool { return c.SessionAffinity })))
	case w.Expired != "" && (w.Canary != 0 || w.Session != ""):
		return fmt.Errorf("expiring the session cookie %s while the canary has weight: the cookie is only expired once the release ended", w.Expired)
	}
	return nil
}

// OrList joins names as a reader lists alternatives: "a", "a or b", "a, b or c".
func OrList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// MatchUnsupportedError is SetRoutes' answer to Weights.Matched from a router that cannot
// route by request match.
func MatchUnsupportedError(provider string) error {
	return fmt.Errorf("A/B testing (analysis.match) is not available with mesh_provider %s; it is with %s (gloo in route_table mode)", provider,
		strings.Join(Offering(func(c Capabilities) bool { return c.Match }), ", "))
}
