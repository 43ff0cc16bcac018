package meshsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The client: a load generator that sends real HTTP requests through the stack's real proxy
// (Config.ProxyAddress, Traefik's web entry point) and judges what comes back. Every
// IngressRoute route whose match names a Host(`...`) on the web entry point, and whose services
// lead to Kubernetes Services, gets its apex's rps (AnnotationRPS, as the simulated flows) as
// GET / with that Host.
//
// An answer the application did not produce is an invariant entry on the IngressRoute: a
// response without HeaderPod (a 502/503/504 or a 404 of the proxy itself), a refused or reset
// connection, a timeout. A route is judged from the first answer a pod gives on it: before
// that the proxy may not have loaded it yet. The answers pods gave are counted per image and
// per split the route's TraefikService held when the request left (GET /client).

// clientTimeout bounds one request through the proxy.
const clientTimeout = 10 * time.Second

// hostRule finds the hosts of a Traefik match rule: Host(`a`) or Host(`a`, `b`).
var hostRule = regexp.MustCompile(`Host\(([^)]*)\)`)

var backquoted = regexp.MustCompile("`([^`]*)`")

// clientTarget is one host the client sends to, with the route that serves it.
type clientTarget struct {
	object objectRef // the IngressRoute
	host   string
	rps    float64
	// split is the route's weights when the request leaves ("podinfo-primary=90,podinfo-canary=10").
	split string
}

// ClientRoute is what the client saw on one IngressRoute host (GET /client).
type ClientRoute struct {
	Namespace string `json:"namespace"`
	Object    string `json:"object"`
	Host      string `json:"host"`
	// Sent counts requests; Answered those a pod answered, by image.
	Sent     int64            `json:"sent"`
	Answered map[string]int64 `json:"answered"`
	// Failed counts the answers the application did not produce.
	Failed int64 `json:"failed"`
	// BySplit counts the pods' answers by image under each split of the route's
	// TraefikService at the moment the request left.
	BySplit map[string]map[string]int64 `json:"bySplit"`
}

type clientState struct {
	mu     sync.Mutex
	routes map[string]*ClientRoute // by namespace/object/host
	judged map[string]bool         // hosts that a pod answered at least once
	owed   map[string]float64
}

func clientKey(t clientTarget) string {
	return t.object.Namespace + "/" + t.object.String() + "/" + t.host
}

// runClient sends the load every tick until ctx is done.
func (s *Simulator) runClient(ctx context.Context) {
	transport := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: clientTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var inflight sync.WaitGroup
	defer inflight.Wait()
	last := time.Now()
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		now := time.Now()
		dt := now.Sub(last).Seconds()
		last = now
		for _, t := range s.clientTargets() {
			k := clientKey(t)
			s.client.mu.Lock()
			s.client.owed[k] += t.rps * dt
			n := int(math.Floor(s.client.owed[k]))
			s.client.owed[k] -= float64(n)
			s.client.mu.Unlock()
			for range n {
				inflight.Add(1)
				go func() {
					defer inflight.Done()
					s.sendThroughProxy(ctx, client, t)
				}()
			}
		}
	}, s.cfg.Tick)
}

// clientTargets lists the hosts of the IngressRoutes on the web entry point.
func (s *Simulator) clientTargets() []clientTarget {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.view()
	var out []clientTarget
	for _, ir := range v.list(IngressRouteGVR) {
		if eps := strs(ir.Object, "spec", "entryPoints"); len(eps) > 0 && !contains(eps, "web") {
			continue
		}
		ns := ir.GetNamespace()
		owner := objectRef{Kind: "IngressRoute", Namespace: ns, Name: ir.GetName()}
		for _, rt := range maps(ir.Object, "spec", "routes") {
			hosts := ruleHosts(str(rt, "match"))
			if len(hosts) == 0 {
				continue
			}
			// As for the simulated flows, a route whose services lead nowhere (its
			// TraefikService gone) carries no load.
			var r *route
			for _, svc := range maps(rt, "services") {
				if r = traefikRoute(v, svc, ns, owner); r != nil && len(r.backends) > 0 {
					break
				}
			}
			if r == nil || len(r.backends) == 0 {
				continue
			}
			b := r.backends[0]
			rps := s.rps(v, types.NamespacedName{Namespace: b.service.Namespace, Name: apexOf(b.service.Name)})
			split := splitOf(r)
			for _, h := range hosts {
				out = append(out, clientTarget{object: owner, host: h, rps: rps, split: split})
			}
		}
	}
	return out
}

func ruleHosts(match string) []string {
	var hosts []string
	for _, m := range hostRule.FindAllStringSubmatch(match, -1) {
		for _, h := range backquoted.FindAllStringSubmatch(m[1], -1) {
			hosts = append(hosts, h[1])
		}
	}
	return hosts
}

func splitOf(r *route) string {
	if !r.weighted {
		return ""
	}
	parts := make([]string, 0, len(r.backends))
	for _, b := range r.backends {
		parts = append(parts, fmt.Sprintf("%s=%g", b.service.Name, b.weight))
	}
	return strings.Join(parts, ",")
}

// sendThroughProxy sends one request and judges the answer.
func (s *Simulator) sendThroughProxy(ctx context.Context, client *http.Client, t clientTarget) {
	url := "http://" + s.cfg.ProxyAddress + "/"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	req.Host = t.host
	resp, err := client.Do(req)
	if ctx.Err() != nil {
		return // shutting down: nothing to judge
	}
	pod, image, status := "", "", 0
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		pod, image, status = resp.Header.Get(HeaderPod), resp.Header.Get(HeaderImage), resp.StatusCode
	}
	k := clientKey(t)
	s.client.mu.Lock()
	cr := s.client.routes[k]
	if cr == nil {
		cr = &ClientRoute{Namespace: t.object.Namespace, Object: t.object.String(), Host: t.host,
			Answered: map[string]int64{}, BySplit: map[string]map[string]int64{}}
		s.client.routes[k] = cr
	}
	cr.Sent++
	if pod != "" {
		s.client.judged[k] = true
		cr.Answered[image]++
		if t.split != "" {
			if cr.BySplit[t.split] == nil {
				cr.BySplit[t.split] = map[string]int64{}
			}
			cr.BySplit[t.split][image]++
		}
		s.client.mu.Unlock()
		return
	}
	judged := s.client.judged[k]
	if judged {
		cr.Failed++
	}
	s.client.mu.Unlock()
	if !judged {
		return
	}
	var saw string
	switch {
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		saw = fmt.Sprintf("no answer within %s", clientTimeout)
	case err != nil:
		saw = "error " + err.Error()
	default:
		saw = fmt.Sprintf("%d from the proxy, not from a pod (no %s header)", status, HeaderPod)
	}
	s.inv.report(time.Now(), t.object, fmt.Sprintf("client: GET http://%s/ through the proxy: %s", t.host, saw))
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// ClientRoutes returns what the client saw per host for a namespace (all when empty).
func (s *Simulator) ClientRoutes(namespace string) []ClientRoute {
	s.client.mu.Lock()
	defer s.client.mu.Unlock()
	out := []ClientRoute{}
	for _, cr := range s.client.routes {
		if namespace == "" || cr.Namespace == namespace {
			c := *cr
			c.Answered = cloneCounts(cr.Answered)
			c.BySplit = map[string]map[string]int64{}
			for k, m := range cr.BySplit {
				c.BySplit[k] = cloneCounts(m)
			}
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+out[i].Object+out[i].Host < out[j].Namespace+out[j].Object+out[j].Host
	})
	return out
}

func cloneCounts(m map[string]int64) map[string]int64 {
	c := make(map[string]int64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
