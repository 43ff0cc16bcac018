package nginx

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Options are what the nginx router needs beyond router.Spec.
type Options struct {
	// IngressRef is the user's Ingress (Flagger's ingressRef).
	IngressRef *router.Ref
}

func (o Options) ingressName() string {
	if o.IngressRef == nil {
		return ""
	}
	return o.IngressRef.Name
}

// Options declares ingress_ref, the attribute every driver that reads the user's Ingress shares.
func (Driver) Options() mesh.Options {
	return mesh.Options{Mesh: "ingress-nginx", Attributes: map[string]schema.Attribute{"ingress_ref": mesh.IngressRefAttribute()}}
}

// Validate requires ingress_ref: the canary Ingress is a copy of the user's.
func (Driver) Validate(_ context.Context, v mesh.Values, diags *diag.Diagnostics) {
	mesh.RequireIngressRef(v, "nginx", "whose rules send traffic to the apex Service; the release writes the canary Ingress <ingress>-canary beside it", diags)
}

// Decode reads ingress_ref.
func (Driver) Decode(v mesh.Values) (any, error) {
	ref, err := mesh.DecodeIngressRef(v)
	return Options{IngressRef: ref}, err
}

// Identity is the Ingress's name: the generated Ingress is named after it.
func (Driver) Identity(v mesh.Values) ([]mesh.Identity, error) {
	return mesh.IngressRefIdentity(v, func(was, now string) string {
		return fmt.Sprintf("The canary Ingress %s-canary would keep its share of the traffic of %q after the switch to %q.", was, was, now)
	})
}
