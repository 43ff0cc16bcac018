package provider

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	appsv1 "k8s.io/api/apps/v1"
)

// The recipes (examples/recipes) hand the workload to a release from the kubernetes and helm
// providers. Neither provider can be installed here (no registry), so `terraform validate`
// cannot check them: `terraform fmt -check` does (TestAccExamples_validate), these tests read
// their HCL, and TestAccRecipes_deploymentFields holds the Deployment recipe's ignore_changes
// against the fields a real release changes on its target.
const recipesRoot = examplesRoot + "/recipes"

// recipeResource is one resource block of a recipe.
type recipeResource struct {
	body *hclsyntax.Body
	src  []byte
}

func readRecipe(t *testing.T, name string) map[string]recipeResource {
	t.Helper()
	out := map[string]recipeResource{}
	files, err := filepath.Glob(filepath.Join(recipesRoot, name, "*.tf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("recipe %s has no .tf files (%v)", name, err)
	}
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, diags := hclsyntax.ParseConfig(src, file, hcl.InitialPos)
		if diags.HasErrors() {
			t.Fatalf("%s: %s", file, diags.Error())
		}
		for _, b := range f.Body.(*hclsyntax.Body).Blocks {
			if b.Type == "resource" && len(b.Labels) == 2 {
				out[b.Labels[0]+"."+b.Labels[1]] = recipeResource{body: b.Body, src: src}
			}
		}
	}
	return out
}

// ignoreChanges is a resource's lifecycle.ignore_changes, each path as Terraform spells it
// (spec[0].replicas).
func ignoreChanges(t *testing.T, r recipeResource) []string {
	t.Helper()
	var paths []string
	for _, b := range r.body.Blocks {
		if b.Type != "lifecycle" {
			continue
		}
		attr, ok := b.Body.Attributes["ignore_changes"]
		if !ok {
			continue
		}
		list, diags := hcl.ExprList(attr.Expr)
		if diags.HasErrors() {
			t.Fatalf("ignore_changes is not a list: %s", diags.Error())
		}
		for _, e := range list {
			trav, diags := hcl.RelTraversalForExpr(e)
			if diags.HasErrors() {
				t.Fatalf("ignore_changes holds %q, not an attribute path", e.Range().SliceBytes(r.src))
			}
			paths = append(paths, traversalPath(trav))
		}
	}
	return paths
}

func traversalPath(trav hcl.Traversal) string {
	var b strings.Builder
	for _, step := range trav {
		switch s := step.(type) {
		case hcl.TraverseAttr:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.Name)
		case hcl.TraverseRoot:
			b.WriteString(s.Name)
		case hcl.TraverseIndex:
			bf := s.Key.AsBigFloat()
			i, _ := bf.Int64()
			fmt.Fprintf(&b, "[%d]", i)
		}
	}
	return b.String()
}

// attrText is an attribute's expression as written, or "" when the body has none.
func attrText(r recipeResource, name string) string {
	a, ok := r.body.Attributes[name]
	if !ok {
		return ""
	}
	return string(a.Expr.Range().SliceBytes(r.src))
}

// kubernetesPath spells an API field path (spec.updateStrategy.rollingUpdate.partition) as
// the kubernetes provider's schema nests it, each object a block of one
// (spec[0].update_strategy[0].rolling_update[0].partition).
func kubernetesPath(apiPath []string) string {
	parts := make([]string, len(apiPath))
	for i, p := range apiPath {
		var b strings.Builder
		for j, r := range p {
			if unicode.IsUpper(r) {
				if j > 0 {
					b.WriteByte('_')
				}
				r = unicode.ToLower(r)
			}
			b.WriteRune(r)
		}
		parts[i] = b.String()
		if i < len(apiPath)-1 {
			parts[i] += "[0]"
		}
	}
	return strings.Join(parts, ".")
}

// covered reports whether one of the ignored paths is path or a parent of it.
func covered(ignored []string, path string) bool {
	return slices.ContainsFunc(ignored, func(p string) bool { return path == p || strings.HasPrefix(path, p+".") })
}

func TestKubernetesPath(t *testing.T) {
	for in, want := range map[string]string{
		"spec.replicas": "spec[0].replicas",
		"spec.updateStrategy.rollingUpdate.partition": "spec[0].update_strategy[0].rolling_update[0].partition",
	} {
		if got := kubernetesPath(strings.Split(in, ".")); got != want {
			t.Errorf("kubernetesPath(%s) = %s, want %s", in, got, want)
		}
	}
}

// Each recipe hands its workload to the release, and ignores what the release writes on it:
// a Deployment's replicas, a StatefulSet's partition (without waiting for a rollout the
// release holds back); a chart that renders no replicas for helm_release. None ignores the
// pod template, which stays Terraform's to change.
func TestRecipes(t *testing.T) {
	t.Run("kubernetes-deployment", func(t *testing.T) {
		r := readRecipe(t, "kubernetes-deployment")
		d, ok := r["kubernetes_deployment_v1.podinfo"]
		if !ok {
			t.Fatal("no kubernetes_deployment_v1.podinfo")
		}
		if got := ignoreChanges(t, d); !slices.Equal(got, []string{"spec[0].replicas"}) {
			t.Errorf("ignore_changes = %v, want [spec[0].replicas]", got)
		}
		checkTargetRef(t, r["canary_release.podinfo"], "kubernetes_deployment_v1.podinfo.metadata[0].name", "")
	})
	t.Run("kubernetes-stateful-set", func(t *testing.T) {
		r := readRecipe(t, "kubernetes-stateful-set")
		s, ok := r["kubernetes_stateful_set_v1.cache"]
		if !ok {
			t.Fatal("no kubernetes_stateful_set_v1.cache")
		}
		want := kubernetesPath([]string{"spec", "updateStrategy", "rollingUpdate", "partition"})
		if got := ignoreChanges(t, s); !slices.Equal(got, []string{want}) {
			t.Errorf("ignore_changes = %v, want [%s]", got, want)
		}
		if got := attrText(s, "wait_for_rollout"); got != "false" {
			t.Errorf("wait_for_rollout = %q, want false: the held partition completes the set's update only when the release promotes it", got)
		}
		checkTargetRef(t, r["canary_release.cache"], "kubernetes_stateful_set_v1.cache.metadata[0].name", "StatefulSet")
	})
	t.Run("helm-release", func(t *testing.T) {
		r := readRecipe(t, "helm-release")
		h, ok := r["helm_release.podinfo"]
		if !ok {
			t.Fatal("no helm_release.podinfo")
		}
		values := strings.Join(strings.Fields(attrText(h, "values")), " ")
		// podinfo's chart renders no replicas with its autoscaler on, and no Service when told.
		for _, want := range []string{"hpa = { enabled = true", "service = { enabled = false }"} {
			if !strings.Contains(values, want) {
				t.Errorf("helm_release values %s lack %q", values, want)
			}
		}
		c := r["canary_release.podinfo"]
		checkTargetRef(t, c, "helm_release.podinfo.name", "")
		if got := attrText(c, "autoscaler_ref"); !strings.Contains(got, "helm_release.podinfo.name") {
			t.Errorf("autoscaler_ref = %s, want the chart's autoscaler", got)
		}
	})
}

// checkTargetRef checks that a recipe's release names its workload through the managing
// resource (so Terraform orders them) and releases a new image in the same apply (triggers).
func checkTargetRef(t *testing.T, c recipeResource, name, kind string) {
	t.Helper()
	if c.body == nil {
		t.Fatal("no canary_release in the recipe")
	}
	ref := strings.Join(strings.Fields(attrText(c, "target_ref")), " ")
	if !strings.Contains(ref, "name = "+name) {
		t.Errorf("target_ref = %s, want name = %s", ref, name)
	}
	if kind != "" && !strings.Contains(ref, fmt.Sprintf("kind = %q", kind)) {
		t.Errorf("target_ref = %s, want kind = %q", ref, kind)
	}
	if attrText(c, "triggers") == "" {
		t.Error("the release has no triggers: a new image would wait for the next apply")
	}
}

// managedView is what the kubernetes provider holds of a Deployment and compares on refresh:
// its spec, labels and annotations (without the one the Deployment controller keeps, which
// the kubernetes provider leaves out as internal).
func managedView(d *appsv1.Deployment) map[string]any {
	annotations := maps.Clone(d.Annotations)
	delete(annotations, "deployment.kubernetes.io/revision")
	if len(annotations) == 0 {
		annotations = nil
	}
	view := map[string]any{"metadata": map[string]any{"labels": d.Labels, "annotations": annotations}, "spec": d.Spec}
	b, _ := json.Marshal(view)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// changedPaths lists the paths whose values differ between two decoded JSON objects: a leaf,
// or a whole list or map that was added, removed or changed in length.
func changedPaths(prefix []string, before, after any) [][]string {
	b, bok := before.(map[string]any)
	a, aok := after.(map[string]any)
	if !bok || !aok {
		if reflect.DeepEqual(before, after) {
			return nil
		}
		return [][]string{prefix}
	}
	var out [][]string
	keys := slices.Sorted(maps.Keys(b))
	for k := range a {
		if _, ok := b[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		out = append(out, changedPaths(append(slices.Clone(prefix), k), b[k], a[k])...)
	}
	return out
}

// A real release of a Deployment managed elsewhere (created here as the kubernetes provider
// would), through an initialisation and a promotion: every field of the Deployment that the
// release changed, which the kubernetes provider's next refresh would see as drift, is one
// the Deployment recipe's ignore_changes covers.
func TestAccRecipes_deploymentFields(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	ignored := ignoreChanges(t, readRecipe(t, "kubernetes-deployment")["kubernetes_deployment_v1.podinfo"])
	var before map[string]any
	// applied records the Deployment as its managing tool left it, before the release runs.
	applied := func() {
		d, err := c.deployment(ns, "podinfo")
		if err != nil {
			t.Fatal(err)
		}
		before = managedView(d)
	}
	// checkFields checks what changed since applied; the initialisation, at least, scales the
	// target to 0 (a promotion scales it up and back to 0).
	checkFields := func(mustChange bool) resource.TestCheckFunc {
		return func(*terraform.State) error {
			d, err := c.deployment(ns, "podinfo")
			if err != nil {
				return err
			}
			changed := changedPaths(nil, before, managedView(d))
			if mustChange && len(changed) == 0 {
				return fmt.Errorf("the release changed nothing on its target (its replicas, at least, were expected)")
			}
			for _, p := range changed {
				if hcl := kubernetesPath(p); !covered(ignored, hcl) {
					return fmt.Errorf("the release changed %s (%s) on its target, which the recipe's ignore_changes %v leaves to the kubernetes provider; before %v, after %v",
						strings.Join(p, "."), hcl, ignored, before["metadata"], managedView(d)["metadata"])
				}
			}
			return nil
		}
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() { c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil)); applied() },
				Config:    releaseConfig(ns, targetRefWorkload("podinfo:6.0.0"), healthyAnalysis, ""),
				Check:     resource.ComposeAggregateTestCheckFunc(c.checkReplicas(ns, "podinfo", 0), checkFields(true)),
			},
			{
				PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil); applied() },
				Config:    releaseConfig(ns, targetRefWorkload("podinfo:6.0.1"), healthyAnalysis, ""),
				Check: resource.ComposeAggregateTestCheckFunc(c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					c.checkReplicas(ns, "podinfo", 0), checkFields(false)),
			},
		},
	})
}
