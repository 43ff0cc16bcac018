package meshsim

// models are the simulator's data planes, one per mesh driver and keyed by the driver's name
// (its mesh_provider, internal/mesh/registry): candidates reads that mesh's router objects and
// offers the routes they describe. A new router adds its line here; the order is the order in
// which routes of equal priority compete for an apex.
var models = []struct {
	mesh       Mesh
	candidates func(*view) []candidate
}{
	{MeshOSM, osmCandidates},
	{MeshAPISIX, apisixCandidates},
	{MeshGloo, glooCandidates},
	{MeshIstio, istioCandidates},
	{MeshGatewayAPI, gatewayCandidates},
	{MeshLinkerd, linkerdCandidates},
	{MeshTraefik, traefikCandidates},
	{MeshContour, contourCandidates},
	{MeshNginx, nginxCandidates},
	{MeshSkipper, skipperCandidates},
	{MeshALB, albCandidates},
	{MeshKnative, knativeCandidates},
	{MeshKubernetes, directCandidates},
}
