package localstack

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// crdIdentity is what a router relies on: where the kind lives and which versions serve.
type crdIdentity struct {
	Group, Kind, Plural, Scope string
	Served                     []string
	StatusSubresource          bool
}

var wantCRDs = map[string]crdIdentity{
	"trafficsplits.split.smi-spec.io":              {"split.smi-spec.io", "TrafficSplit", "trafficsplits", "Namespaced", []string{"v1alpha2"}, false},
	"apisixroutes.apisix.apache.org":               {"apisix.apache.org", "ApisixRoute", "apisixroutes", "Namespaced", []string{"v2"}, true},
	"apisixupstreams.apisix.apache.org":            {"apisix.apache.org", "ApisixUpstream", "apisixupstreams", "Namespaced", []string{"v2"}, true},
	"apisixpluginconfigs.apisix.apache.org":        {"apisix.apache.org", "ApisixPluginConfig", "apisixpluginconfigs", "Namespaced", []string{"v2"}, true},
	"upstreams.gloo.solo.io":                       {"gloo.solo.io", "Upstream", "upstreams", "Namespaced", []string{"v1"}, false},
	"upstreamgroups.gloo.solo.io":                  {"gloo.solo.io", "UpstreamGroup", "upstreamgroups", "Namespaced", []string{"v1"}, false},
	"routetables.gateway.solo.io":                  {"gateway.solo.io", "RouteTable", "routetables", "Namespaced", []string{"v1"}, false},
	"virtualservices.gateway.solo.io":              {"gateway.solo.io", "VirtualService", "virtualservices", "Namespaced", []string{"v1"}, false},
	"virtualservices.networking.istio.io":          {"networking.istio.io", "VirtualService", "virtualservices", "Namespaced", []string{"v1", "v1alpha3", "v1beta1"}, true},
	"destinationrules.networking.istio.io":         {"networking.istio.io", "DestinationRule", "destinationrules", "Namespaced", []string{"v1", "v1alpha3", "v1beta1"}, true},
	"gatewayclasses.gateway.networking.k8s.io":     {"gateway.networking.k8s.io", "GatewayClass", "gatewayclasses", "Cluster", []string{"v1", "v1beta1"}, true},
	"gateways.gateway.networking.k8s.io":           {"gateway.networking.k8s.io", "Gateway", "gateways", "Namespaced", []string{"v1", "v1beta1"}, true},
	"httproutes.gateway.networking.k8s.io":         {"gateway.networking.k8s.io", "HTTPRoute", "httproutes", "Namespaced", []string{"v1", "v1beta1"}, true},
	"grpcroutes.gateway.networking.k8s.io":         {"gateway.networking.k8s.io", "GRPCRoute", "grpcroutes", "Namespaced", []string{"v1"}, true},
	"referencegrants.gateway.networking.k8s.io":    {"gateway.networking.k8s.io", "ReferenceGrant", "referencegrants", "Namespaced", []string{"v1", "v1beta1"}, false},
	"backendtlspolicies.gateway.networking.k8s.io": {"gateway.networking.k8s.io", "BackendTLSPolicy", "backendtlspolicies", "Namespaced", []string{"v1"}, true},
	"traefikservices.traefik.io":                   {"traefik.io", "TraefikService", "traefikservices", "Namespaced", []string{"v1alpha1"}, false},
	"ingressroutes.traefik.io":                     {"traefik.io", "IngressRoute", "ingressroutes", "Namespaced", []string{"v1alpha1"}, false},
	"ingressroutetcps.traefik.io":                  {"traefik.io", "IngressRouteTCP", "ingressroutetcps", "Namespaced", []string{"v1alpha1"}, false},
	"ingressrouteudps.traefik.io":                  {"traefik.io", "IngressRouteUDP", "ingressrouteudps", "Namespaced", []string{"v1alpha1"}, false},
	"middlewares.traefik.io":                       {"traefik.io", "Middleware", "middlewares", "Namespaced", []string{"v1alpha1"}, false},
	"middlewaretcps.traefik.io":                    {"traefik.io", "MiddlewareTCP", "middlewaretcps", "Namespaced", []string{"v1alpha1"}, false},
	"serverstransports.traefik.io":                 {"traefik.io", "ServersTransport", "serverstransports", "Namespaced", []string{"v1alpha1"}, false},
	"serverstransporttcps.traefik.io":              {"traefik.io", "ServersTransportTCP", "serverstransporttcps", "Namespaced", []string{"v1alpha1"}, false},
	"tlsoptions.traefik.io":                        {"traefik.io", "TLSOption", "tlsoptions", "Namespaced", []string{"v1alpha1"}, false},
	"tlsstores.traefik.io":                         {"traefik.io", "TLSStore", "tlsstores", "Namespaced", []string{"v1alpha1"}, false},
	"httpproxies.projectcontour.io":                {"projectcontour.io", "HTTPProxy", "httpproxies", "Namespaced", []string{"v1"}, true},
	"services.serving.knative.dev":                 {"serving.knative.dev", "Service", "services", "Namespaced", []string{"v1"}, true},
	"revisions.serving.knative.dev":                {"serving.knative.dev", "Revision", "revisions", "Namespaced", []string{"v1"}, true},
	"scaledobjects.keda.sh":                        {"keda.sh", "ScaledObject", "scaledobjects", "Namespaced", []string{"v1alpha1"}, true},
}

func identityOf(t *testing.T, crd *unstructured.Unstructured) crdIdentity {
	t.Helper()
	spec := crd.Object["spec"].(map[string]any)
	names := spec["names"].(map[string]any)
	id := crdIdentity{Group: spec["group"].(string), Scope: spec["scope"].(string), Kind: names["kind"].(string), Plural: names["plural"].(string)}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		v := v.(map[string]any)
		if v["served"] == true {
			id.Served = append(id.Served, v["name"].(string))
		}
		if _, ok, _ := unstructured.NestedMap(v, "subresources", "status"); ok {
			id.StatusSubresource = true
		}
		if typ, _, _ := unstructured.NestedString(v, "schema", "openAPIV3Schema", "type"); typ != "object" {
			t.Errorf("%s %s: schema root type %q, want object (structural)", crd.GetName(), v["name"], typ)
		}
	}
	return id
}

func checkCRDFiles(t *testing.T, files []string) {
	t.Helper()
	objs, err := ReadManifestFiles(files...)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range objs {
		want, ok := wantCRDs[o.GetName()]
		if !ok {
			t.Errorf("unexpected CRD %s", o.GetName())
			continue
		}
		seen[o.GetName()] = true
		got := identityOf(t, o)
		if got.Group != want.Group || got.Kind != want.Kind || got.Plural != want.Plural || got.Scope != want.Scope ||
			!slices.Equal(got.Served, want.Served) || got.StatusSubresource != want.StatusSubresource {
			t.Errorf("%s: got %+v, want %+v", o.GetName(), got, want)
		}
	}
	if len(seen) != len(wantCRDs) {
		t.Errorf("found %d of %d CRDs in %v", len(seen), len(wantCRDs), files)
	}
}

func TestMinimalCRDsDeclareRouterKinds(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, name := range CRDFileNames {
		files = append(files, filepath.Join(MinimalCRDDir(root), name))
	}
	checkCRDFiles(t, files)
}

func TestUpstreamCRDsDeclareRouterKinds(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := SharedCRDDir(root)
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("no upstream CRDs at %s", dir)
	}
	var files []string
	for _, name := range CRDFileNames {
		files = append(files, filepath.Join(dir, name))
	}
	checkCRDFiles(t, files)
}

func TestCRDSelection(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("fresh machine uses the minimal CRDs", func(t *testing.T) {
		t.Setenv("CANARY_SHARED_CRDS", filepath.Join(t.TempDir(), "missing"))
		files, err := CRDFiles(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if !strings.HasPrefix(f, MinimalCRDDir(root)+string(filepath.Separator)) {
				t.Errorf("%s is not a minimal CRD", f)
			}
		}
		if len(files) != len(CRDFileNames) {
			t.Errorf("%d files, want %d", len(files), len(CRDFileNames))
		}
	})
	t.Run("shared folder is used in place", func(t *testing.T) {
		dir := t.TempDir()
		for _, name := range CRDFileNames {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte("# x\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Setenv("CANARY_SHARED_CRDS", dir)
		files, err := CRDFiles(root)
		if err != nil {
			t.Fatal(err)
		}
		if files[0] != filepath.Join(dir, CRDFileNames[0]) {
			t.Errorf("first file %s, want one in %s", files[0], dir)
		}
	})
	t.Run("incomplete shared folder is an error", func(t *testing.T) {
		t.Setenv("CANARY_SHARED_CRDS", t.TempDir())
		_, err := CRDFiles(root)
		if err == nil || !strings.Contains(err.Error(), "CRD file missing") {
			t.Fatalf("err = %v, want a missing CRD file", err)
		}
	})
}

// The API server validates the minimal CRDs as it would on a fresh machine. They are
// created in dry-run mode under a renamed group, because the shared stack already has
// CRDs of these names.
func TestMinimalCRDsPassAPIServerValidation(t *testing.T) {
	env := ensure(t)
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, name := range CRDFileNames {
		files = append(files, filepath.Join(MinimalCRDDir(root), name))
	}
	objs, err := ReadManifestFiles(files...)
	if err != nil {
		t.Fatal(err)
	}
	_, dyn, err := env.Clients()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		group := "dryrun." + o.Object["spec"].(map[string]any)["group"].(string)
		plural, _, _ := unstructured.NestedString(o.Object, "spec", "names", "plural")
		_ = unstructured.SetNestedField(o.Object, group, "spec", "group")
		o.SetName(plural + "." + group)
		if _, err := dyn.Resource(crdResource).Create(t.Context(), o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("%s: %v", o.GetName(), err)
		}
	}
}
