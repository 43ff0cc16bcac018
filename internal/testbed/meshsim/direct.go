package meshsim

import (
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Requests that reach pods past every router: un-meshed clients of an apex Service going
// through kube-proxy (mesh_provider "kubernetes": blue/green by flipping the apex Service's
// selector) and the load tester's test traffic (loadtest.go). Only the exporters inside the
// pods count them: the application's own histogram always, and the sidecar proxies the pod has.

// AnnotationClients on an apex Service names who sends its load besides the meshes' entry
// points. ClientsDirect: un-meshed clients through kube-proxy, round-robin over the Ready pods
// the Service's selector selects at that moment (MeshKubernetes).
const (
	AnnotationClients = "sim.canary-release.dev/clients"
	ClientsDirect     = "direct"
)

// meshLoadTest is the load tester's traffic: no mesh entry point, never a flow.
const meshLoadTest Mesh = "loadtest"

// directCandidates: every Service annotated clients: direct is its own route, with one backend
// (the Service itself) and so no weights to check.
func directCandidates(v *view) []candidate {
	svcs, err := v.services.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []candidate
	for _, svc := range svcs {
		if !strings.EqualFold(strings.TrimSpace(svc.Annotations[AnnotationClients]), ClientsDirect) {
			continue
		}
		apex := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
		out = append(out, candidate{apexes: []types.NamespacedName{apex}, route: &route{
			mesh:     MeshKubernetes,
			object:   objectRef{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name},
			backends: []backend{{service: apex, weight: 100}},
		}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].apexes[0].String() < out[j].apexes[0].String() })
	return out
}

// sidecar is what proxies a pod runs, as the routes of this tick show: a pod that some OSM,
// Istio (mesh or Istio gateway) or Linkerd (GAMMA) route sends to has that mesh's sidecar.
type sidecar struct {
	osm     bool
	istio   *istioDest // nil without an Istio sidecar; mtls as the pod's DestinationRule says
	linkerd bool
}

func sidecarKey(p podInfo) string { return p.namespace + "/" + p.name }

// markSidecars records the proxies of the pods behind route r's backends and mirror.
func markSidecars(sidecars map[string]sidecar, r *route, podsFor func(backend) *backendPods) {
	if r.mesh == MeshKubernetes || r.mesh == meshLoadTest {
		return
	}
	mark := func(b backend) {
		for _, p := range podsFor(b).all {
			sc := sidecars[sidecarKey(p)]
			switch r.mesh {
			case MeshOSM:
				sc.osm = true
			case MeshLinkerd:
				sc.linkerd = true
			}
			if b.istio != nil && sc.istio == nil {
				sc.istio = b.istio
			}
			sidecars[sidecarKey(p)] = sc
		}
	}
	for _, b := range r.backends {
		mark(b)
	}
	if r.mirror != nil {
		mark(r.mirror.backend)
	}
}

// podSide is what counts a direct request to pod p besides the application's histogram: the
// OSM sidecar (always for the load tester, as before Istio and Linkerd were simulated), the
// Istio sidecar's destination report (with b's Service as destination_service) and the Linkerd
// inbound proxy.
func podSide(r *route, b backend, p podInfo) (osm bool, istio backend, hasIstio, linkerd bool) {
	sc := r.sidecars[sidecarKey(p)]
	osm = r.mesh == meshLoadTest || sc.osm
	if sc.istio != nil {
		istio, hasIstio = b, true
		istio.istio = &istioDest{host: fqdn(b.service), mtls: sc.istio.mtls}
	}
	return osm, istio, hasIstio, p.linkerd || sc.linkerd
}

func (e *exporter) declareDirect(r *route, b backend, pods []podInfo) {
	src := r.source()
	for _, p := range pods {
		osm, ib, hasIstio, linkerd := podSide(r, b, p)
		e.http.declareApp(p)
		if osm {
			for _, code := range declaredCodes {
				e.osmReq.keep(osmValues(r, p, strconv.Itoa(code))...)
			}
			e.osmDur.keep(osmValues(r, p)...)
		}
		if hasIstio {
			e.istio.declareDestination(src, ib, p)
		}
		if linkerd {
			e.http.declareLinkerd(p)
		}
	}
}

func (e *exporter) answeredDirect(r *route, b backend, p podInfo, code int, ms float64) {
	osm, ib, hasIstio, linkerd := podSide(r, b, p)
	e.http.observeApp(p, code, ms)
	if osm {
		e.osmRequests.WithLabelValues(osmValues(r, p, strconv.Itoa(code))...).Inc()
		e.osmDuration.WithLabelValues(osmValues(r, p)...).Observe(ms)
	}
	if hasIstio {
		e.istio.report("destination", r.source(), ib, p, code, ms)
	}
	if linkerd {
		e.http.observeLinkerd(p, code, ms)
	}
}

// unavailableDirect: no Ready pod takes the request, so no pod counts it; kube-proxy has no
// endpoint and the client sees a refused connection. Only the OSM sidecar of a selected but not
// Ready pod counts the load tester's 503 (as OSM counts the mesh's).
func (e *exporter) unavailableDirect(r *route, blame *podInfo) {
	if blame == nil {
		return
	}
	if osm, _, _, _ := podSide(r, backend{}, *blame); osm {
		e.osmRequests.WithLabelValues(osmValues(r, *blame, "503")...).Inc()
	}
}
