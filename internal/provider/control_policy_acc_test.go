package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/canary-release/terraform-provider-canary/internal/controlpolicy"
	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

// The seven controls: each set and removed (removing the pause is the resume).
var controlAnnotations = map[string]string{
	controls.Pause:      "true",
	controls.Abort:      "true",
	controls.PromoteNow: "true",
	controls.ApprovalKey(rollout.HookConfirmRollout):         "approved",
	controls.ApprovalKey(rollout.HookConfirmTrafficIncrease): "approved",
	controls.ApprovalKey(rollout.HookConfirmPromotion):       "approved",
}

// TestAccRelease_controlPolicy installs examples/rbac/policy-controls.yaml as shipped, its
// binding narrowed to the test's namespace so that parallel tests are unaffected, and runs a
// release as a ServiceAccount holding only the example Roles. Then, on the API server: an
// edit holder can neither set nor remove any control nor change the record; an edit holder
// with the example operator ClusterRole can steer but not rewrite the record; the provider
// removes a stale one-shot control and destroys the record under the policy; and the plan's
// check tells a guarded namespace from an unguarded one, and says when it cannot tell.
func TestAccRelease_controlPolicy(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	binding := c.installControlPolicy(t, ns)
	editor := c.tokenClient(t, ns, "editor", "edit")
	operator := c.tokenClient(t, ns, "operator", "edit", "canary-release-operator")
	refused := func(who, what string) string {
		return fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: system:serviceaccount:%s:%s may not %s",
			controlpolicy.PolicyName, binding, ns, who, what)
	}
	// The policy acts once the API server has loaded it: until it refuses the editor a forged record.
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "forged-canary-release"}, Data: map[string]string{"status.json": "{}"}}
		_, err := editor.CoreV1().ConfigMaps(ns).Create(ctx, forged, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"), nil
	})
	if err != nil {
		t.Fatalf("the policy never refused the editor a ConfigMap forged-canary-release: %v", err)
	}

	provider := c.providerAs(t, ns, rbacRoles(t, osmRoleFiles...))
	terraformClient := c.serviceAccountClient(t, ns, serviceAccount)
	config := func(image string) string {
		return provider + releaseConfig(ns, manifestWorkload(image, "0"), killAnalysis, "")
	}
	state := rollout.StateConfigMapName("podinfo")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             c.checkReleaseGone(ns),
		Steps: []resource.TestStep{
			{
				Config: config("podinfo:6.0.0"),
				Check: resource.ComposeAggregateTestCheckFunc(
					checkCluster(func() error {
						return checkCreateRefused(ns, editor, refused("editor", "create the record of release forged"))
					}),
					checkCluster(func() error { return checkSteering(ns, state, editor, operator, refused) }),
					checkCluster(func() error { return checkRecordGuarded(ns, state, editor, operator, refused) }),
					checkCluster(func() error { return checkPlanSeesPolicy(ns, c.kube, terraformClient) }),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
			},
			{
				// An abort set before the update's run does not act on it: the run's first
				// record removes it, which the provider may do because role.yaml grants steer.
				PreConfig: func() {
					if err := annotate(operator, ns, state, controls.Abort, "true"); err != nil {
						t.Fatalf("the operator could not set %s: %v", controls.Abort, err)
					}
				},
				Config: config("podinfo:6.0.1"),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					checkCluster(func() error {
						cm, err := c.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), state, metav1.GetOptions{})
						if err == nil && cm.Annotations[controls.Abort] != "" {
							err = fmt.Errorf("ConfigMap %s still has %s=%s after the run", state, controls.Abort, cm.Annotations[controls.Abort])
						}
						return err
					}),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
		},
	})
}

// installControlPolicy applies the shipped policy and its binding, the binding renamed and
// narrowed to ns; it returns the binding's name. Cleanup removes both.
func (c *testCluster) installControlPolicy(t *testing.T, ns string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(examplesRoot, "rbac", filepath.Base(controlpolicy.ExampleFile)))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := localstack.DecodeManifests(data)
	if err != nil {
		t.Fatal(err)
	}
	applier, err := localstack.NewApplier(c.adminConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	name := controlpolicy.BindingName + "-" + ns
	ctx := context.Background()
	for _, o := range objs {
		if o.GetKind() == "ValidatingAdmissionPolicyBinding" {
			o.SetName(name)
			selector := map[string]any{"matchLabels": map[string]any{corev1.LabelMetadataName: ns}}
			if err := unstructured.SetNestedField(o.Object, selector, "spec", "matchResources", "namespaceSelector"); err != nil {
				t.Fatal(err)
			}
		}
		if err := applier.Apply(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		api := c.kube.AdmissionregistrationV1()
		_ = api.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = api.ValidatingAdmissionPolicies().Delete(ctx, controlpolicy.PolicyName, metav1.DeleteOptions{})
	})
	return name
}

// tokenClient creates ServiceAccount name in ns, binds each ClusterRole to it there (the
// operator's from examples/rbac), and returns a client that authenticates with a token of
// that account only.
func (c *testCluster) tokenClient(t *testing.T, ns, name string, clusterRoles ...string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if _, err := c.kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := fmt.Sprintf("system:serviceaccount:%s:%s", ns, name)
	for _, role := range clusterRoles {
		wantGranted := authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update", Resource: "configmaps"}
		if role != "edit" {
			c.applyOperatorRole(t)
			wantGranted = authorizationv1.ResourceAttributes{Namespace: ns, Verb: controlpolicy.VerbSteer, Group: controlpolicy.Group, Resource: controlpolicy.Resource, Name: "podinfo"}
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + role, Namespace: ns},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		}
		if _, err := c.kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			review, err := c.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts"}, ResourceAttributes: &wantGranted},
			}, metav1.CreateOptions{})
			return err == nil && review.Status.Allowed, err
		})
		if err != nil {
			t.Fatalf("%s is not granted %+v by ClusterRole %s: %v", user, wantGranted, role, err)
		}
	}
	return c.serviceAccountClient(t, ns, name)
}

// applyOperatorRole applies examples/rbac/clusterrole-operator.yaml as it is.
func (c *testCluster) applyOperatorRole(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(examplesRoot, "rbac", filepath.Base(controlpolicy.OperatorRoleFile)))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := localstack.DecodeManifests(data)
	if err != nil {
		t.Fatal(err)
	}
	applier, err := localstack.NewApplier(c.adminConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := applier.Apply(context.Background(), objs...); err != nil {
		t.Fatal(err)
	}
}

// serviceAccountClient is a client authenticated by a fresh token of ServiceAccount name.
func (c *testCluster) serviceAccountClient(t *testing.T, ns, name string) kubernetes.Interface {
	t.Helper()
	expiry := int64(time.Hour / time.Second)
	tr, err := c.kube.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(c.adminConfig(t))
	cfg.BearerToken = tr.Status.Token
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// annotate sets (value) or removes ("") an annotation of ConfigMap name, as kubectl annotate does.
func annotate(kube kubernetes.Interface, ns, name, key, value string) error {
	v := any(value)
	if value == "" {
		v = nil
	}
	return patchConfigMap(kube, ns, name, map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
}

func patchConfigMap(kube kubernetes.Interface, ns, name string, patch map[string]any) error {
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = kube.CoreV1().ConfigMaps(ns).Patch(context.Background(), name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}

// wantRefused checks that err is the API server's Forbidden carrying text.
func wantRefused(what string, err error, text string) error {
	switch {
	case err == nil:
		return fmt.Errorf("%s went through; want it refused with %q", what, text)
	case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), text):
		return fmt.Errorf("%s failed with %v; want Forbidden with %q", what, err, text)
	}
	return nil
}

func checkCreateRefused(ns string, editor kubernetes.Interface, text string) error {
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "forged-canary-release"}, Data: map[string]string{"status.json": "{}"}}
	_, err := editor.CoreV1().ConfigMaps(ns).Create(context.Background(), forged, metav1.CreateOptions{})
	return wantRefused("the editor's create of ConfigMap forged-canary-release", err, text)
}

// checkSteering: the editor cannot set or remove any control; the operator can do both.
func checkSteering(ns, state string, editor, operator kubernetes.Interface, refused func(who, what string) string) error {
	var errs []error
	for key, value := range controlAnnotations {
		steer := refused("editor", fmt.Sprintf("steer release podinfo: changing %s needs the verb steer on releases.canary-release.dev in namespace %s", key, ns))
		errs = append(errs, wantRefused("the editor setting "+key, annotate(editor, ns, state, key, value), steer))
		if err := annotate(operator, ns, state, key, value); err != nil {
			errs = append(errs, fmt.Errorf("the operator could not set %s=%s: %w", key, value, err))
			continue
		}
		errs = append(errs, wantRefused("the editor removing "+key, annotate(editor, ns, state, key, ""), steer))
		if key == controls.Pause {
			errs = append(errs, wantRefused("the editor setting "+key+"=false", annotate(editor, ns, state, key, "false"), steer))
		}
		if err := annotate(operator, ns, state, key, ""); err != nil {
			errs = append(errs, fmt.Errorf("the operator could not remove %s: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

// checkRecordGuarded: neither the editor nor the operator may change or delete the record.
func checkRecordGuarded(ns, state string, editor, operator kubernetes.Interface, refused func(who, what string) string) error {
	rewrite := map[string]any{"data": map[string]any{"status.json": `{"phase":"Succeeded"}`}}
	change := "change the record of release podinfo: it needs the verb record on releases.canary-release.dev in namespace " + ns
	return errors.Join(
		wantRefused("the editor's rewrite of the record", patchConfigMap(editor, ns, state, rewrite), refused("editor", change)),
		wantRefused("the operator's rewrite of the record", patchConfigMap(operator, ns, state, rewrite), refused("operator", change)),
		wantRefused("the editor's delete of the record", editor.CoreV1().ConfigMaps(ns).Delete(context.Background(), state, metav1.DeleteOptions{}),
			refused("editor", "delete the record of release podinfo")),
	)
}

// checkPlanSeesPolicy: the plan's check finds the policy guarding ns and not another
// namespace, and a namespaced identity cannot tell.
func checkPlanSeesPolicy(ns string, admin, namespaced kubernetes.Interface) error {
	ctx := context.Background()
	var errs []error
	if w := controlpolicy.Check(ctx, admin, ns, "podinfo"); w != nil {
		errs = append(errs, fmt.Errorf("with the policy bound to %s the plan warns %q: %s", ns, w.Summary, w.Detail))
	}
	if w := controlpolicy.Check(ctx, admin, "kube-public", "podinfo"); w == nil || w.Summary != controlpolicy.SummaryOpen {
		errs = append(errs, fmt.Errorf("in kube-public, which the binding does not select, the plan warns %+v; want %q", w, controlpolicy.SummaryOpen))
	}
	forbidden := fmt.Sprintf(`User "system:serviceaccount:%s:%s" cannot get resource "validatingadmissionpolicies"`, ns, serviceAccount)
	if w := controlpolicy.Check(ctx, namespaced, ns, "podinfo"); w == nil || w.Summary != controlpolicy.SummaryUnknown || !strings.Contains(w.Detail, forbidden) {
		errs = append(errs, fmt.Errorf("as the provider's namespaced identity the plan warns %+v; want %q naming %q", w, controlpolicy.SummaryUnknown, forbidden))
	}
	return errors.Join(errs...)
}
