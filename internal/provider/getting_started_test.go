package provider

import (
	"context"
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// TestAccGettingStarted_manifestsValidate has the local stack's API server judge every manifest
// of the getting-started guide with a server-side dry run (kubectl apply --dry-run=server), in a
// namespace of its own; its HCL is validated with the other examples.
func TestAccGettingStarted_manifestsValidate(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	raw, err := os.ReadFile(examplesRoot + "/getting-started/app.yaml")
	if err != nil {
		t.Fatal(err)
	}
	resources := map[string]schema.GroupVersionResource{
		"GatewayClass": {Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gatewayclasses"},
		"Gateway":      {Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"},
		"Deployment":   {Group: "apps", Version: "v1", Resource: "deployments"},
	}
	docs := strings.Split(string(raw), "\n---\n")
	if len(docs) != 3 {
		t.Fatalf("app.yaml holds %d documents, want 3", len(docs))
	}
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("%v:\n%s", err, doc)
		}
		gvr, ok := resources[u.GetKind()]
		if !ok {
			t.Fatalf("no resource for kind %s", u.GetKind())
		}
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
		if u.GetNamespace() == "" {
			_, err = c.dyn.Resource(gvr).Create(context.Background(), u, dry)
		} else {
			u.SetNamespace(ns)
			_, err = c.dyn.Resource(gvr).Namespace(ns).Create(context.Background(), u, dry)
		}
		if err != nil {
			t.Errorf("%s %s: the API server refuses it: %v", u.GetKind(), u.GetName(), err)
		}
	}
}
