package meshsim

import (
	"context"
	"errors"
	"fmt"
	"io"

	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// The client: a load generator that sends real HTTP requests through the stack's real proxy
// (Config.ProxyAddress, Traefik's web entry point) and judges what comes back. It sends to the
// hosts of the routes Traefik serves (client_targets.go) as GET / with that Host.
//
// An answer the application did not produce is an invariant entry on the route's object: a
// response without HeaderPod (a 502/503/504 or a 404 of the proxy itself), a refused or reset
// connection, a timeout. A route is judged from the first answer a pod gives on it: before
// that the proxy may not have loaded it yet. The answers pods gave are counted per image, per
// workload and per split the model's route held when the request left (GET /client).

// ClientEmptyServices ends a client's entry when, as the request left, Services the route gives
// weight had no Ready pod (namespace/name, comma-separated): a judge can tell which side a 503
// of the proxy's came from, as the simulated routes' entries name it.
const ClientEmptyServices = "; Services of the route with weight and no Ready pod as it left: "

// clientTimeout bounds one request through the proxy.
const clientTimeout = 10 * time.Second

// ClientRoute is what the client saw on one host of a route (GET /client), for the plain
// requests or for those tagged for A/B testing.
type ClientRoute struct {
	Namespace string `json:"namespace"`
	Object    string `json:"object"`
	Host      string `json:"host"`
	Tagged    bool   `json:"tagged,omitempty"`
	// Sent counts requests; Answered those a pod answered, by image, and ByWorkload by the
	// pod's workload (HeaderWorkload: the primary's Deployment or the canary's).
	Sent       int64            `json:"sent"`
	Answered   map[string]int64 `json:"answered"`
	ByWorkload map[string]int64 `json:"byWorkload"`
	// Failed counts the answers the application did not produce.
	Failed int64 `json:"failed"`
	// BySplit counts the pods' answers by image under each split of the model's route at the
	// moment the request left.
	BySplit map[string]map[string]int64 `json:"bySplit"`
	// Split and Model are the simulator's model of the route as the last request left: its
	// split, and the share of requests (0..1) each image answers in it (NoPod: none does).
	Split string             `json:"split"`
	Model map[string]float64 `json:"model"`
}

type clientState struct {
	mu     sync.Mutex
	routes map[string]*ClientRoute // by namespace/object/host
	judged map[string]bool         // hosts that a pod answered at least once
	owed   map[string]float64
}

func clientKey(t clientTarget) string {
	return fmt.Sprintf("%s/%s/%s/%t", t.object.Namespace, t.object, t.host, t.tagged)
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

// sendThroughProxy sends one request and judges the answer.
func (s *Simulator) sendThroughProxy(ctx context.Context, client *http.Client, t clientTarget) {
	url := "http://" + s.cfg.ProxyAddress + t.requestURL()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	req.Host = t.host
	for name, value := range t.req.headers {
		req.Header.Set(name, value)
	}
	resp, err := client.Do(req)
	if ctx.Err() != nil {
		return // shutting down: nothing to judge
	}
	pod, image, workload, status := "", "", "", 0
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		pod, image, status = resp.Header.Get(HeaderPod), resp.Header.Get(HeaderImage), resp.StatusCode
		workload = resp.Header.Get(HeaderWorkload)
	}
	k := clientKey(t)
	s.client.mu.Lock()
	cr := s.client.routes[k]
	if cr == nil {
		cr = &ClientRoute{Namespace: t.object.Namespace, Object: t.object.String(), Host: t.host, Tagged: t.tagged,
			Answered: map[string]int64{}, ByWorkload: map[string]int64{}, BySplit: map[string]map[string]int64{}}
		s.client.routes[k] = cr
	}
	cr.Sent++
	cr.Split, cr.Model = t.split, t.model
	if pod != "" {
		s.client.judged[k] = true
		cr.Answered[image]++
		cr.ByWorkload[workload]++
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
	if len(t.empty) > 0 {
		// The proxy does not say which side it failed to reach; the model says which had no pod.
		saw += ClientEmptyServices + strings.Join(t.empty, ", ")
	}
	s.inv.report(time.Now(), t.object, fmt.Sprintf("client: GET http://%s%s through the proxy: %s", t.host, t.requestURL(), saw))
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
			c.Answered, c.ByWorkload = cloneCounts(cr.Answered), cloneCounts(cr.ByWorkload)
			c.Model = make(map[string]float64, len(cr.Model))
			for image, share := range cr.Model {
				c.Model[image] = share
			}
			c.BySplit = map[string]map[string]int64{}
			for k, m := range cr.BySplit {
				c.BySplit[k] = cloneCounts(m)
			}
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return fmt.Sprint(out[i].Namespace, out[i].Object, out[i].Host, out[i].Tagged) < fmt.Sprint(out[j].Namespace, out[j].Object, out[j].Host, out[j].Tagged)
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
