package provider

// Schedules: a random release (router, strategy, mode, options) and a random sequence of
// applies (create, new templates good or bad, config-only changes, destroy, lost state, import,
// replacement), each with random events armed to fire at a keyed request of the apply (a
// readiness loss, an out-of-band edit, a Prometheus outage, another host's run) and random
// out-of-band edits between applies. Everything derives from the seed.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-go/tftypes"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/gatewayapi"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/istio"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// The campaign's release and its objects.
const (
	campaignNamespace = "campaign"
	campaignRelease   = "podinfo"
	campaignTarget    = "podinfo"
	campaignPrimary   = "podinfo-primary"
	campaignConfigMap = "podinfo-config"
	campaignConfigKey = "version"
	campaignMetric    = "campaign-check"
	campaignGateway   = "gateway"
	// harnessWriter writes what the schedule does behind the release's back.
	harnessWriter = "harness"
)

// Strategies.
const (
	strategyCanary    = "canary"
	strategyABTest    = "A/B"
	strategyBlueGreen = "blue/green"
)

// releaseShape is the release a schedule runs.
type releaseShape struct {
	// retryRejected is the configuration's retry_rejected: the convergence sets it, the
	// documented retry of a revision that an analysis under faults rejected.
	retryRejected string
	router        string
	strategy      string
	// manifest: the release owns the Deployment; otherwise target_ref.
	manifest bool
	// trackConfig: the pods read a ConfigMap through envFrom, so config-only changes exist.
	trackConfig  bool
	skipAnalysis bool
	// rollbackWindow is rollback_window.revisions (0: unset); such a schedule's new templates
	// go back to the one before the current one four times in five, when that one was good (campaignRunner.nextRevision).
	rollbackWindow   int
	promotionSteps   bool
	revertOnDeletion bool
	threshold        int
	iterations       int
	steps            []int
	// eventSinkDelay is how long the event webhook takes to answer; 0: no event webhook.
	eventSinkDelay time.Duration
	// readyDelay is how long new pods take to become Ready.
	readyDelay time.Duration
	// replicas is the Deployment's replica count (0: two); a replica ratio's is ratioReplicas.
	replicas int32
	// daemonSet: the release's workload is a DaemonSet (campaign_daemonsets_test.go).
	daemonSet bool
	// statefulSet: the release's workload is a StatefulSet, released in place by its
	// partition (campaign_statefulsets_test.go); autoscaler: the user's HPA scales it
	// (campaign_autoscalers_test.go).
	statefulSet, autoscaler bool
	// keda: the user's autoscaler is a KEDA ScaledObject, not an HPA (a Deployment's only).
	keda bool
	// knative: the release's target is a Knative Service (campaign_knative_test.go), whose
	// Configuration reconciles a new template knativeConfigLag after the Service's reconciler.
	knative          bool
	knativeConfigLag time.Duration
	// gates are the built-in gates (webhooks without url) the operator answers.
	gates []string
	// web: the metric is the web backend's (campaign_web_test.go), asked with webQuery.
	web      bool
	webQuery string
}

func (s releaseShape) String() string {
	mode := "target_ref"
	if s.manifest {
		mode = "manifest"
	}
	out := fmt.Sprintf("%s %s, %s, threshold %d", s.router, s.strategy, mode, s.threshold)
	if s.strategy == strategyCanary {
		out += fmt.Sprintf(", steps %v", s.steps)
	} else {
		out += fmt.Sprintf(", %d iterations", s.iterations)
	}
	for _, opt := range []struct {
		on   bool
		text string
	}{
		{s.trackConfig, "tracked ConfigMap"}, {s.skipAnalysis, "skip_analysis"}, {s.promotionSteps, "step_weight_promotion"},
		{!s.revertOnDeletion, "revert_on_deletion=false"}, {s.eventSinkDelay > 0, fmt.Sprintf("event sink answers in %s", s.eventSinkDelay)},
		{s.readyDelay > 0, fmt.Sprintf("pods Ready after %s", s.readyDelay)},
		{s.rollbackWindow > 0, fmt.Sprintf("rollback_window %d", s.rollbackWindow)},
		{s.ratioRouted(), fmt.Sprintf("replica ratio of %d primary pods", s.replicas)},
		{s.daemonSet, fmt.Sprintf("DaemonSet on %d nodes", campaignNodes)},
		{s.statefulSet, fmt.Sprintf("StatefulSet of %d pods by partition", s.replicas)},
		{s.autoscaler && !s.keda, "HPA"},
		{s.keda, "KEDA ScaledObject"},
		{s.knative, fmt.Sprintf("Knative Service (its Configuration %s behind)", s.knativeConfigLag)},
		{len(s.gates) > 0, fmt.Sprintf("built-in gates %v", s.gates)},
		{s.web, fmt.Sprintf("web backend, query %q", s.webQuery)},
	} {
		if opt.on {
			out += ", " + opt.text
		}
	}
	return out
}

// randomShape draws a release: osm, kubernetes and gatewayapi, with the strategies each runs
// (newCampaignSchedule makes a third of the osm ones istio, bound to the Gateway, and moves
// some to nginx or contour: drawIngressRouter).
func randomShape(r *rand.Rand) releaseShape {
	s := releaseShape{threshold: 1 + r.IntN(2), iterations: 2, revertOnDeletion: r.IntN(5) > 0, manifest: r.IntN(2) == 0,
		trackConfig: r.IntN(3) == 0, skipAnalysis: r.IntN(12) == 0}
	switch r.IntN(5) {
	case 0, 1:
		s.router, s.strategy = "osm", strategyCanary
	case 2:
		s.router, s.strategy = "osm", strategyBlueGreen
	case 3:
		s.router, s.strategy = "kubernetes", strategyBlueGreen
	default:
		s.router, s.strategy = "gatewayapi", []string{strategyCanary, strategyABTest}[r.IntN(2)]
	}
	if s.strategy == strategyCanary {
		s.steps = [][]int{{20, 40}, {10, 50}, {30}}[r.IntN(3)]
		s.promotionSteps = r.IntN(3) == 0
	}
	if r.IntN(6) == 0 {
		s.eventSinkDelay = 4 * time.Second
	}
	s.readyDelay = []time.Duration{0, 0, 2 * time.Second, 5 * time.Second}[r.IntN(4)]
	return s
}

// lastStep is the highest canary weight of a weighted canary.
func (s releaseShape) lastStep() int { return s.steps[len(s.steps)-1] }

// canaryCap is the most an unanalysed canary may get: the last step, or nothing with
// iterations (A/B sends matching requests only; blue/green switches after the analysis).
func (s releaseShape) canaryCap() int {
	if s.strategy == strategyCanary {
		return s.lastStep()
	}
	return 0
}

// interval is every schedule's analysis interval: short, so a schedule is cheap.
func (s releaseShape) interval() time.Duration { return time.Second }

// routerSpec is what a router of the release needs, for the invariants' reads.
func (s releaseShape) routerSpec(provider string) router.Spec {
	spec := router.Spec{Namespace: campaignNamespace, Name: campaignRelease, Target: campaignTarget, Apex: campaignTarget, Port: 9898,
		OwnsWorkload: s.manifest}
	switch provider {
	case "gatewayapi":
		spec.Options = gatewayapi.Options{GatewayRefs: []router.ParentRef{{Name: campaignGateway, Kind: router.GatewayKind, Group: router.GatewayGroup}}}
	case "istio":
		spec.Options = istio.Options{Gateways: []string{campaignGateway}}
	default:
		spec.Options = routerOptions(provider)
	}
	if s.strategy == strategyABTest {
		spec.Match = []router.Match{{Headers: map[string]router.StringMatch{"x-canary": {Exact: "insider"}}}}
	}
	return spec
}

// revisionSpec is what a configuration asks the pods to run: an image, and the version of
// the tracked config ("" without one). Bad ones fail every check.
type revisionSpec struct {
	image  string
	config string
}

// String is the revision as the pod simulator names what pods run.
func (r revisionSpec) String() string {
	if r.config == "" {
		return r.image
	}
	return r.image + "+" + r.config
}

func (r revisionSpec) bad() bool { return isBadRevision(r.String()) }

func isBadRevision(revision string) bool { return strings.Contains(revision, "-bad") }

// workload is the Deployment a revision runs.
func (s releaseShape) workload(rev revisionSpec) *appsv1.Deployment {
	replicas := int32(2)
	if s.replicas > 0 {
		replicas = s.replicas
	}
	labels := map[string]string{"app": campaignTarget}
	container := corev1.Container{Name: "podinfo", Image: rev.image}
	if s.trackConfig {
		container.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: campaignConfigMap}}}}
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: campaignTarget, Namespace: campaignNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{container}}},
		},
	}
}

// releaseConfigJSON is the canary_release configuration of a revision on a router.
func (s releaseShape) releaseConfigJSON(provider string, rev revisionSpec) []byte {
	analysis := map[string]any{
		"interval": s.interval().String(), "threshold": s.threshold,
		"metrics": []any{map[string]any{"name": campaignMetric, "template_ref": campaignMetric, "threshold_range": map[string]any{"min": 99}}},
	}
	switch s.strategy {
	case strategyCanary:
		analysis["step_weights"] = s.steps
		if s.promotionSteps {
			analysis["step_weight_promotion"] = 20
		}
	case strategyABTest:
		analysis["iterations"] = s.iterations
		analysis["match"] = []any{map[string]any{"headers": map[string]any{"x-canary": map[string]any{"exact": "insider"}}}}
	default:
		analysis["iterations"] = s.iterations
	}
	if s.eventSinkDelay > 0 {
		analysis["webhooks"] = []any{map[string]any{"name": "events", "type": "event", "url": "http://events.campaign.example/hook", "timeout": "5s", "retries": 1}}
	}
	s.addBuiltInGates(analysis)
	service := map[string]any{"port": 9898}
	switch provider {
	case "gatewayapi":
		service["gateway_refs"] = []any{map[string]any{"name": campaignGateway}}
	case "istio":
		// A VirtualService bound to an ingress gateway, not the mesh: what the gateway serves.
		service["gateways"] = []any{campaignGateway}
	}
	config := map[string]any{
		"name": campaignRelease, "namespace": campaignNamespace, "mesh_provider": provider, "service": service, "analysis": analysis,
		"skip_analysis": s.skipAnalysis, "revert_on_deletion": s.revertOnDeletion, "progress_deadline_seconds": 30,
	}
	addRouterConfig(provider, config)
	if s.retryRejected != "" {
		config["retry_rejected"] = s.retryRejected
	}
	if s.rollbackWindow > 0 {
		config["rollback_window"] = map[string]any{"revisions": s.rollbackWindow}
	}
	if s.manifest {
		manifest, _ := json.Marshal(s.workload(rev))
		config["manifest"] = string(manifest)
	} else {
		config["target_ref"] = map[string]any{"name": campaignTarget}
		config["triggers"] = map[string]any{"revision": rev.String()}
	}
	s.daemonSetConfig(config, rev)
	s.statefulSetConfig(config)
	s.autoscalerConfig(config)
	s.knativeConfig(config)
	raw, err := json.Marshal(config)
	if err != nil {
		panic(err)
	}
	return raw
}

// releaseConfig is the configuration of a revision on a router, and its planned create (the
// schema's defaults applied).
func (s releaseShape) releaseConfig(ctx context.Context, provider string, rev revisionSpec) (config, withDefaults tftypes.Value, err error) {
	raw := s.releaseConfigJSON(provider, rev)
	planned, err := planShape(ctx, raw)
	if err != nil {
		return config, withDefaults, err
	}
	_, typ := releaseSchema()
	if config, err = valueFromJSON(raw, typ); err != nil {
		return config, withDefaults, err
	}
	withDefaults, err = withPlannedDefaults(config, planned)
	return config, withDefaults, err
}

// opKind is one Terraform command of a schedule.
type opKind string

const (
	opCreate      opKind = "create"
	opNewTemplate opKind = "new template"
	opNewConfig   opKind = "new config"
	opReapply     opKind = "apply again"
	opDestroy     opKind = "destroy"
	// opLoseState: terraform state rm, then an apply creates the release again.
	opLoseState opKind = "state rm + create"
	// opImport: terraform state rm, terraform import, then an apply.
	opImport opKind = "state rm + import"
	// opReplace: -replace with create_before_destroy: the new instance's Create, then the
	// deposed one's Delete.
	opReplace opKind = "replace (create_before_destroy)"
)

// campaignOp is one command with what may happen during it.
type campaignOp struct {
	kind opKind
	bad  bool
	// newRouter is a replacement's new mesh_provider ("" keeps it).
	newRouter string
	// before is done behind the release's back before the command.
	before []outOfBand
	events applyEvents
}

// outOfBand edits.
type outOfBand string

const (
	oobEditTarget         outOfBand = "target template edited"
	oobDeleteRouter       outOfBand = "router object deleted"
	oobResetRouter        outOfBand = "router object set to 100/0"
	oobEditPrimary        outOfBand = "primary template edited"
	oobDeleteState        outOfBand = "state ConfigMap deleted"
	oobDeleteStatePrimary outOfBand = "state ConfigMap and primary deleted"
	oobDeleteLease        outOfBand = "Lease deleted"
	// oobRewriteRecord rewrites the state ConfigMap's record as one who may write ConfigMaps
	// could: the rejected revision becomes the last promoted one, and the rejection goes.
	// campaign_records_test.go draws it, with the other rewrites of the record.
	oobRewriteRecord outOfBand = "state ConfigMap's lastPromotedSpec rewritten to the rejected revision"
)

// applyEvents are armed for one command: each fires at most once, at a keyed request.
type applyEvents struct {
	faults faultPlan
	// lossSide loses its Ready pods at a random request (lossPerMille), or when the state
	// ConfigMap records lossPhase.
	lossSide     string
	lossPerMille int
	lossPhase    rollout.Phase
	lossRecovery time.Duration
	oob          outOfBand
	oobPerMille  int
	outage       string
	// outagePerMille starts the outage at a keyed request; it lasts outageChecks checks.
	outagePerMille int
	outageChecks   int
	// otherHostPerMille starts another host's apply of the same release, with the previous
	// template when otherHostStale.
	otherHostPerMille int
	otherHostStale    bool
}

func (e applyEvents) String() string {
	var parts []string
	if e.faults.killPerMille > 0 {
		parts = append(parts, fmt.Sprintf("kill %d‰", e.faults.killPerMille))
	}
	if e.faults.faultPerMille > 0 {
		parts = append(parts, fmt.Sprintf("API faults %d‰", e.faults.faultPerMille))
	}
	if e.lossSide != "" {
		at := fmt.Sprintf("%d‰", e.lossPerMille)
		if e.lossPhase != "" {
			at = "in " + string(e.lossPhase)
		}
		parts = append(parts, fmt.Sprintf("%s readiness loss %s (back after %s)", e.lossSide, at, e.lossRecovery))
	}
	if e.oob != "" {
		parts = append(parts, fmt.Sprintf("%s %d‰", e.oob, e.oobPerMille))
	}
	if e.outage != "" {
		parts = append(parts, fmt.Sprintf("Prometheus %s for %d checks %d‰", e.outage, e.outageChecks, e.outagePerMille))
	}
	if e.otherHostPerMille > 0 {
		parts = append(parts, fmt.Sprintf("another host's apply %d‰ (stale %v)", e.otherHostPerMille, e.otherHostStale))
	}
	return strings.Join(parts, ", ")
}

// randomEvents arms a command's events; about half of the commands get some.
func randomEvents(r *rand.Rand) applyEvents {
	var e applyEvents
	if r.IntN(3) == 0 {
		e.faults.killPerMille = []int{8, 20, 60}[r.IntN(3)]
	}
	if r.IntN(4) == 0 {
		e.faults.faultPerMille = []int{20, 80}[r.IntN(2)]
	}
	if r.IntN(3) == 0 {
		e.lossSide = []string{"canary", "primary"}[r.IntN(2)]
		e.lossRecovery = []time.Duration{0, 3 * time.Second, 40 * time.Second}[r.IntN(3)]
		if r.IntN(2) == 0 {
			e.lossPhase = []rollout.Phase{rollout.PhaseProgressing, rollout.PhasePromoting, rollout.PhaseFinalising, rollout.PhasePromoting, rollout.PhaseFinalising, rollout.PhaseRollingBack}[r.IntN(6)]
		} else {
			e.lossPerMille = []int{10, 40}[r.IntN(2)]
		}
	}
	if r.IntN(6) == 0 {
		e.oob = []outOfBand{oobEditTarget, oobDeleteRouter, oobResetRouter, oobEditPrimary, oobDeleteState, oobDeleteStatePrimary, oobDeleteLease}[r.IntN(7)]
		e.oobPerMille = []int{10, 40}[r.IntN(2)]
	}
	if r.IntN(6) == 0 {
		e.outage = []string{outageDown, outageNaN, outageEmpty}[r.IntN(3)]
		e.outagePerMille, e.outageChecks = 30, 1+r.IntN(4)
	}
	if r.IntN(10) == 0 {
		e.otherHostPerMille, e.otherHostStale = []int{15, 1000}[r.IntN(2)], r.IntN(2) == 0
	}
	return e
}

// campaignSchedule is one random run of the campaign.
type campaignSchedule struct {
	seed  int64
	shape releaseShape
	ops   []campaignOp
}

// newCampaignSchedule draws a schedule from its seed: a create, then one to four commands.
func newCampaignSchedule(seed int64) campaignSchedule {
	r := rand.New(rand.NewPCG(uint64(seed), 0x63616e617279))
	s := campaignSchedule{seed: seed, shape: randomShape(r)}
	if s.shape.router == "osm" && keyedCoin(seed, "istio") < 1.0/3 {
		// Drawn apart from the schedule's stream, so that the other schedules stay as they were.
		s.shape.router = "istio"
	}
	s.shape.router = drawIngressRouter(seed, s.shape)
	if keyedCoin(seed, "rollback_window") < 1.0/4 {
		s.shape.rollbackWindow = 1
	}
	s.shape.gates = drawBuiltInGates(seed)
	s.shape.web, s.shape.webQuery = drawWebBackend(seed)
	s.ops = append(s.ops, campaignOp{kind: opCreate, events: randomEvents(r)})
	exists := true
	for range 1 + r.IntN(4) {
		op := campaignOp{events: randomEvents(r), bad: r.IntN(3) == 0}
		switch n := r.IntN(20); {
		case !exists:
			op.kind = []opKind{opCreate, opCreate, opImport}[r.IntN(3)]
		case n < 7:
			op.kind = opNewTemplate
		case n < 9 && s.shape.trackConfig:
			op.kind = opNewConfig
		case n < 11:
			op.kind = opReapply
		case n < 13:
			op.kind = opDestroy
		case n < 15:
			op.kind = opLoseState
		case n < 17:
			op.kind = opImport
		case n < 19:
			op.kind = opReplace
			op.newRouter = replacementRouter(s.shape, r)
		default:
			op.kind = opNewTemplate
		}
		if r.IntN(5) == 0 {
			op.before = append(op.before, []outOfBand{oobEditTarget, oobDeleteRouter, oobEditPrimary, oobDeleteState, oobDeleteStatePrimary, oobDeleteStatePrimary}[r.IntN(6)])
		}
		exists = op.kind != opDestroy
		s.ops = append(s.ops, op)
	}
	drawKnative(&s)
	drawReplicaRatio(&s)
	drawDaemonSet(&s)
	drawStatefulSet(&s)
	drawDeploymentAutoscaler(&s)
	return s
}

// replacementRouter is the mesh_provider a replacement moves to: another router that runs the
// same strategy, or the same one (a plain -replace).
func replacementRouter(s releaseShape, r *rand.Rand) string {
	if r.IntN(2) == 0 || s.router == "nginx" {
		// Leaving nginx's ingress_ref takes two applies, as the plan says: a replacement keeps it.
		return ""
	}
	switch {
	case s.strategy == strategyCanary && s.router == "osm":
		return "gatewayapi"
	case s.strategy == strategyCanary:
		return "osm"
	case s.strategy == strategyBlueGreen && s.router == "osm":
		return "kubernetes"
	case s.strategy == strategyBlueGreen:
		return "osm"
	}
	return ""
}
