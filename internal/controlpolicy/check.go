package controlpolicy

import (
	"context"
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// Warning is what a plan says about the policy; Check returns nil when the policy enforces.
type Warning struct {
	Summary, Detail string
}

// Summaries of the two warnings.
const (
	SummaryOpen    = "canary_release controls are open to every ConfigMap writer"
	SummaryUnknown = "canary_release cannot tell whether its controls are protected"
)

// Check tells whether the policy denies, in namespace, the writes it guards: the policy
// exists and a binding of it with the Deny action selects the namespace. A read the
// provider's identity may not make (a namespaced Role grants no cluster-scoped reads) makes
// the answer unknown, which is a warning of its own.
func Check(ctx context.Context, kube kubernetes.Interface, namespace, release string) *Warning {
	api := kube.AdmissionregistrationV1()
	if _, err := api.ValidatingAdmissionPolicies().Get(ctx, PolicyName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return open(namespace, release, fmt.Sprintf("the cluster has no ValidatingAdmissionPolicy %s", PolicyName))
	} else if err != nil {
		return unknown(namespace, release, err)
	}
	bindings, err := api.ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return unknown(namespace, release, err)
	}
	var nsLabels labels.Set
	for _, b := range bindings.Items {
		if b.Spec.PolicyName != PolicyName || !slices.Contains(b.Spec.ValidationActions, admissionv1.Deny) {
			continue
		}
		selector, everywhere, err := namespaceSelector(b)
		if err != nil {
			continue
		}
		if everywhere {
			return nil
		}
		if nsLabels == nil {
			ns, err := kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
			if err != nil {
				return unknown(namespace, release, err)
			}
			nsLabels = labels.Set(ns.Labels)
		}
		if selector.Matches(nsLabels) {
			return nil
		}
	}
	return open(namespace, release, fmt.Sprintf("no binding of ValidatingAdmissionPolicy %s with validationActions Deny selects namespace %s", PolicyName, namespace))
}

// namespaceSelector is the binding's namespace selector; everywhere when it selects every
// namespace (no selector, or an empty one).
func namespaceSelector(b admissionv1.ValidatingAdmissionPolicyBinding) (labels.Selector, bool, error) {
	if b.Spec.MatchResources == nil || b.Spec.MatchResources.NamespaceSelector == nil {
		return nil, true, nil
	}
	s := b.Spec.MatchResources.NamespaceSelector
	if len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0 {
		return nil, true, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(s)
	return selector, false, err
}

// exposure says what an unprotected state ConfigMap lets a ConfigMap writer do.
func exposure(namespace, release string) string {
	return fmt.Sprintf("anyone who may update ConfigMaps in namespace %s (the built-in edit ClusterRole, many application ServiceAccounts) can pause, resume, abort "+
		"or promote release %s and approve its gates by annotating ConfigMap %s-canary-release, or rewrite the record it holds", namespace, release, release)
}

// remedy says what to install, and what to grant.
func remedy() string {
	return fmt.Sprintf("Install the ValidatingAdmissionPolicy %s and its binding (kubectl apply -f %s): it asks for the verb %q on %s.%s to change a control and %q to change the record; "+
		"grant %q to operators with %s and both to the provider's identity (examples/rbac/role.yaml).",
		PolicyName, ExampleFile, VerbSteer, Resource, Group, VerbRecord, VerbSteer, OperatorRoleFile)
}

func open(namespace, release, why string) *Warning {
	return &Warning{Summary: SummaryOpen, Detail: fmt.Sprintf("Since %s, %s. %s", why, exposure(namespace, release), remedy())}
}

func unknown(namespace, release string, err error) *Warning {
	return &Warning{Summary: SummaryUnknown, Detail: fmt.Sprintf("The provider's identity cannot read whether ValidatingAdmissionPolicy %s guards namespace %s: %v. "+
		"Unless it does, %s. %s To let the plan tell, grant the provider's identity %s.",
		PolicyName, namespace, err, exposure(namespace, release), remedy(), CheckRoleFile)}
}
