package provider

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/gloo"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// TestChaos is `make chaos` (issue 20): for each router, random kill-and-fault schedules on the
// local stack through the real Terraform CLI, each in a namespace of its own. A schedule
// initialises a release, applies a good or a bad template and interrupts that apply: a
// SIGKILL of terraform and the provider at a phase, an API fault, an out-of-band deletion or
// readiness loss, Prometheus unreachable. Then a recovery apply with the same configuration.
// It is judged by the simulator's invariant log (no traffic to a side without Ready pods,
// beyond what the schedule itself caused) and by the primary's template: a bad template never
// becomes the primary, a good one only after its analysis completed. The release must end with
// all traffic on the primary, its record equal to the live split and a clean plan.
//
// Each workload kind has entries (chaos_kinds_test.go): Deployments on every router, a
// DaemonSet on OSM, a StatefulSet released in place by its partition (its pods are the split)
// and a Knative Service (the primary is the pinned revision), each with the faults that make
// sense for it.
//
// CANARY_CHAOS=1 runs it; CANARY_CHAOS_SCHEDULES sets the schedules per router (30);
// CANARY_CHAOS_SEED replays schedules (comma-separated seeds, as the runs print them).
func TestChaos(t *testing.T) {
	if os.Getenv("CANARY_CHAOS") == "" {
		t.Skip("the chaos campaign runs with CANARY_CHAOS=1 (make chaos)")
	}
	c := testAccStack(t)
	schedules := 30
	if n := os.Getenv("CANARY_CHAOS_SCHEDULES"); n != "" {
		var err error
		if schedules, err = strconv.Atoi(n); err != nil || schedules < 1 {
			t.Fatalf("CANARY_CHAOS_SCHEDULES=%q is not a positive number", n)
		}
	}
	var replay []uint64
	if list := os.Getenv("CANARY_CHAOS_SEED"); list != "" {
		for _, s := range strings.Split(list, ",") {
			seed, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil {
				t.Fatalf("CANARY_CHAOS_SEED=%q is not a comma-separated list of seeds", list)
			}
			replay = append(replay, seed)
		}
	}
	// Routers one after the other, so that each one's run time can be read off; the schedules
	// of a router in parallel (-parallel).
	for _, r := range chaosRouters {
		t.Run(r.name, func(t *testing.T) {
			start := time.Now()
			seeds := replay
			for len(seeds) < schedules && replay == nil {
				seeds = append(seeds, rand.Uint64())
			}
			t.Cleanup(func() {
				t.Logf("%s: %d schedules in %s", r.name, len(seeds), time.Since(start).Round(time.Second))
			})
			for _, seed := range seeds {
				t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
					t.Parallel()
					c.runChaosSchedule(t, r, seed)
				})
			}
		})
	}
}

const (
	chaosFirstImage = "podinfo:6.0.0"
	chaosNextImage  = "podinfo:6.0.1"
	// chaosBadErrorRate fails the request-success-rate check (min 99) at any weight.
	chaosBadErrorRate = "0.5"
)

// chaosRouter is what differs between routers in a schedule.
type chaosRouter struct {
	name   string
	routes routerObject
	// targetRef: the template lives on a Deployment the user owns and changes (target_ref);
	// otherwise in the configuration (manifest).
	targetRef bool
	// blueGreen: iterations without weight steps.
	blueGreen bool
	// prepare creates what the user owns before the release, as the router's tests do.
	prepare func(t *testing.T, c *testCluster, ns string)
	// resource is the release's resource block for a template under analysis.
	resource func(c *testCluster, ns, image, errorRate, analysis string) string
	// primaryServices and canaryServices are the Services the simulator names when it sends
	// traffic to the primary's or the canary's side.
	primaryServices, canaryServices []string
	// kind is the workload kind released; nil: a Deployment.
	kind *chaosKind
	// inPlaceSteps are the live canary weights of the steps of a release in place (in pods,
	// without a paced promotion); nil: killAnalysis's steps of 10 up to 30.
	inPlaceSteps []int
	// realProxy: users reach the release through the stack's real Traefik (the simulator's
	// client), so its analysis allows for Traefik's reaction (realProxyAnalysis).
	realProxy bool
}

// realProxyAnalysis is killAnalysis for a release served by the real Traefik. A weight reaches
// its users, and the canary's series Prometheus, seconds after it is written: Traefik applies
// its providers' changes at most every 2 s (and 0.2 to 2.2 s after them on the stack), creates
// a service's series at its first request, and a rate needs two scrapes of it. The simulated
// routers export the weight's traffic at the next tick. So the first checks at the 2 s interval
// may find no values for a good canary (seed 662094408221120428 of traefik rolled one back):
// 4 failed checks, 8 s, are allowed rather than 2.
func realProxyAnalysis(analysis string) string {
	return strings.Replace(analysis, "threshold             = 2\n", "threshold             = 4\n", 1)
}

// workload is the kind the router's schedules release.
func (r chaosRouter) workload() *chaosKind {
	if r.kind == nil {
		return &chaosDeployment
	}
	return r.kind
}

func manifestRelease(mesh string) func(c *testCluster, ns, image, errorRate, analysis string) string {
	return func(_ *testCluster, ns, image, errorRate, analysis string) string {
		return strings.Replace(releaseConfig(ns, manifestWorkload(image, errorRate), analysis, ""),
			`mesh_provider = "osm"`, fmt.Sprintf("mesh_provider = %q", mesh), 1)
	}
}

// createChaosTarget is the target Deployment of the target_ref routers, on the first template.
func createChaosTarget(t *testing.T, c *testCluster, ns string) {
	chaosDeployment.createTarget(t, c, ns, chaosFirstImage, "0")
}

var (
	primarySide    = []string{"podinfo-primary"}
	canarySide     = []string{"podinfo-canary"}
	glooRouteTable = func(u *unstructured.Unstructured) (int64, int64, error) {
		return glooObjectWeights(u, gloo.ModeRouteTable)
	}
	apisixCanaryRule = routerObject{gvr: apisixRoutes, name: canaryRoute, weights: apisixWeights}
)

var chaosRouters = []chaosRouter{
	{
		name: "osm", routes: trafficSplitObject, resource: manifestRelease("osm"),
		prepare: func(*testing.T, *testCluster, string) {}, primaryServices: primarySide, canaryServices: canarySide,
	},
	{
		name: "apisix", routes: apisixCanaryRule, targetRef: true,
		prepare: func(t *testing.T, c *testCluster, ns string) {
			createChaosTarget(t, c, ns)
			c.createRoute(t, userRoute(ns))
		},
		resource: func(_ *testCluster, ns, image, _, analysis string) string {
			return apisixConfig(ns, image, "podinfo", analysis)
		},
		primaryServices: primarySide, canaryServices: canarySide,
	},
	{
		name: "gloo", routes: routerObject{gvr: router.RouteTableResource, name: "podinfo", weights: glooRouteTable},
		prepare: func(t *testing.T, c *testCluster, ns string) {
			c.createVirtualService(t, ns, gloo.ModeRouteTable)
		},
		resource: func(_ *testCluster, ns, image, errorRate, analysis string) string {
			return glooConfig(ns, manifestWorkload(image, errorRate), analysis, glooBlock(gloo.ModeRouteTable))
		},
		primaryServices: primarySide, canaryServices: canarySide,
	},
	{
		name: "istio", routes: routerObject{gvr: istioVirtualServices, name: "podinfo", weights: istioWeights},
		prepare: func(*testing.T, *testCluster, string) {},
		resource: func(_ *testCluster, ns, image, errorRate, analysis string) string {
			return istioConfig(ns, manifestWorkload(image, errorRate), analysis)
		},
		primaryServices: primarySide, canaryServices: canarySide,
	},
	{
		name: "gatewayapi", routes: routerObject{gvr: httpRoutes, name: "podinfo", weights: httpRouteWeights}, targetRef: true,
		prepare: func(t *testing.T, c *testCluster, ns string) {
			c.createGateway(t, ns)
			createChaosTarget(t, c, ns)
		},
		resource: func(_ *testCluster, ns, image, _, analysis string) string {
			return httpRouteConfig(ns, gatewayCase.provider, image, gatewayCase.service, gatewayCase.extra, analysis)
		},
		primaryServices: primarySide, canaryServices: canarySide,
	},
	{
		name: "linkerd", routes: routerObject{gvr: httpRoutes, name: "podinfo", weights: httpRouteWeights}, targetRef: true,
		prepare: createChaosTarget,
		resource: func(_ *testCluster, ns, image, _, analysis string) string {
			return httpRouteConfig(ns, linkerdCase.provider, image, linkerdCase.service, linkerdCase.extra, analysis)
		},
		primaryServices: primarySide, canaryServices: canarySide,
	},
	{
		// Blue/green: the apex Service's selector is the route, so the simulator names the apex
		// whichever side it selects.
		name: "kubernetes", routes: routerObject{gvr: services, name: "podinfo", weights: apexSelects}, blueGreen: true,
		prepare: func(*testing.T, *testCluster, string) {},
		resource: func(c *testCluster, ns, image, errorRate, _ string) string {
			return c.kubernetesConfig(ns, image, errorRate)
		},
		primaryServices: []string{"podinfo-primary", "podinfo"}, canaryServices: []string{"podinfo-canary", "podinfo"},
	},
}

// The routers whose acceptance tests are a routerCase (router_acceptance_test.go) join the
// chaos campaign through it: the user's objects they route through (a root HTTPProxy, an
// Ingress), the target Deployment, and their generated object's weights.
func init() {
	for _, rc := range []routerCase{contourRouter, traefikRouter, nginxRouter, skipperRouter, albRouter} {
		r := chaosFromRouterCase(rc)
		// The traefik router's IngressRoute has a host: the stack's Traefik serves it.
		r.realProxy = rc.meshProvider == "traefik"
		chaosRouters = append(chaosRouters, r)
	}
	// Through the stack's real Traefik (the simulator's client judges what users got): the
	// gatewayapi router on Traefik's GatewayClass, and kubernetes blue/green behind the user's
	// Ingress of class traefik. Skipped on a stack without Traefik.
	onTraefik := chaosFromCaseFor(gatewayOnTraefik)
	onTraefik.name = "gatewayapi-traefik"
	behindIngress := chaosRouters[slices.IndexFunc(chaosRouters, func(r chaosRouter) bool { return r.name == "kubernetes" })]
	behindIngress.name = "kubernetes-traefik"
	behindIngress.prepare = func(t *testing.T, c *testCluster, ns string) { c.createTraefikIngress(t, ns, &userState{}) }
	for _, r := range []*chaosRouter{&onTraefik, &behindIngress} {
		r.realProxy = true
		prepare := r.prepare
		r.prepare = func(t *testing.T, c *testCluster, ns string) {
			if c.env.ProxyAddress == "" {
				t.Skip("the stack runs no real proxy (CANARY_PROXY_ADDRESS unset); make up starts Traefik")
			}
			prepare(t, c, ns)
		}
	}
	chaosRouters = append(chaosRouters, onTraefik, behindIngress)
	chaosRouters = append(chaosRouters, kindRouters()...)
}

// chaosFromRouterCase is the chaos schedule's view of a router's acceptance case. Its analysis
// is killAnalysis with the router's own metric queries where it has no built-in ones (alb).
// The user's Ingress of an Ingress-based router sends to the apex Service, which selects the
// primary's pods, so the simulator names the apex for the primary's side too.
func chaosFromRouterCase(rc routerCase) chaosRouter {
	return chaosFromCaseFor(func(string) routerCase { return rc })
}

// chaosFromCaseFor is chaosFromRouterCase for a case that depends on the namespace (its host).
func chaosFromCaseFor(caseFor func(ns string) routerCase) chaosRouter {
	return chaosFromCaseOn(caseFor, nil)
}

// chaosFromCaseOn is chaosFromCaseFor for a target of another kind than Deployment (nil).
func chaosFromCaseOn(caseFor func(ns string) routerCase, kind *chaosKind) chaosRouter {
	rc := caseFor("")
	primary := primarySide
	if rc.route == ingresses {
		primary = []string{"podinfo-primary", "podinfo"}
	}
	workload := chaosRouter{kind: kind}.workload()
	return chaosRouter{
		name: rc.meshProvider, routes: routerObject{gvr: rc.route, name: rc.name(), weights: rc.weights}, targetRef: true, kind: kind,
		prepare: func(t *testing.T, c *testCluster, ns string) {
			workload.createTarget(t, c, ns, chaosFirstImage, "0")
			caseFor(ns).create(t, c, ns, &userState{})
		},
		resource: func(_ *testCluster, ns, image, _, analysis string) string {
			rc := caseFor(ns)
			if rc.metrics != "" {
				// Its request-success-rate, the first line, in place of the built-in one.
				analysis = strings.Replace(analysis, killMetric, strings.SplitN(strings.TrimSpace(rc.metrics), "\n", 2)[0], 1)
			}
			return rc.config(ns, image, analysis)
		},
		primaryServices: primary, canaryServices: canarySide,
	}
}

// chaosTrace is what a schedule did, printed when it fails, with its seed.
type chaosTrace struct {
	mu    sync.Mutex
	start time.Time
	lines []string
}

func (tr *chaosTrace) add(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	now := time.Now()
	tr.lines = append(tr.lines, fmt.Sprintf("%s %6.1fs  ", now.UTC().Format("15:04:05.000"), now.Sub(tr.start).Seconds())+fmt.Sprintf(format, args...))
}

func (tr *chaosTrace) dump(t *testing.T) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	t.Logf("trace:\n%s", strings.Join(tr.lines, "\n"))
}

// chaosGateHold is how long the confirm-promotion gate stays closed after its first call.
const chaosGateHold = 5 * time.Second

// chaosRun is one schedule on the stack.
type chaosRun struct {
	t          *testing.T
	c          *testCluster
	r          chaosRouter
	s          chaosSchedule
	ns         string
	w          *workdir
	inv        *chaosInvariants
	trace      *chaosTrace
	prometheus *switchedPrometheus
	witness    *promotionWitness
	// unready selects the pods the schedule made unready, if it did.
	unready string
}

func (c *testCluster) runChaosSchedule(t *testing.T, r chaosRouter, seed uint64) {
	s := newChaosSchedule(r, seed)
	trace := &chaosTrace{start: time.Now()}
	t.Logf("seed %d: %s\nreplay: CANARY_CHAOS_SEED=%d make chaos CHAOS_RUN='%s'", seed, s, seed, r.name)
	ns, inv := c.chaosNamespace(t, trace)
	run := &chaosRun{t: t, c: c, r: r, s: s, ns: ns, w: c.workdir(t), inv: inv, trace: trace, prometheus: c.switchablePrometheus(t)}
	proxy := c.faultProxy(t)
	analysis := killAnalysis
	if r.realProxy {
		analysis = realProxyAnalysis(analysis)
	}
	if s.gate {
		analysis += fmt.Sprintf(`
    webhooks = [{ name = "promotion-gate", type = "confirm-promotion", url = %q, timeout = "5s" }]`, promotionGate(t, chaosGateHold).URL)
	}
	w := run.w
	kubeconfig := filepath.Join(w.dir, "faultproxy.kubeconfig")
	if err := proxy.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	w.provider = fmt.Sprintf("provider \"canary\" {\n  kubernetes = { config_path = %q }\n  prometheus = { address = %q }\n}\n", kubeconfig, run.prometheus.URL)
	w.routes = &r.routes
	w.resource = func(ns, image, errorRate string) string { return r.resource(c, ns, image, errorRate, analysis) }

	r.prepare(t, c, ns)
	run.setTemplate(chaosFirstImage, "0")
	if out, err := run.apply("first apply"); err != nil {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		start := time.Now()
		out, err := w.run("destroy", "-auto-approve")
		trace.add("destroy took %s: %s", time.Since(start).Round(100*time.Millisecond), outcome(out, err))
		if err != nil {
			t.Errorf("destroy: %v\n%s", err, out)
		}
	})
	if r.name == "apisix" {
		run.sealApisixGap()
	}
	witness := c.watchPromotions(t, ns, r.workload())
	run.witness = witness
	inv.excuseNoReadyPods(ns, r.primaryServices, "the schedule deleted the primary", witness.primaryDown)
	// Also when the schedule stops half-way; before the destroy.
	t.Cleanup(func() {
		badImage := ""
		if s.bad {
			badImage = chaosNextImage
		}
		witness.check(t, badImage)
	})

	errorRate := "0"
	if s.bad {
		errorRate = chaosBadErrorRate
	}
	run.setTemplate(chaosNextImage, errorRate)
	if s.fault != nil {
		proxy.Add(*s.fault)
	}
	if s.prometheus == prometheusDownFromStart {
		run.prometheus.down.Store(true)
	}
	run.interruptedApply()
	proxy.Clear()
	run.prometheus.down.Store(false)
	run.endReadinessLoss()
	// The user's configuration holds the target's template too, and applies it again (a
	// rollback in place restored the last promoted one on the target).
	run.setTemplate(chaosNextImage, errorRate)

	out, err := run.apply("recovery apply")
	switch {
	case s.bad && err == nil:
		t.Errorf("the recovery apply of a bad template went through:\n%s", out)
	case !s.bad && err != nil && rebuildRefused.MatchString(out):
		// The primary is gone and the new template never passed: the recovery rightly
		// refuses to rebuild the primary from it. Do as the error says.
		run.setTemplate(chaosFirstImage, "0")
		if out, err := run.apply("apply back to the last promoted template, as the error says"); err != nil {
			t.Fatalf("apply back to %s: %v\n%s", chaosFirstImage, err, out)
		}
		run.setTemplate(chaosNextImage, "0")
		if out, err := run.apply("release the new template again"); err != nil {
			t.Fatalf("releasing %s again: %v\n%s", chaosNextImage, err, out)
		}
	case !s.bad && err != nil:
		t.Errorf("the recovery apply of a good template failed: %v\n%s", err, out)
		if out, err := run.apply("second recovery apply"); err != nil {
			t.Fatalf("the second recovery apply failed too: %v\n%s", err, out)
		}
	}
	if s.bad {
		// The recovery may have refused to rebuild a deleted primary from the bad template,
		// saying to set the target back first; the witness judges what the primary ran.
		// The user goes back to the template that passed; nothing is left to release.
		run.setTemplate(chaosFirstImage, "0")
		if out, err := run.apply("apply back to the first template"); err != nil {
			t.Fatalf("apply back to %s: %v\n%s", chaosFirstImage, err, out)
		}
		run.judge(chaosFirstImage)
	} else {
		run.judge(chaosNextImage)
	}
	if out, err := w.run("plan", "-detailed-exitcode"); err != nil {
		t.Errorf("the plan after the recovery is not clean (%v):\n%s", err, out)
	}
}

// rebuildRefused is the recovery's refusal to rebuild a deleted primary from a template that
// never passed analysis.
var rebuildRefused = wrapped("set the target back to its last promoted template and apply")

// setTemplate makes image, whose pods fail errorRate of requests, the template to release.
func (run *chaosRun) setTemplate(image, errorRate string) {
	if run.r.targetRef {
		run.r.workload().setTarget(run.t, run.c, run.ns, image, errorRate)
	}
	run.w.write(run.ns, image, errorRate)
}

// judge checks what a user sees once the schedule is over: the primary runs image on Ready
// pods, and the release's record holds the live split, all on the primary.
func (run *chaosRun) judge(image string) {
	run.t.Helper()
	kind := run.r.workload()
	if kind.settle != nil {
		kind.settle(run.c, run.ns)
	}
	if err := kind.primaryRuns(run.c, run.ns, image); err != nil {
		run.t.Error(err)
	}
	run.c.judgeSplit(run.t, run.ns, run.r.routes)
}

// endReadinessLoss ends the readiness loss of the pods the schedule made unready, where they
// outlive the run's reaction: their controller replaces them with Ready ones.
func (run *chaosRun) endReadinessLoss() {
	if run.unready == "" || !run.r.workload().restartsUnready {
		return
	}
	n, err := run.c.deleteUnreadyPods(context.Background(), run.ns, run.unready)
	run.trace.add("the readiness loss ends: %d unready pods of %s deleted, for their controller to replace (%s)", n, run.unready, errOrOK(err))
	if err != nil {
		run.t.Error(err)
	}
}

func (run *chaosRun) apply(what string) (string, error) {
	start := time.Now()
	out, err := run.w.run("apply", "-auto-approve")
	run.trace.add("%s took %s: %s", what, time.Since(start).Round(100*time.Millisecond), outcome(out, err))
	return out, err
}

// sealApisixGap excuses what the user's route sent to the apex Service before the release
// created it, as apisixNamespace does: nothing more once the generated route answers.
func (run *chaosRun) sealApisixGap() {
	run.c.waitForQuery(run.t, apisixCanaryRouteAnswered(run.ns), func(v float64) bool { return v > 0 })
	sealed := time.Now()
	gap := fmt.Sprintf("traffic sent to Service %s/podinfo, which has no Ready pods", run.ns)
	run.inv.excuse(func(e meshsim.InvariantEntry) string {
		if e.Object == "ApisixRoute/podinfo" && e.Message == gap && e.Time.Before(sealed) {
			return "the user's route before the release created the apex Service"
		}
		return ""
	})
}

// interruptedApply applies the new template under the schedule's faults and interrupts it.
func (run *chaosRun) interruptedApply() {
	s, trace := run.s, run.trace
	start := time.Now()
	if s.point == nil {
		out, err := run.w.run("apply", "-auto-approve")
		trace.add("apply under faults took %s: %s", time.Since(start).Round(100*time.Millisecond), outcome(out, err))
		return
	}
	running, reached := run.w.applyUntilOrEnd(run.ns, s.point.matches)
	if !reached {
		err := <-running.done
		trace.add("the apply ended after %s, before %s, so nothing happened there: %s", time.Since(start).Round(100*time.Millisecond), s.point, outcome(running.out.String(), err))
		return
	}
	trace.add("reached %s (recorded phase %s, live canary weight %d%%)", s.point, running.at.Phase, running.at.CanaryWeight)
	if s.prometheus == prometheusDownAtPoint {
		run.prometheus.down.Store(true)
		trace.add("Prometheus unreachable")
	}
	if s.sabotage != noSabotage && !s.sabotageAfterKill {
		run.sabotage()
		if s.sabotage.losesCanary() {
			// Give the run the time it has to move the canary's traffic before any kill.
			time.Sleep(canaryLossGrace)
		}
	}
	if s.kill {
		killTree(running.pid)
		trace.add("killed terraform and the provider (%s)", errOrOK(<-running.done))
	} else {
		err := <-running.done
		trace.add("the apply ended after %s: %s", time.Since(start).Round(100*time.Millisecond), outcome(running.out.String(), err))
	}
	if s.sabotageAfterKill {
		run.sabotage()
	}
}

// sabotage changes the release's objects behind Terraform, and excuses the invariant log
// entries that the change itself causes.
func (run *chaosRun) sabotage() {
	ctx, c, ns, what, kind := context.Background(), run.c, run.ns, run.s.sabotage, run.r.workload()
	at := time.Now()
	canaryServices := run.r.canaryServices
	var err error
	switch what {
	case deleteStateConfigMap:
		err = c.kube.CoreV1().ConfigMaps(ns).Delete(ctx, rollout.StateConfigMapName("podinfo"), metav1.DeleteOptions{})
	case deletePrimary:
		// The witness times the primary's absence, which is excused, from this request on: the
		// simulator may see the primary gone before the witness's watch does.
		run.witness.deleting(at)
		err = kind.deletePrimary(ctx, c, ns)
	case scaleCanaryToZero:
		err = kind.scaleCanary(ctx, c, ns)
	case makeCanaryUnready:
		var selector string
		var services []string
		if selector, services, err = kind.canaryPods(ctx, c, ns); err == nil {
			run.unready = selector
			err = c.makePodsUnready(ctx, ns, selector)
		}
		if services != nil {
			canaryServices = services
		}
	}
	run.trace.add("%s: %s", what, errOrOK(err))
	if err != nil {
		run.t.Errorf("%s: %v", what, err)
	}
	if what.losesCanary() {
		// The grace counts from when the pods are gone, which is when the change is done: on a
		// loaded machine marking every pod unready takes a second or more.
		done := time.Now()
		run.inv.excuseNoReadyPods(ns, canaryServices, "the schedule took the canary's pods away", func(e time.Time) bool {
			return !e.Before(at) && e.Before(done.Add(canaryLossGrace))
		})
	}
}

// makePodsUnready fails the readiness of every pod the selector selects, as failing probes
// would; kwok leaves a running pod's status alone, so they stay unready.
func (c *testCluster) makePodsUnready(ctx context.Context, ns, selector string) error {
	pods, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		for j := range p.Status.Conditions {
			if p.Status.Conditions[j].Type == corev1.PodReady || p.Status.Conditions[j].Type == corev1.ContainersReady {
				p.Status.Conditions[j].Status = corev1.ConditionFalse
			}
		}
		for j := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[j].Ready = false
		}
		if _, err := c.kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// deleteUnreadyPods deletes the pods the selector selects that are not Ready, and counts them.
func (c *testCluster) deleteUnreadyPods(ctx context.Context, ns, selector string) (int, error) {
	pods, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range pods.Items {
		if p := &pods.Items[i]; !podReady(p) && p.DeletionTimestamp == nil {
			if err := c.kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// switchedPrometheus is the stack's Prometheus behind a proxy that the schedule can make
// unreachable: while down, every connection is closed unanswered.
type switchedPrometheus struct {
	*httptest.Server
	down atomic.Bool
}

func (c *testCluster) switchablePrometheus(t *testing.T) *switchedPrometheus {
	target, err := url.Parse(c.env.PrometheusURL)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	p := &switchedPrometheus{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.down.Load() {
			panic(http.ErrAbortHandler)
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// promotionGate is a confirm-promotion webhook that stays closed for hold after its first call.
func promotionGate(t *testing.T, hold time.Duration) *httptest.Server {
	var first atomic.Int64
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		if time.Duration(now-first.Load()) < hold {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(gate.Close)
	return gate
}

// outcome is how a terraform command ended, with its error's text when it failed.
func outcome(out string, err error) string {
	if err == nil {
		return "ok"
	}
	text := out
	if i := strings.Index(out, "Error: "); i >= 0 {
		text = out[i:]
	}
	text = strings.Join(strings.Fields(text), " ")
	const most = 800
	if len(text) > most {
		text = text[:most] + "…"
	}
	return errOrOK(err) + ": " + text
}

func errOrOK(err error) string {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &exit):
		return exit.String()
	}
	return err.Error()
}
