package alb

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Options are what the alb router needs beyond router.Spec.
type Options struct {
	// IngressRef is the user's Ingress (Flagger's ingressRef), whose IngressGroup and rule the
	// generated Ingress copies.
	IngressRef *router.Ref
}

// Options declares ingress_ref, the attribute every driver that reads the user's Ingress shares.
func (Driver) Options() mesh.Options {
	return mesh.Options{Mesh: "AWS ALB", Attributes: map[string]schema.Attribute{"ingress_ref": mesh.IngressRefAttribute()}}
}

// Validate requires ingress_ref: the generated Ingress joins its IngressGroup and copies its rule.
func (Driver) Validate(_ context.Context, v mesh.Values, diags *diag.Diagnostics) {
	mesh.RequireIngressRef(v, "alb", "whose IngressGroup (alb.ingress.kubernetes.io/group.name) and rule to the apex Service the generated Ingress copies", diags)
}

// Decode reads ingress_ref.
func (Driver) Decode(v mesh.Values) (any, error) {
	ref, err := mesh.DecodeIngressRef(v)
	return Options{IngressRef: ref}, err
}

// Identity is the Ingress's name: the generated Ingress is named after it.
func (Driver) Identity(v mesh.Values) ([]mesh.Identity, error) {
	return mesh.IngressRefIdentity(v, func(was, now string) string {
		return fmt.Sprintf("The Ingress generated beside %q would keep its rules in the IngressGroup after the switch to %q.", was, now)
	})
}
