// Package rollout is the progressive-delivery engine: it initialises a release, steps traffic
// through a router while analysing metrics and webhooks, and promotes or rolls back. It knows
// nothing about Terraform; the router and the strategy are plugged in.
package rollout

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/canary-release/terraform-provider-canary/internal/alert"
	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Phase follows Flagger's canary phases.
type Phase string

const (
	PhaseInitializing Phase = "Initializing"
	PhaseInitialized  Phase = "Initialized"
	PhaseProgressing  Phase = "Progressing"
	PhasePromoting    Phase = "Promoting"
	PhaseFinalising   Phase = "Finalising"
	PhaseSucceeded    Phase = "Succeeded"
	PhaseFailed       Phase = "Failed"
	// PhaseRollingBack is ours, not Flagger's: it is recorded before a rollback starts, so a
	// run killed half-way through one is finished by the next run.
	PhaseRollingBack Phase = "RollingBack"
	// PhaseWaiting holds a new revision before it is scaled up, behind a confirm-rollout gate.
	PhaseWaiting Phase = "Waiting"
	// PhaseWaitingPromotion holds a canary that passed every step behind a confirm-promotion
	// gate; its checks keep running.
	PhaseWaitingPromotion Phase = "WaitingPromotion"
)

// Active reports a phase a run is in the middle of: under way, or stopped there.
func (p Phase) Active() bool { return p.active() }

// analysed reports a phase that follows a completed analysis: the passed template is being
// promoted, so only it may take the traffic.
func (p Phase) analysed() bool { return p == PhasePromoting || p == PhaseFinalising }

// active reports whether a run was in the middle of the phase when it stopped.
func (p Phase) active() bool {
	switch p {
	case PhaseInitializing, PhaseWaiting, PhaseProgressing, PhaseWaitingPromotion, PhasePromoting, PhaseFinalising, PhaseRollingBack:
		return true
	}
	return false
}

// Release is one canary_release as the engine sees it.
type Release struct {
	Namespace string
	Name      string
	// Provider is the mesh_provider; it selects the built-in metric queries.
	Provider string
	// Target is the Deployment being released. With Manifest set the release owns it.
	Target   string
	Manifest *appsv1.Deployment
	// TargetKind is target_ref.kind: a kind of internal/workload (released through a
	// "-primary" copy, or in place, see in_place.go); empty is a Deployment.
	TargetKind string
	Service    Service
	Analysis   Analysis
	// ProgressDeadline bounds every readiness wait.
	ProgressDeadline time.Duration
	SkipAnalysis     bool
	// RollbackWindow is rollback_window.revisions: a target that returns to one of the last
	// this many templates promoted before the current one is promoted without analysis
	// (rollback_window.go). 0 is off.
	RollbackWindow int
	// RouteName is the route_ref name, used by the {{ route }} template variable.
	RouteName string
	// Autoscaler is the target's HorizontalPodAutoscaler, or nil.
	Autoscaler *autoscaler.Ref
	// RetryRejected is the user's retry_rejected: a value other than the one recorded with a
	// rejection lets the rejected revision be analysed again (rejection.go).
	RetryRejected string
	// Instance identifies the Terraform resource instance that runs the release (kept in its
	// private state). Empty for an instance made before identities existed.
	Instance string
	// Seal signs and verifies the cluster's record of the release (seal.go); the caller keeps
	// it in Terraform's private state and saves its Sequence after every call. nil: no key is
	// known, so no record is trusted (untrusted.go) and none is signed.
	Seal *Seal
	// IncludeLabelPrefix selects the target's labels and annotations copied to the primary
	// (Flagger's -include-label-prefix; "*" is all of them, empty none). See configs.Metadata.
	IncludeLabelPrefix []string
}

// Service describes the three generated Services.
type Service struct {
	// Name is the apex Service's name (Flagger's service.name); empty means the target's.
	Name string
	Port int32
	// AppProtocol is the ports' appProtocol, e.g. "http" or "kubernetes.io/h2c".
	AppProtocol string
	// PortDiscovery exposes the target's other container ports on the Services too.
	PortDiscovery bool
	// Apex, Primary and Canary are extra labels and annotations of each Service.
	Apex, Primary, Canary ServiceMetadata
	TargetPort            intstr.IntOrString
	PortName              string
	Hosts                 []string
	// SelectorRouted says the router moves traffic by the apex Service's selector (no mesh):
	// the Services' reconciliation keeps the side the apex selects.
	SelectorRouted bool
}

// Apex is the apex Service name; like Flagger it defaults to the target name.
func (r Release) Apex() string {
	if r.Service.Name != "" {
		return r.Service.Name
	}
	return r.Target
}

// ServiceMetadata is what the user adds to a generated Service; the release's own labels win.
type ServiceMetadata struct {
	Labels, Annotations map[string]string
}

// PrimaryName is the generated primary Deployment's name.
func (r Release) PrimaryName() string { return r.Target + "-primary" }

// RouterSpec is what the router needs about this release.
func (r Release) RouterSpec() router.Spec {
	return router.Spec{
		Namespace: r.Namespace,
		Name:      r.Name,
		Target:    r.Target,
		Apex:      r.Apex(),
		Port:      r.Service.Port,
		Hosts:     r.Service.Hosts,
		// A release-owned workload goes with the release, so nothing is left to route to.
		OwnsWorkload:    r.Manifest != nil,
		Match:           r.Analysis.Match,
		MirrorWeight:    r.Analysis.MirrorWeight,
		SessionAffinity: r.Analysis.SessionAffinity,
		ReadyDeadline:   r.ProgressDeadline,
		ApexLabels:      r.Service.Apex.Labels,
		ApexAnnotations: r.Service.Apex.Annotations,
	}
}

// Analysis mirrors Flagger's spec.analysis.
type Analysis struct {
	Interval            time.Duration
	Threshold           int
	MaxWeight           int
	StepWeight          int
	StepWeights         []int
	StepWeightPromotion int
	// Iterations selects blue/green, or with Match A/B testing: that many analysis intervals.
	Iterations int
	// Match are the A/B conditions; the router sends the matching requests to the canary.
	Match []router.Match
	// Mirror copies requests to the canary before it gets weight (canary) or while it is
	// analysed (blue/green), as Flagger's mirror; MirrorWeight is the percent copied, 0 all.
	Mirror       bool
	MirrorWeight int
	// SessionAffinity keeps the clients a side answered on that side while the canary has
	// weight (Flagger's sessionAffinity).
	SessionAffinity *router.SessionAffinity
	// MaxQueryErrors is how many consecutive query errors one metric may have before the
	// run ends with "metrics unavailable"; 0 means the default, 3.
	MaxQueryErrors int
	Metrics        []Metric
	Webhooks       []Webhook
	// PrimaryReadyThreshold and CanaryReadyThreshold are the percent of updated replicas that
	// must be available for a side to count as ready (Flagger's); 0 means 100.
	PrimaryReadyThreshold int
	CanaryReadyThreshold  int
	// GateTimeout bounds how long a closed confirm-* gate may hold the run; zero leaves it to
	// the apply's own timeout.
	GateTimeout time.Duration
	// Alerts are told of the run's phase changes, as Flagger's AlertProviders.
	Alerts []alert.Alert
}

// Metric is one analysis check against Prometheus.
type Metric struct {
	Name string
	// Interval is the PromQL range, e.g. "1m".
	Interval string
	Min      *float64
	Max      *float64
	// Query is a Go template; empty means the provider's built-in query for Name.
	Query string
	// Variables fill the query's {{ variables.key }} (a metric template's template_variables).
	Variables map[string]string
	// Querier runs this metric's query when it has its own Prometheus (a metric template's);
	// nil means the engine's.
	Querier MetricQuerier
	// Judge compares the canary with the primary (see judge.go); nil reads the canary only.
	Judge *MetricJudge
	// DryRun evaluates and reports the metric but never fails the analysis.
	DryRun bool
}

// Webhook types, as in Flagger, in the order a run meets them.
const (
	HookConfirmRollout         = controls.ConfirmRollout
	HookPreRollout             = "pre-rollout"
	HookRollout                = "rollout"
	HookConfirmTrafficIncrease = controls.ConfirmTrafficIncrease
	HookConfirmPromotion       = controls.ConfirmPromotion
	HookPostRollout            = "post-rollout"
	HookRollback               = "rollback"
	HookEvent                  = "event"
)

// HookTypes lists every webhook type.
var HookTypes = []string{HookConfirmRollout, HookPreRollout, HookRollout, HookConfirmTrafficIncrease,
	HookConfirmPromotion, HookPostRollout, HookRollback, HookEvent}

// Webhook is one Flagger-style webhook.
type Webhook struct {
	Name     string
	Type     string
	URL      string
	Timeout  time.Duration
	Metadata map[string]string
	// Retries is how many more times a call that could not connect or got a 5xx or 429 is
	// tried, as Flagger's retries.
	Retries int
	// DisableTLS skips the verification of the webhook's TLS certificate.
	DisableTLS bool
	// MuteAlert keeps a gate's waiting out of the alerts.
	MuteAlert bool
}

// Status is the release's observable state, saved in the cluster and in Terraform state.
//
// It is also the engine's write-ahead record: each field is written to the state ConfigMap
// before the action it announces, so a later run can tell where an earlier one stopped (see
// recover.go for the rule).
type Status struct {
	Phase        Phase `json:"phase"`
	CanaryWeight int   `json:"canaryWeight"`
	// Matched records that the router sends the requests matching analysis.match to the
	// canary (A/B testing): the canary has traffic although its weight is 0.
	Matched bool `json:"matched,omitempty"`
	// Mirrored records that the router copies requests to the canary (analysis.mirror).
	Mirrored           bool      `json:"mirrored,omitempty"`
	FailedChecks       int       `json:"failedChecks"`
	Iterations         int       `json:"iterations"`
	LastAppliedSpec    string    `json:"lastAppliedSpec"`
	LastPromotedSpec   string    `json:"lastPromotedSpec"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
	Message            string    `json:"message"`

	// The fields below live only in the cluster record, not in the `status` attribute.

	// LastCheck is the last analysis interval's outcome: its verdict (passed, failed or
	// held), when, and each metric's value against its range. The state ConfigMap shows it
	// (LabelLastCheck, AnnotationLastCheck) and the data source returns it.
	LastCheck string `json:"lastCheck,omitempty"`
	// PrimarySpec is the template hash the primary runs, or is being rolled to.
	PrimarySpec string `json:"primarySpec,omitempty"`
	// CanarySpec is the template hash the canary (the target) runs while it is analysed.
	CanarySpec string `json:"canarySpec,omitempty"`
	// PassedSpec is the template hash whose analysis completed (or was skipped, or whose run
	// recorded an operator's promote-now, see PromoteNow): the only template, besides the last
	// promoted one, that may become the primary.
	PassedSpec string `json:"passedSpec,omitempty"`
	// Step is the index of the strategy step the canary weight belongs to.
	Step int `json:"step,omitempty"`
	// Initialized is set once the release's first initialisation completed; from then on a
	// Create finds an existing release rather than its own leftovers.
	Initialized bool `json:"initialized,omitempty"`
	// Owner is the resource instance that last ran the release (Release.Instance): only it
	// may dismantle the release.
	Owner string `json:"owner,omitempty"`
	// Target is the Deployment the release releases, so that an import that cannot restore
	// the manifest still knows what the generated objects are named after.
	Target string `json:"target,omitempty"`
	// Holder is the lock identity of the run that last wrote the record. A record that names
	// one was written by a provider whose runs keep the release's Lease when they end, so a
	// missing Lease means someone deleted it, perhaps under a run (see awaitDeletedLease).
	Holder string `json:"holder,omitempty"`
	// Router is the mesh_provider whose router carries the release's traffic. A run on
	// another mesh_provider (a replacement that changed it) first takes the traffic over
	// from that router (see takeOverRouting). Empty in records written before it existed.
	Router string `json:"router,omitempty"`
	// PromoteNow is the operator's promote-now the run accepted, written before the promotion
	// it allows: the promotion's proof (promotion.OperatorPromoteNow).
	PromoteNow *OperatorAction `json:"promoteNow,omitempty"`
	// Rejected is the last revision a failed analysis rejected: applies that still ask for it
	// refuse it until retry_rejected changes (rejection.go).
	Rejected *Rejection `json:"rejected,omitempty"`
	// ExpiredSession is the session-affinity cookie value the router expires since the last
	// release ended (router.Weights.Expired); empty while a canary has weight.
	ExpiredSession string `json:"expiredSession,omitempty"`
	// Promoted is the promoted templates, most recent first, each once, at most
	// MaxRollbackWindow+1: what rollback_window may return to (promotedHistory). A template
	// whose run rolled back is dropped from it (state format 3).
	Promoted []string `json:"promoted,omitempty"`
	// Revert is the revision this run promotes without analysis as a revert within
	// rollback_window, written before the promotion: the promotion's proof reads it.
	Revert string `json:"revert,omitempty"`
	// PrimaryReplicasBefore is the primary's replica count when the rollout started, with an
	// autoscaler: the primary gets as many back before traffic returns to it (holdPrimaryScale).
	PrimaryReplicasBefore int32 `json:"primaryReplicasBefore,omitempty"`
}
