package meshsim

import (
	"time"
)

// Real load on the routes the stack's real proxy serves. For each host of such a route
// (client_targets.go) the client sends real requests through Traefik (client.go), and the pod
// Traefik chooses answers them (pods.go), observing its own exporters from the requests it
// really served. The model then sends none of that load itself: takeProxiedFlows removes the
// flows the client's requests stand for (an IngressRoute's, a Gateway API route's on Traefik's
// GatewayClass, the un-meshed clients of an apex Service that an Ingress or IngressRoute of
// Traefik's exposes), so that no request is both computed and sent, and such a route is judged
// by what the client saw, not by where the model would have sent its requests. Their weights
// are still checked: that is what the release wrote, not traffic. Traefik's own metrics come
// from Traefik; the series the pods' exporters keep are declared each tick (declareProxied),
// so that a rate never sees a gap: those of every pod behind such a route, and those of the
// deleted pods still answering through their grace period.

// takeProxiedFlows removes from routes the flows the client carries, and returns the model's
// routes of the client's targets; nil when no client runs (Config.ProxyAddress empty).
func (s *Simulator) takeProxiedFlows(now time.Time, v *view, routes map[flowKey]*route) []*route {
	if s.cfg.ProxyAddress == "" {
		return nil
	}
	var out []*route
	for _, t := range s.targetsOf(v) {
		out = append(out, t.route)
		for _, k := range t.flows {
			if r, ok := routes[k]; ok {
				s.checkWeights(now, r)
				delete(routes, k)
			}
		}
	}
	return out
}

// declareProxied declares the pods' own series behind the proxied routes and keeps those pods'
// answer state (their owed errors, their latency draws) from tick to tick.
func (s *Simulator) declareProxied(v *view, routes []*route, podsFor func(backend) *backendPods, seenPods map[string]bool) {
	declare := func(p podInfo) {
		s.metrics.declareServed(p)
		seenPods[podKey(proxiedMesh, p)] = true
	}
	for _, r := range routes {
		backends := r.backends
		if r.mirror != nil {
			backends = append(backends[:len(backends):len(backends)], r.mirror.backend)
		}
		for _, b := range backends {
			for _, p := range podsFor(b).all {
				declare(p)
			}
		}
	}
	// A deleted pod keeps answering through its grace period (pods.go): its series stay while
	// it does, if it answered the proxy before (its answer state is still kept).
	for _, pod := range s.terminating.all(time.Now()) {
		if p := s.podInfo(v, pod); s.pods[podKey(proxiedMesh, p)] != nil {
			declare(p)
		}
	}
}

// declareServed declares, at zero, the series pod p's own exporters keep for the requests the
// real proxy sends it: the application's histogram, and the Linkerd inbound proxy's when the
// pod is meshed.
func (e *exporter) declareServed(p podInfo) {
	e.http.declareApp(p)
	if p.linkerd {
		e.http.declareLinkerd(p)
	}
}

// served records a request the real proxy sent pod p, answered with code after ms.
func (e *exporter) served(p podInfo, code int, ms float64) {
	e.http.appS.keep(appValues(p, code)...)
	e.http.observeApp(p, code, ms)
	if p.linkerd {
		e.http.respS.keep(linkerdValues(p, code, classify(code))...)
		e.http.latS.keep(linkerdValues(p, code)...)
		e.http.observeLinkerd(p, code, ms)
	}
}
