package provider

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/faultproxy"
)

// A chaos schedule is drawn from its seed alone, so a seed printed by a failure replays the
// same choices (not the same timing: the stack is real).

// chaosPoint is a moment of the interrupted apply: a recorded phase at a live canary weight.
type chaosPoint struct {
	phase  rollout.Phase
	weight int
	// anyWeight matches the phase at whatever weight (blue/green, rollback).
	anyWeight bool
}

func (p chaosPoint) matches(st rollout.Status) bool {
	return st.Phase == p.phase && (p.anyWeight || st.CanaryWeight == p.weight)
}

func (p chaosPoint) String() string {
	if p.anyWeight {
		return string(p.phase)
	}
	return fmt.Sprintf("%s at canary weight %d%%", p.phase, p.weight)
}

// sabotage is an out-of-band change to the release's objects.
type sabotage int

const (
	noSabotage sabotage = iota
	deleteStateConfigMap
	deletePrimary
	// scaleCanaryToZero and makeCanaryUnready take the canary's Ready pods away, as an
	// eviction or a failing readiness probe would.
	scaleCanaryToZero
	makeCanaryUnready
)

func (s sabotage) String() string {
	return [...]string{"nothing", "delete the state ConfigMap", "delete the -primary copy",
		"scale the canary to 0", "mark the canary's pods unready"}[s]
}

func (s sabotage) losesCanary() bool { return s == scaleCanaryToZero || s == makeCanaryUnready }

// prometheusOutage is when Prometheus stops answering during the interrupted apply.
type prometheusOutage int

const (
	prometheusUp prometheusOutage = iota
	prometheusDownFromStart
	prometheusDownAtPoint
)

type chaosSchedule struct {
	seed uint64
	// bad: the new template fails half of its requests, so its analysis must fail.
	bad bool
	// gate: a confirm-promotion webhook holds the run in WaitingPromotion for a while.
	gate bool
	// point is when the kill and the sabotage happen; nil: the apply runs to its end.
	point *chaosPoint
	kill  bool
	// sabotage happens at the point, or after the kill when sabotageAfterKill.
	sabotage          sabotage
	sabotageAfterKill bool
	// fault is an API fault injected during the interrupted apply; nil: none.
	fault      *faultproxy.Rule
	prometheus prometheusOutage
}

// newChaosSchedule draws a schedule for a router: a good or bad template, and at least one of a
// kill, a sabotage, an API fault and a Prometheus outage.
func newChaosSchedule(r chaosRouter, seed uint64) chaosSchedule {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	chance := func(percent int) bool { return rng.IntN(100) < percent }
	s := chaosSchedule{seed: seed, bad: chance(40)}
	s.gate = !s.bad && !r.blueGreen && chance(30)

	points := r.points(s.bad, s.gate)
	point := points[rng.IntN(len(points))]
	s.kill = chance(65)
	if chance(45) {
		kinds := r.workload().sabotages
		s.sabotage = kinds[rng.IntN(len(kinds))]
		// A canary's lost pods are the run's to react to; deletions may also come while
		// nothing runs.
		s.sabotageAfterKill = s.kill && !s.sabotage.losesCanary() && chance(50)
	}
	if chance(40) {
		s.fault = r.randomFault(rng)
	}
	switch rng.IntN(5) {
	case 0:
		s.prometheus = prometheusDownFromStart
	case 1:
		s.prometheus = prometheusDownAtPoint
	}
	if !s.kill && s.sabotage == noSabotage && s.fault == nil && s.prometheus == prometheusUp {
		s.kill = true
	}
	if s.kill || s.sabotage != noSabotage || s.prometheus == prometheusDownAtPoint {
		s.point = &point
	}
	return s
}

// points are the moments of a release of the router worth interrupting.
func (r chaosRouter) points(bad, gate bool) []chaosPoint {
	inPhase := func(phase rollout.Phase) chaosPoint { return chaosPoint{phase: phase, anyWeight: true} }
	at := func(phase rollout.Phase, weight int) chaosPoint { return chaosPoint{phase: phase, weight: weight} }
	switch {
	case r.blueGreen && bad:
		return []chaosPoint{inPhase(rollout.PhaseProgressing), inPhase(rollout.PhaseRollingBack)}
	case r.blueGreen:
		return []chaosPoint{inPhase(rollout.PhaseProgressing), inPhase(rollout.PhasePromoting), inPhase(rollout.PhaseFinalising)}
	}
	// killAnalysis: steps of 10 up to 30, then back to the primary 10 at a time; in place,
	// steps of whole pods and every pod at once.
	steps := r.inPlaceSteps
	if steps == nil {
		steps = []int{10, 20, 30}
	}
	if bad {
		// The analysis fails at the first step.
		return []chaosPoint{at(rollout.PhaseProgressing, 0), at(rollout.PhaseProgressing, steps[0]), inPhase(rollout.PhaseRollingBack)}
	}
	points := []chaosPoint{at(rollout.PhaseProgressing, 0)}
	for _, w := range steps {
		points = append(points, at(rollout.PhaseProgressing, w))
	}
	points = append(points, inPhase(rollout.PhasePromoting))
	if r.inPlaceSteps == nil {
		points = append(points, at(rollout.PhaseFinalising, 20), at(rollout.PhaseFinalising, 10))
	}
	if gate {
		points = append(points, inPhase(rollout.PhaseWaitingPromotion))
	}
	return points
}

// randomFault is an API fault on one of the objects a release reads and writes: the router
// object, the state ConfigMap and the kind's own (a Deployment's: the canary's scale and the
// primary).
func (r chaosRouter) randomFault(rng *rand.Rand) *faultproxy.Rule {
	paths := append([]string{r.routesPath()}, r.workload().faultPaths...)
	// An empty method fails reads too.
	methods := []string{"", "PUT", "PATCH", "POST", "DELETE"}
	actions := []faultproxy.Action{faultproxy.Conflict, faultproxy.InternalError, faultproxy.ServiceUnavailable,
		faultproxy.TooManyRequests, faultproxy.DropRequest, faultproxy.DropResponse}
	rule := faultproxy.Rule{
		Path:   paths[rng.IntN(len(paths))],
		Method: methods[rng.IntN(len(methods))],
		After:  rng.IntN(5),
		Times:  1 + rng.IntN(3),
		Action: actions[rng.IntN(len(actions))],
	}
	if rng.IntN(4) == 0 {
		rule.Times = 0 // until the recovery apply
	}
	if rule.Action == faultproxy.DropResponse && rule.Method == "" {
		// A dropped response waits for the response to end, which a watch never does.
		rule.Method = "PUT"
	}
	if slices.Contains(r.workload().readOnlyPaths, rule.Path) {
		// Only reads reach it: the fault hits them (a dropped request, not a dropped response,
		// which a watch on the same path would never end).
		rule.Method = "GET"
		if rule.Action == faultproxy.DropResponse {
			rule.Action = faultproxy.DropRequest
		}
	}
	return &rule
}

// routesPath matches the router object's URL path, in any namespace.
func (r chaosRouter) routesPath() string {
	gvr := r.routes.gvr
	prefix := "/apis/" + strings.ReplaceAll(gvr.Group, ".", `\.`) + "/" + gvr.Version
	if gvr.Group == "" {
		prefix = "/api/" + gvr.Version
	}
	return "^" + prefix + "/namespaces/[^/]+/" + gvr.Resource + "/" + r.routes.name + "$"
}

func (s chaosSchedule) String() string {
	var parts []string
	if s.bad {
		parts = append(parts, "a bad template")
	} else {
		parts = append(parts, "a good template")
	}
	if s.gate {
		parts = append(parts, "a confirm-promotion gate")
	}
	if s.fault != nil {
		times := "until the recovery"
		if s.fault.Times > 0 {
			times = fmt.Sprintf("%d times", s.fault.Times)
		}
		method := s.fault.Method
		if method == "" {
			method = "any method"
		}
		parts = append(parts, fmt.Sprintf("API fault %s on %s %s after %d, %s", s.fault.Action, method, s.fault.Path, s.fault.After, times))
	}
	if s.prometheus == prometheusDownFromStart {
		parts = append(parts, "Prometheus unreachable from the start")
	}
	if s.point != nil {
		at := "at " + s.point.String() + ":"
		if s.prometheus == prometheusDownAtPoint {
			at += " Prometheus unreachable;"
		}
		if s.sabotage != noSabotage && !s.sabotageAfterKill {
			at += " " + s.sabotage.String() + ";"
		}
		if s.kill {
			at += " SIGKILL terraform and the provider;"
		}
		if s.sabotageAfterKill {
			at += " then " + s.sabotage.String() + ";"
		}
		parts = append(parts, strings.TrimSuffix(at, ";"))
	}
	return strings.Join(parts, "; ")
}
