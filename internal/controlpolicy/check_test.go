package controlpolicy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func policy() *admissionv1.ValidatingAdmissionPolicy {
	return &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyName}}
}

func binding(name string, actions []admissionv1.ValidationAction, selector *metav1.LabelSelector) *admissionv1.ValidatingAdmissionPolicyBinding {
	b := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: PolicyName, ValidationActions: actions},
	}
	if selector != nil {
		b.Spec.MatchResources = &admissionv1.MatchResources{NamespaceSelector: selector}
	}
	return b
}

func shop() *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "shop"}}}
}

// forbid makes the fake API server refuse verb on resource as RBAC would, to a namespaced
// identity that holds no cluster-scoped permission.
func forbid(kube *fake.Clientset, verb, group, resource string) {
	kube.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: group, Resource: resource}, "",
			fmt.Errorf(`User "system:serviceaccount:ci:terraform" cannot %s resource %q in API group %q at the cluster scope`, verb, resource, group))
	})
}

func TestCheck(t *testing.T) {
	deny := []admissionv1.ValidationAction{admissionv1.Deny}
	openText := "anyone who may update ConfigMaps in namespace shop (the built-in edit ClusterRole, many application ServiceAccounts) can pause, resume, abort " +
		"or promote release podinfo and approve its gates by annotating ConfigMap podinfo-canary-release, or rewrite the record it holds. " +
		"Install the ValidatingAdmissionPolicy canary-release-controls and its binding (kubectl apply -f examples/rbac/policy-controls.yaml)"
	cases := []struct {
		name    string
		objects []runtime.Object
		forbid  []string // verb, group, resource
		// summary is the warning's, "" for none; detail holds each of these texts.
		summary string
		detail  []string
	}{
		{name: "installed", objects: []runtime.Object{policy(), binding(BindingName, deny, nil)}},
		{name: "installed, bound by namespace label", objects: []runtime.Object{policy(), shop(),
			binding("other", deny, &metav1.LabelSelector{MatchLabels: map[string]string{"team": "other"}}),
			binding("shop", deny, &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}})}},
		{name: "no policy", objects: []runtime.Object{binding(BindingName, deny, nil)},
			summary: SummaryOpen, detail: []string{"Since the cluster has no ValidatingAdmissionPolicy canary-release-controls, " + openText}},
		{name: "no binding", objects: []runtime.Object{policy()},
			summary: SummaryOpen, detail: []string{"Since no binding of ValidatingAdmissionPolicy canary-release-controls with validationActions Deny selects namespace shop, " + openText}},
		{name: "bound to audit only", objects: []runtime.Object{policy(), binding(BindingName, []admissionv1.ValidationAction{admissionv1.Audit, admissionv1.Warn}, nil)},
			summary: SummaryOpen, detail: []string{"no binding of ValidatingAdmissionPolicy canary-release-controls with validationActions Deny selects namespace shop"}},
		{name: "bound to other namespaces", objects: []runtime.Object{policy(), shop(),
			binding(BindingName, deny, &metav1.LabelSelector{MatchLabels: map[string]string{"team": "other"}})},
			summary: SummaryOpen, detail: []string{"no binding of ValidatingAdmissionPolicy canary-release-controls with validationActions Deny selects namespace shop"}},
		{name: "forbidden to read the policy", objects: []runtime.Object{policy(), binding(BindingName, deny, nil)},
			forbid:  []string{"get", "admissionregistration.k8s.io", "validatingadmissionpolicies"},
			summary: SummaryUnknown, detail: []string{
				"The provider's identity cannot read whether ValidatingAdmissionPolicy canary-release-controls guards namespace shop: " +
					`validatingadmissionpolicies.admissionregistration.k8s.io is forbidden: User "system:serviceaccount:ci:terraform" cannot get resource "validatingadmissionpolicies"`,
				"Unless it does, " + openText,
				"To let the plan tell, grant the provider's identity examples/rbac/clusterrole-control-policy-check.yaml."}},
		{name: "forbidden to list the bindings", objects: []runtime.Object{policy(), binding(BindingName, deny, nil)},
			forbid:  []string{"list", "admissionregistration.k8s.io", "validatingadmissionpolicybindings"},
			summary: SummaryUnknown, detail: []string{`cannot list resource "validatingadmissionpolicybindings" in API group "admissionregistration.k8s.io" at the cluster scope`}},
		{name: "forbidden to read the namespace a binding selects", objects: []runtime.Object{policy(), shop(),
			binding("shop", deny, &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}})},
			forbid:  []string{"get", "", "namespaces"},
			summary: SummaryUnknown, detail: []string{`cannot get resource "namespaces" in API group ""`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(tc.objects...)
			if tc.forbid != nil {
				forbid(kube, tc.forbid[0], tc.forbid[1], tc.forbid[2])
			}
			w := Check(context.Background(), kube, "shop", "podinfo")
			if tc.summary == "" {
				if w != nil {
					t.Fatalf("want no warning, got %q: %s", w.Summary, w.Detail)
				}
				return
			}
			if w == nil {
				t.Fatalf("want the warning %q, got none", tc.summary)
			}
			if w.Summary != tc.summary {
				t.Errorf("summary %q, want %q", w.Summary, tc.summary)
			}
			for _, text := range tc.detail {
				if !strings.Contains(w.Detail, text) {
					t.Errorf("detail %q\ndoes not say %q", w.Detail, text)
				}
			}
		})
	}
}
