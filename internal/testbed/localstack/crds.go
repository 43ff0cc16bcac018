package localstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// CRDFileNames are the router CRDs the stack installs: SMI TrafficSplit, APISIX, Gloo, Istio,
// Gateway API (with the kinds Traefik's informers wait for), Traefik v3.6, Contour and Knative Serving (Services and Revisions), and KEDA's ScaledObject.
// The names are those of the upstream copies; internal/testbed/localstack/crds has a minimal file
// of the same name for each.
var CRDFileNames = []string{
	"split.smi-spec.io_trafficsplits.yaml",
	"apisix.apache.org_apisixroutes.yaml",
	"apisix.apache.org_apisixupstreams.yaml",
	"apisix.apache.org_apisixpluginconfigs.yaml",
	"gloo.solo.io_upstreams.yaml",
	"gloo.solo.io_upstreamgroups.yaml",
	"gateway.solo.io_routetables.yaml",
	"gateway.solo.io_virtualservices.yaml",
	"networking.istio.io_virtualservices.yaml",
	"networking.istio.io_destinationrules.yaml",
	"gateway.networking.k8s.io_gatewayclasses.yaml",
	"gateway.networking.k8s.io_gateways.yaml",
	"gateway.networking.k8s.io_httproutes.yaml",
	// Traefik's Gateway API provider waits for these three as well.
	"gateway.networking.k8s.io_grpcroutes.yaml",
	"gateway.networking.k8s.io_referencegrants.yaml",
	"gateway.networking.k8s.io_backendtlspolicies.yaml",
	// Every traefik.io CRD of the Traefik the stack runs (v3.6), in one file.
	"traefik-v3.6/traefik.io_crds.yaml",
	"projectcontour.io_httpproxies.yaml",
	// Not a router's: KEDA's ScaledObject, for autoscaler_ref (no KEDA operator runs).
	"keda.sh_scaledobjects.yaml",
	"serving.knative.dev_services.yaml",
	"serving.knative.dev_revisions.yaml",
}

// SharedCRDDir is where upstream CRD copies are looked for: CANARY_SHARED_CRDS, or
// ../shared/crds beside the repository.
func SharedCRDDir(root string) string {
	if dir := os.Getenv("CANARY_SHARED_CRDS"); dir != "" {
		return dir
	}
	return filepath.Join(filepath.Dir(root), "shared", "crds")
}

// MinimalCRDDir holds the project's own structural stand-ins.
func MinimalCRDDir(root string) string {
	return filepath.Join(root, "internal", "testbed", "localstack", "crds")
}

// CRDFiles returns the CRD files to install: the upstream copies when the shared folder
// exists (they are applied from there, never copied), else the minimal stand-ins, as on
// a fresh machine.
func CRDFiles(root string) ([]string, error) {
	dir := SharedCRDDir(root)
	if _, err := os.Stat(dir); err != nil {
		dir = MinimalCRDDir(root)
	}
	files := make([]string, 0, len(CRDFileNames))
	for _, name := range CRDFileNames {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("CRD file missing: %w", err)
		}
		files = append(files, path)
	}
	return files, nil
}

// ReadManifestFiles decodes every object in the files.
func ReadManifestFiles(files ...string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		o, err := DecodeManifests(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		objs = append(objs, o...)
	}
	return objs, nil
}

// InstallCRDs applies the CRD files and waits until every CRD is Established.
func InstallCRDs(ctx context.Context, cfg *rest.Config, files []string) error {
	objs, err := ReadManifestFiles(files...)
	if err != nil {
		return err
	}
	applier, err := NewApplier(cfg)
	if err != nil {
		return err
	}
	if err := applier.Apply(ctx, objs...); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(objs))
	for _, o := range objs {
		names = append(names, o.GetName())
	}
	return WaitEstablished(ctx, dyn, names, time.Minute)
}
