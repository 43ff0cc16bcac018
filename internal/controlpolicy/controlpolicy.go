// Package controlpolicy names the permissions that the shipped ValidatingAdmissionPolicy
// (examples/rbac/policy-controls.yaml) asks for before anyone steers a release or rewrites its
// record on the state ConfigMap, and tells a plan whether the cluster enforces that policy.
//
// Without the policy, the controls are ConfigMap annotations and the record is ConfigMap data:
// whoever may update ConfigMaps in the namespace (the built-in edit ClusterRole, many
// application ServiceAccounts) may steer the release. The verbs below are checked by the
// policy through the authorizer; no API serves the resource, RBAC rules grant it all the same.
package controlpolicy

const (
	// Group and Resource are the authorization attributes the policy checks:
	// releases.canary-release.dev, namespaced, with the release's name as resourceName.
	Group    = "canary-release.dev"
	Resource = "releases"
	// VerbSteer is needed to set, change or remove a control annotation (pause, abort,
	// promote-now, the approvals). The provider needs it too: a run removes one-shot controls.
	VerbSteer = "steer"
	// VerbRecord is needed to create or delete the state ConfigMap, or change its data,
	// binaryData or immutable flag.
	VerbRecord = "record"

	// PolicyName is the ValidatingAdmissionPolicy, and BindingName its shipped binding.
	PolicyName  = "canary-release-controls"
	BindingName = "canary-release-controls"
	// ExampleFile is where the policy and its binding ship, for messages.
	ExampleFile = "examples/rbac/policy-controls.yaml"
	// OperatorRoleFile grants VerbSteer to the people who steer releases.
	OperatorRoleFile = "examples/rbac/clusterrole-operator.yaml"
	// CheckRoleFile lets the provider's identity read whether the policy is installed.
	CheckRoleFile = "examples/rbac/clusterrole-control-policy-check.yaml"
)

// Verbs are the verbs the policy checks, for the RBAC examples' tests.
var Verbs = []string{VerbSteer, VerbRecord}
