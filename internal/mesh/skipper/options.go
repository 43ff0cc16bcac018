package skipper

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Options are what the skipper router needs beyond router.Spec.
type Options struct {
	// IngressRef is the user's Ingress (Flagger's ingressRef), which the generated Ingress copies.
	IngressRef *router.Ref
}

// Queries are the built-in queries for the user's Ingress: Flagger's {{ ingress }} is
// ingressRef's name, which the engine's variables do not know.
func (o Options) Queries() map[string]string {
	if o.IngressRef == nil {
		return queries
	}
	return withIngress(encode(o.IngressRef.Name))
}

// Options declares ingress_ref, the attribute every driver that reads the user's Ingress shares.
func (Driver) Options() mesh.Options {
	return mesh.Options{Mesh: "Skipper", Attributes: map[string]schema.Attribute{"ingress_ref": mesh.IngressRefAttribute()}}
}

// Validate requires ingress_ref: the generated Ingress copies its paths to the apex.
func (Driver) Validate(_ context.Context, v mesh.Values, diags *diag.Diagnostics) {
	mesh.RequireIngressRef(v, "skipper", "whose paths to the apex Service the generated <ingress>-canary Ingress copies, split between the primary and canary Services", diags)
}

// Decode reads ingress_ref.
func (Driver) Decode(v mesh.Values) (any, error) {
	ref, err := mesh.DecodeIngressRef(v)
	return Options{IngressRef: ref}, err
}

// Identity is the Ingress's name: the generated Ingress is named after it.
func (Driver) Identity(v mesh.Values) ([]mesh.Identity, error) {
	return mesh.IngressRefIdentity(v, func(was, now string) string {
		if was == "" {
			return ""
		}
		return fmt.Sprintf("The Ingress %s-canary generated beside %q would keep taking its routes' traffic after the switch to %q.", was, was, now)
	})
}
