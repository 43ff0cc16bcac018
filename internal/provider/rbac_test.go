package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/canary-release/terraform-provider-canary/internal/controlpolicy"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

// rbacExamples is the RBAC example the docs point at; these tests bind it as it is.
var rbacExamples = filepath.Join(examplesRoot, "rbac")

// osmRoleFiles are the Roles a release through OSM needs.
var osmRoleFiles = []string{"role.yaml", "role-osm.yaml"}

// serviceAccount is the identity the least-privilege tests run the provider as.
const serviceAccount = "terraform"

// TestAccRelease_leastPrivilege runs a whole OSM release (create, a promoted update, a
// rolled-back update, destroy, and the refreshes and plans between them) as a ServiceAccount
// that holds nothing but the example Roles.
func TestAccRelease_leastPrivilege(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	c.dryRunRBACExamples(t, ns)
	provider := c.providerAs(t, ns, rbacRoles(t, osmRoleFiles...))
	hooks := newHookServer(t)
	config := func(image, hookPath string) string {
		analysis := killAnalysis + fmt.Sprintf("\n    webhooks = [{ name = \"load-test\", url = %q, timeout = \"5s\" }]", hooks.URL+hookPath)
		return provider + releaseConfig(ns, manifestWorkload(image, "0"), analysis, "")
	}
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             c.checkReleaseGone(ns),
		Steps: []resource.TestStep{
			{
				Config: config("podinfo:6.0.0", "/ok"),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkSplit(ns, 100, 0),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkReady(ns, "podinfo-primary"),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
			},
			{
				PreConfig: func() {
					rec = c.recordWeights(t, ns, "podinfo")
					// An out-of-band edit of a generated Service, which the apply repairs: the
					// Role's services update, which otherwise only a target_ref destroy needs.
					patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, router.LabelManagedBy)
					if _, err := c.kube.CoreV1().Services(ns).Patch(context.Background(), "podinfo-canary", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
						t.Fatal(err)
					}
				},
				Config: config("podinfo:6.0.1", "/ok"),
				Check: resource.ComposeAggregateTestCheckFunc(
					checkCluster(func() error {
						svc, err := c.kube.CoreV1().Services(ns).Get(context.Background(), "podinfo-canary", metav1.GetOptions{})
						if err == nil && svc.Labels[router.LabelManagedBy] != router.ManagedByValue {
							err = fmt.Errorf("Service podinfo-canary has labels %v after the apply, want %s=%s back", svc.Labels, router.LabelManagedBy, router.ManagedByValue)
						}
						return err
					}),
					func(s *terraform.State) error { return c.checkWeights(rec, goodReleaseWeights...)(s) },
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					c.checkSplit(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					// The optional Events rule is in the Role, so the story is told.
					checkCluster(func() error {
						return c.checkEvents(ns, "Progressing", "Promoting", "Finalising", "Succeeded")
					}),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
			{
				Config: config("podinfo:6.0.2", "/fail"),
				ExpectError: wrappedPattern(`rollout webhook load-test failed: status 500[\s\S]*\(failed checks: 2 of threshold 2\)\. ` +
					`Rolled back at canary weight 10%: 100% of traffic is back on the primary podinfo-primary`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					c.checkSplit(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
				),
			},
		},
	})
}

// TestAccRelease_leastPrivilegeDenied takes one representative permission at a time out of
// the example Roles: the apply must fail with the API server's Forbidden text, which names the
// identity, the verb, the resource and its API group, and leave traffic on the primary. A rule
// the example marks optional must not be needed.
func TestAccRelease_leastPrivilegeDenied(t *testing.T) {
	c := testAccStack(t)
	roles := rbacRoles(t, osmRoleFiles...)
	cases := []struct {
		group, resource, verb string
		// update: the create goes through, and the update's first weight shift needs the
		// permission; otherwise the create fails.
		update bool
		// optional: the release goes through without the permission.
		optional bool
	}{
		{group: "coordination.k8s.io", resource: "leases", verb: "create"},
		{group: "apps", resource: "deployments", verb: "patch"},
		{group: "", resource: "configmaps", verb: "update"},
		{group: "split.smi-spec.io", resource: "trafficsplits", verb: "update", update: true},
		{group: "", resource: "events", verb: "create", optional: true},
	}
	for _, tc := range cases {
		t.Run(tc.resource+"/"+tc.verb, func(t *testing.T) {
			ns := c.namespace(t)
			provider := c.providerAs(t, ns, withoutVerb(t, roles, tc.group, tc.resource, tc.verb))
			config := func(image string) string {
				return provider + releaseConfig(ns, manifestWorkload(image, "0"), killAnalysis, "")
			}
			forbidden := regexp.QuoteMeta(fmt.Sprintf(`User "system:serviceaccount:%s:%s" cannot %s resource %q in API group %q in the namespace %q`,
				ns, serviceAccount, tc.verb, tc.resource, tc.group, ns))
			steps := []resource.TestStep{{Config: config("podinfo:6.0.0"), ExpectError: wrappedPattern(forbidden)}}
			switch {
			case tc.optional:
				steps = []resource.TestStep{{
					Config:            config("podinfo:6.0.0"),
					Check:             resource.ComposeAggregateTestCheckFunc(c.checkSplit(ns, 100, 0), c.checkReady(ns, "podinfo-primary")),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
				}}
			case tc.update:
				steps = []resource.TestStep{
					{Config: config("podinfo:6.0.0")},
					{
						Config:      config("podinfo:6.0.1"),
						ExpectError: wrappedPattern(forbidden + `[\s\S]*` + regexp.QuoteMeta("100% of traffic is back on the primary podinfo-primary")),
					},
					{
						RefreshState:       true,
						ExpectNonEmptyPlan: true,
						Check: resource.ComposeAggregateTestCheckFunc(
							c.checkSplit(ns, 100, 0),
							c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
							c.checkReplicas(ns, "podinfo", 0),
						),
					},
				}
			}
			resource.ParallelTest(t, resource.TestCase{ProtoV6ProviderFactories: testAccProtoV6ProviderFactories, Steps: steps})
		})
	}
}

// rbacRoles reads Roles from the RBAC example.
func rbacRoles(t *testing.T, files ...string) []*rbacv1.Role {
	t.Helper()
	var roles []*rbacv1.Role
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(rbacExamples, f))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := localstack.DecodeManifests(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, o := range objs {
			var r rbacv1.Role
			if o.GetKind() != "Role" {
				t.Fatalf("%s holds a %s, want only Roles", f, o.GetKind())
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &r, true); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			roles = append(roles, &r)
		}
	}
	return roles
}

// withoutVerb returns copies of roles in which no rule grants verb on resource of group.
func withoutVerb(t *testing.T, roles []*rbacv1.Role, group, resource, verb string) []*rbacv1.Role {
	t.Helper()
	removed := false
	out := make([]*rbacv1.Role, 0, len(roles))
	for _, r := range roles {
		r = r.DeepCopy()
		var rules []rbacv1.PolicyRule
		for _, rule := range r.Rules {
			if !slices.Contains(rule.APIGroups, group) || !slices.Contains(rule.Resources, resource) || !slices.Contains(rule.Verbs, verb) {
				rules = append(rules, rule)
				continue
			}
			removed = true
			// The rule's other resources keep every verb.
			if others := slices.DeleteFunc(slices.Clone(rule.Resources), func(s string) bool { return s == resource }); len(others) > 0 {
				keep := *rule.DeepCopy()
				keep.Resources = others
				rules = append(rules, keep)
			}
			rule.Resources = []string{resource}
			rule.Verbs = slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return v == verb })
			if len(rule.Verbs) > 0 {
				rules = append(rules, rule)
			}
		}
		r.Rules = rules
		out = append(out, r)
	}
	if !removed {
		t.Fatalf("no example rule grants %s on %s in API group %q: the case would test nothing", verb, resource, group)
	}
	return out
}

// adminConfig is the stack's admin client configuration.
func (c *testCluster) adminConfig(t *testing.T) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// providerAs creates ServiceAccount serviceAccount in ns, binds roles to it there, and returns
// a provider block that connects with a token of that account only: host, token and CA, no
// client certificate. The process-wide KUBE_CONFIG_PATH still names the admin kubeconfig, whose
// token the block's token overrides; the Forbidden texts of TestAccRelease_leastPrivilegeDenied
// show that the provider runs as the ServiceAccount.
func (c *testCluster) providerAs(t *testing.T, ns string, roles []*rbacv1.Role) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount, Namespace: ns}}
	if _, err := c.kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range roles {
		r = r.DeepCopy()
		r.Namespace = ns
		if _, err := c.kube.RbacV1().Roles(ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: ns},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: ns}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name},
		}
		if _, err := c.kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.waitGranted(t, ns, roles)
	expiry := int64(time.Hour / time.Second)
	tr, err := c.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.adminConfig(t)
	ca := cfg.CAData
	if len(ca) == 0 {
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	return fmt.Sprintf(`provider "canary" {
  kubernetes = {
    host                   = %q
    token                  = %q
    cluster_ca_certificate = %q
  }
}
`, cfg.Host, tr.Status.Token, string(ca))
}

// waitGranted waits until the API server's authorizer, which reads RBAC objects from a cache,
// grants the ServiceAccount every rule of roles.
func (c *testCluster) waitGranted(t *testing.T, ns string, roles []*rbacv1.Role) {
	t.Helper()
	user := fmt.Sprintf("system:serviceaccount:%s:%s", ns, serviceAccount)
	for _, r := range roles {
		for _, rule := range r.Rules {
			resource, sub, _ := strings.Cut(rule.Resources[0], "/")
			attrs := &authorizationv1.ResourceAttributes{Namespace: ns, Verb: rule.Verbs[0], Group: rule.APIGroups[0], Resource: resource, Subresource: sub}
			err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				review, err := c.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
					Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts"}, ResourceAttributes: attrs},
				}, metav1.CreateOptions{})
				return err == nil && review.Status.Allowed, err
			})
			if err != nil {
				t.Fatalf("%s is not granted %+v (Role %s): %v", user, *attrs, r.Name, err)
			}
		}
	}
}

// dryRunRBACExamples checks that the API server accepts every object of the RBAC example and
// that each rule uses only the verbs the provider's calls need, so that the Roles these tests
// do not bind (APISIX, Gloo, the service proxy) hold no typo either.
func (c *testCluster) dryRunRBACExamples(t *testing.T, ns string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(rbacExamples, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no RBAC example in %s (%v)", rbacExamples, err)
	}
	applier, err := localstack.NewApplier(c.adminConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	applier.DryRun = true
	verbs := append([]string{"get", "list", "watch", "create", "update", "patch", "delete"}, controlpolicy.Verbs...)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := localstack.DecodeManifests(data)
		if err != nil || len(objs) == 0 {
			t.Fatalf("%s: %d objects (%v)", f, len(objs), err)
		}
		for _, o := range objs {
			if o.GetKind() == "Role" {
				o.SetNamespace(ns)
			}
			if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
				// The admission policy and its binding: the dry run checks them.
				if err := applier.Apply(context.Background(), o); err != nil {
					t.Errorf("%s: %v", f, err)
				}
				continue
			}
			var role rbacv1.ClusterRole // a Role's rules decode the same
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &role, true); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, rule := range role.Rules {
				for _, v := range rule.Verbs {
					if !slices.Contains(verbs, v) {
						t.Errorf("%s: %s %s: verb %q is none of %v", f, o.GetKind(), o.GetName(), v, verbs)
					}
				}
			}
			if err := applier.Apply(context.Background(), o); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
	}
}

// checkReleaseGone asserts that destroy left nothing of a manifest release: no Deployment,
// Service, TrafficSplit, state ConfigMap or Lease.
func (c *testCluster) checkReleaseGone(ns string) resource.TestCheckFunc {
	return checkCluster(func() error {
		ctx := context.Background()
		get := map[string]func() error{
			"TrafficSplit podinfo": func() error { _, _, err := c.splitWeights(ns, "podinfo"); return err },
			"ConfigMap " + rollout.StateConfigMapName("podinfo"): func() error {
				_, err := c.kube.CoreV1().ConfigMaps(ns).Get(ctx, rollout.StateConfigMapName("podinfo"), metav1.GetOptions{})
				return err
			},
			"Lease podinfo-canary-release-lock": func() error {
				_, err := c.kube.CoordinationV1().Leases(ns).Get(ctx, "podinfo-canary-release-lock", metav1.GetOptions{})
				return err
			},
		}
		for _, name := range []string{"podinfo", "podinfo-primary"} {
			get["Deployment "+name] = func() error { _, err := c.deployment(ns, name); return err }
		}
		for _, name := range []string{"podinfo", "podinfo-primary", "podinfo-canary"} {
			get["Service "+name] = func() error { _, err := c.kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); return err }
		}
		var left []string
		for what, f := range get {
			if err := f(); !apierrors.IsNotFound(err) {
				left = append(left, fmt.Sprintf("%s (%v)", what, err))
			}
		}
		if len(left) > 0 {
			slices.Sort(left)
			return fmt.Errorf("destroy left %s", strings.Join(left, ", "))
		}
		return nil
	})
}
