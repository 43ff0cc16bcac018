package controlpolicy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/canary-release/terraform-provider-canary/internal/controlpolicy"
	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// repoFile reads a file by its path from the repository's root, as the constants name it.
func repoFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// documents splits a multi-document YAML file.
func documents(text string) []string {
	var docs []string
	for _, d := range regexp.MustCompile(`(?m)^---$`).Split(text, -1) {
		if strings.Contains(d, "kind:") {
			docs = append(docs, d)
		}
	}
	return docs
}

// The shipped policy guards exactly the engine's control keys, with the verbs, resource and
// names the provider's messages and plan check use.
func TestShippedPolicyMatchesTheProvider(t *testing.T) {
	docs := documents(repoFile(t, controlpolicy.ExampleFile))
	if len(docs) != 2 {
		t.Fatalf("%s holds %d documents, want the policy and its binding", controlpolicy.ExampleFile, len(docs))
	}
	var policy admissionv1.ValidatingAdmissionPolicy
	var binding admissionv1.ValidatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &policy); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &binding); err != nil {
		t.Fatal(err)
	}
	if policy.Kind != "ValidatingAdmissionPolicy" || policy.Name != controlpolicy.PolicyName {
		t.Errorf("first document is %s %s, want ValidatingAdmissionPolicy %s", policy.Kind, policy.Name, controlpolicy.PolicyName)
	}
	if binding.Kind != "ValidatingAdmissionPolicyBinding" || binding.Name != controlpolicy.BindingName || binding.Spec.PolicyName != controlpolicy.PolicyName ||
		!slices.Contains(binding.Spec.ValidationActions, admissionv1.Deny) {
		t.Errorf("second document is %s %s of policy %s with actions %v, want binding %s of %s with Deny",
			binding.Kind, binding.Name, binding.Spec.PolicyName, binding.Spec.ValidationActions, controlpolicy.BindingName, controlpolicy.PolicyName)
	}

	want := []string{controls.Pause, controls.Abort, controls.PromoteNow}
	for _, gate := range []string{rollout.HookConfirmRollout, rollout.HookConfirmTrafficIncrease, rollout.HookConfirmPromotion} {
		want = append(want, controls.ApprovalKey(gate))
	}
	var keys []string
	for _, v := range policy.Spec.Variables {
		if v.Name == "controlKeys" {
			for _, m := range regexp.MustCompile(`'([^']+)'`).FindAllStringSubmatch(v.Expression, -1) {
				keys = append(keys, m[1])
			}
		}
	}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("the policy guards the control keys %v, want the engine's %v", keys, want)
	}

	for _, verb := range controlpolicy.Verbs {
		call := "authorizer.group('" + controlpolicy.Group + "').resource('" + controlpolicy.Resource + "')"
		found := false
		for _, v := range policy.Spec.Validations {
			e := strings.Join(strings.Fields(v.Expression), "")
			found = found || (strings.Contains(e, call) && strings.Contains(e, ".check('"+verb+"').allowed()"))
		}
		if !found {
			t.Errorf("no validation asks %s for verb %q", call, verb)
		}
	}
}

// rulesOf reads the rules of a Role or ClusterRole file.
func rulesOf(t *testing.T, file string) []rbacv1.PolicyRule {
	t.Helper()
	var role rbacv1.ClusterRole // a Role's rules decode the same
	if err := yaml.Unmarshal([]byte(repoFile(t, file)), &role); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return role.Rules
}

// grants reports whether a rule grants exactly verbs on the policy's resource.
func grants(rules []rbacv1.PolicyRule, verbs ...string) bool {
	for _, r := range rules {
		if slices.Equal(r.APIGroups, []string{controlpolicy.Group}) && slices.Equal(r.Resources, []string{controlpolicy.Resource}) && slices.Equal(r.Verbs, verbs) {
			return true
		}
	}
	return false
}

// The provider's Role grants it both verbs; the operators' ClusterRole grants steer only,
// not the rewriting of the record.
func TestRolesGrantThePolicysVerbs(t *testing.T) {
	if !grants(rulesOf(t, "examples/rbac/role.yaml"), controlpolicy.Verbs...) {
		t.Errorf("examples/rbac/role.yaml grants the provider no rule with verbs %v on %s.%s", controlpolicy.Verbs, controlpolicy.Resource, controlpolicy.Group)
	}
	if !grants(rulesOf(t, controlpolicy.OperatorRoleFile), controlpolicy.VerbSteer) {
		t.Errorf("%s grants no rule with only verb %s on %s.%s", controlpolicy.OperatorRoleFile, controlpolicy.VerbSteer, controlpolicy.Resource, controlpolicy.Group)
	}
	var canCheck bool
	for _, r := range rulesOf(t, controlpolicy.CheckRoleFile) {
		canCheck = canCheck || (slices.Contains(r.Resources, "validatingadmissionpolicies") && slices.Contains(r.ResourceNames, controlpolicy.PolicyName))
	}
	if !canCheck {
		t.Errorf("%s does not grant reading ValidatingAdmissionPolicy %s", controlpolicy.CheckRoleFile, controlpolicy.PolicyName)
	}
}
