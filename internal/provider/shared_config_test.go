package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/configs"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// sharedSecretDeployment is Deployment name, labelled app.kubernetes.io/part-of=shop, whose
// pods read the Secret shared-secret.
func (c *testCluster) sharedSecretDeployment(t *testing.T, ns, name string) {
	t.Helper()
	d := podinfoDeployment(ns, "podinfo:6.0.0", nil)
	d.Name = name
	d.Labels = map[string]string{"app.kubernetes.io/part-of": "shop", "team": "payments"}
	d.Spec.Selector.MatchLabels = map[string]string{"app": name}
	d.Spec.Template.Labels = map[string]string{"app": name}
	d.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "shared-secret"}, Key: "token"}}}}
	c.createDeployment(t, d)
}

// sharedReleases is two releases, podinfo and other, of the Deployments of the same names.
func sharedReleases(ns, image string) string { return sharedReleasesWith(ns, image, "") }

// sharedReleasesWith is sharedReleases with extra attributes on podinfo's release.
func sharedReleasesWith(ns, image, extra string) string {
	workload := func(name string) string {
		return fmt.Sprintf(`target_ref = { name = %q }
  triggers   = { image = %q }`, name, image)
	}
	other := releaseConfig(ns, workload("other"), healthyAnalysis, "")
	other = strings.Replace(other, `"canary_release" "test"`, `"canary_release" "other"`, 1)
	other = strings.Replace(other, `name          = "podinfo"`, `name          = "other"`, 1)
	return releaseConfig(ns, workload("podinfo"), healthyAnalysis, extra) + other
}

// Two releases whose Deployments read one Secret share its -primary copy: both initialise and
// promote, the copy names both as owners and goes with the last one; the primary carries the
// target's app.kubernetes.io labels, which are outside the revision.
func TestAccRelease_sharedConfigAndCopiedLabels(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shared-secret"}, Data: map[string][]byte{"token": []byte("s3cret-shared")}}
	if _, err := c.kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.sharedSecretDeployment(t, ns, "podinfo")
	c.sharedSecretDeployment(t, ns, "other")

	checkCopy := func(owners string) resource.TestCheckFunc {
		return checkCluster(func() error {
			s, err := c.kube.CoreV1().Secrets(ns).Get(ctx, "shared-secret-primary", metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("the shared copy: %w", err)
			}
			if got := s.Annotations[configs.AnnotationOwners]; got != owners {
				return fmt.Errorf("the shared copy's owners are %q, want %q", got, owners)
			}
			for _, name := range []string{"podinfo-primary", "other-primary"} {
				d, err := c.deployment(ns, name)
				if err != nil {
					return err
				}
				if ref := d.Spec.Template.Spec.Containers[0].Env[0].ValueFrom.SecretKeyRef.Name; ref != "shared-secret-primary" {
					return fmt.Errorf("%s reads Secret %s, want the shared copy", name, ref)
				}
			}
			return nil
		})
	}
	checkLabels := func(partOf, team string) resource.TestCheckFunc {
		return checkCluster(func() error {
			d, err := c.deployment(ns, "podinfo-primary")
			if err != nil {
				return err
			}
			for where, labels := range map[string]map[string]string{"podinfo-primary": d.Labels, "podinfo-primary's pod template": d.Spec.Template.Labels} {
				if labels["app.kubernetes.io/part-of"] != partOf || labels["team"] != team {
					return fmt.Errorf("%s has labels %v, want app.kubernetes.io/part-of=%s and team=%q", where, labels, partOf, team)
				}
			}
			return nil
		})
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: checkCluster(func() error {
			if _, err := c.kube.CoreV1().Secrets(ns).Get(ctx, "shared-secret-primary", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("the shared copy outlived both releases (%v)", err)
			}
			if _, err := c.kube.CoreV1().Secrets(ns).Get(ctx, "shared-secret", metav1.GetOptions{}); err != nil {
				return fmt.Errorf("the user's Secret: %w", err)
			}
			for _, own := range []string{"shared-secret-primary-podinfo", "shared-secret-primary-other"} {
				if _, err := c.kube.CoreV1().Secrets(ns).Get(ctx, own, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("the release's own copy %s outlived it (%v)", own, err)
				}
			}
			return nil
		}),
		Steps: []resource.TestStep{
			{
				Config: sharedReleases(ns, "podinfo:6.0.0"),
				Check: resource.ComposeAggregateTestCheckFunc(
					checkCopy("other,podinfo"), checkLabels("shop", ""),
					resource.TestCheckResourceAttr("canary_release.test", "status.phase", "Initialized"),
					resource.TestCheckResourceAttr("canary_release.other", "status.phase", "Initialized"),
				),
			},
			{
				PreConfig: func() {
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
					c.setTemplate(t, ns, "other", "podinfo:6.0.1", nil)
				},
				Config: sharedReleases(ns, "podinfo:6.0.1"),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("canary_release.test", "status.phase", "Succeeded"),
					resource.TestCheckResourceAttr("canary_release.other", "status.phase", "Succeeded"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"), c.checkImage(ns, "other-primary", "podinfo:6.0.1"),
					c.checkSplit(ns, 100, 0), checkCopy("other,podinfo"), checkLabels("shop", ""),
				),
			},
			{
				// A copied label is outside the revision: changing it plans nothing.
				PreConfig: func() {
					err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
						d, err := c.deployment(ns, "podinfo")
						if err != nil {
							return err
						}
						d.Labels["app.kubernetes.io/part-of"] = "mall"
						_, err = c.kube.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
				},
				Config:           sharedReleases(ns, "podinfo:6.0.1"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check:            resource.ComposeAggregateTestCheckFunc(checkLabels("shop", ""), c.checkSplit(ns, 100, 0)),
			},
			{
				// The release's own include_label_prefix replaces the default; the update writes
				// the primary, which takes the target's labels as they are now, without an analysis.
				Config: sharedReleasesWith(ns, "podinfo:6.0.1", `include_label_prefix = ["app.kubernetes.io", "team"]`),
				Check: resource.ComposeAggregateTestCheckFunc(
					checkLabels("mall", "payments"), c.checkSplit(ns, 100, 0), checkCopy("other,podinfo"),
					resource.TestCheckResourceAttr("canary_release.test", "status.phase", "Succeeded"),
				),
			},
			{
				// The shared Secret rotates, and both releases release it in one apply: each
				// analyses its own canary and promotes. The first to promote cannot change the
				// copy the other's primary reads, so it promotes into a copy of its own; the
				// other then changes the shared one, alone in reading it. Before, both refused,
				// each naming the other.
				PreConfig: func() {
					secret.Data["token"] = []byte("s3cret-rotated")
					if _, err := c.kube.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
						t.Fatal(err)
					}
				},
				Config: strings.ReplaceAll(sharedReleasesWith(ns, "podinfo:6.0.1", `include_label_prefix = ["app.kubernetes.io", "team"]`),
					`triggers   = { image = "podinfo:6.0.1" }`, `triggers   = { image = "podinfo:6.0.1", secret = "rotated" }`),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("canary_release.test", "status.phase", "Succeeded"),
					resource.TestCheckResourceAttr("canary_release.other", "status.phase", "Succeeded"),
					c.checkSplit(ns, 100, 0),
					checkCluster(func() error {
						readers := map[string][]string{}
						for _, name := range []string{"podinfo", "other"} {
							d, err := c.deployment(ns, name+"-primary")
							if err != nil {
								return err
							}
							ref := d.Spec.Template.Spec.Containers[0].Env[0].ValueFrom.SecretKeyRef.Name
							if ref != "shared-secret-primary" && ref != "shared-secret-primary-"+name {
								return fmt.Errorf("%s-primary reads Secret %s, want the shared copy or its own", name, ref)
							}
							s, err := c.kube.CoreV1().Secrets(ns).Get(ctx, ref, metav1.GetOptions{})
							if err != nil {
								return err
							}
							if got := string(s.Data["token"]); got != "s3cret-rotated" {
								return fmt.Errorf("%s-primary reads %s, which holds the old token: the promotion did not reach it", name, ref)
							}
							readers[ref] = append(readers[ref], name)
						}
						shared, err := c.kube.CoreV1().Secrets(ns).Get(ctx, "shared-secret-primary", metav1.GetOptions{})
						if err != nil {
							return err
						}
						if got, want := shared.Annotations[configs.AnnotationOwners], strings.Join(slices.Sorted(slices.Values(readers["shared-secret-primary"])), ","); got != want {
							return fmt.Errorf("the shared copy's owners are %q, want its readers %q", got, want)
						}
						return nil
					}),
				),
			},
		},
	})
}
