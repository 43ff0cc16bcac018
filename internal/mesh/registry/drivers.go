package registry

import (
	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/alb"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/apisix"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/contour"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/gatewayapi"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/gloo"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/istio"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/knative"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/kubernetes"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/linkerd"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/nginx"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/osm"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/skipper"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/traefik"
)

// drivers are every mesh_provider, one line each; their order is the order error messages
// and the docs list them in.
var drivers = []mesh.Driver{
	osm.Driver{},
	apisix.Driver{},
	gloo.Driver{},
	istio.Driver{},
	gatewayapi.Driver{},
	linkerd.Driver{},
	traefik.Driver{},
	contour.Driver{},
	nginx.Driver{},
	skipper.Driver{},
	alb.Driver{},
	knative.Driver{},
	kubernetes.Driver{},
}
