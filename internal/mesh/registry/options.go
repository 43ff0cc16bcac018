package registry

import (
	"context"
	"maps"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Option is one attribute a driver adds to canary_release.
type Option struct {
	// Name is the attribute's name, at the top level or, with InService, in `service`.
	Name      string
	InService bool
	// Owners are the mesh_provider values that use it (several drivers may share one, such as
	// an ingress_ref); Mesh names the first owner's mesh in errors.
	Owners []string
	Mesh   string
	Schema schema.Attribute
}

// Label is how errors name the attribute: "route_ref" or "service.gateways".
func (o Option) Label() string {
	if o.InService {
		return "service." + o.Name
	}
	return o.Name
}

// Options lists every driver's attributes, sorted by label; an attribute several drivers
// declare appears once, with the first declaration's schema.
func Options() []Option {
	byLabel := map[string]*Option{}
	for _, d := range drivers {
		c, ok := d.(mesh.Configurable)
		if !ok {
			continue
		}
		opts, name := c.Options(), d.Describe().Name
		for _, set := range []struct {
			attrs     map[string]schema.Attribute
			inService bool
		}{{opts.Attributes, false}, {opts.Service, true}} {
			for attr, s := range set.attrs {
				o := Option{Name: attr, InService: set.inService, Mesh: opts.Mesh, Schema: s}
				if seen, ok := byLabel[o.Label()]; ok {
					seen.Owners = append(seen.Owners, name)
					continue
				}
				o.Owners = []string{name}
				byLabel[o.Label()] = &o
			}
		}
	}
	out := make([]Option, 0, len(byLabel))
	for _, label := range slices.Sorted(maps.Keys(byLabel)) {
		out = append(out, *byLabel[label])
	}
	return out
}

// Validate runs the plan-time checks of a mesh_provider's options.
func Validate(ctx context.Context, name string, v mesh.Values, diags *diag.Diagnostics) {
	if c, ok := configurable(name); ok {
		c.Validate(ctx, v, diags)
	}
}

// Decode reads a mesh_provider's options for its router (router.Spec.Options); nil for a
// driver without options.
func Decode(name string, v mesh.Values) (any, error) {
	if c, ok := configurable(name); ok {
		return c.Decode(v)
	}
	return nil, nil
}

// CapabilitiesWith are a mesh_provider's capabilities under its option values, and what in
// those values took some away ("in upstream_group mode").
func CapabilitiesWith(name string, v mesh.Values) (router.Capabilities, string) {
	caps := Capabilities(name)
	if d, ok := Get(name); ok {
		if n, ok := d.(mesh.Narrowing); ok {
			return n.Narrow(caps, v)
		}
	}
	return caps, ""
}

// Conditions are what the options of the drivers offering has must be for it
// (`gloo with gloo.mode = "route_table"`), in the drivers' order.
func Conditions(has func(router.Capabilities) bool) []string {
	var out []string
	for _, d := range drivers {
		if n, ok := d.(mesh.Narrowing); ok && has(d.Describe().Capabilities) {
			if c := n.Condition(has); c != "" {
				out = append(out, c)
			}
		}
	}
	return out
}

// MeasuredAtGateway reports a mesh_provider whose built-in metrics, under these option
// values, come from a gateway rather than the canary's pods.
func MeasuredAtGateway(name string, v mesh.Values) bool {
	d, ok := Get(name)
	if !ok {
		return false
	}
	g, ok := d.(mesh.GatewayMeasured)
	return ok && g.MeasuredAtGateway(v)
}

// MeasuredAtPods lists the weighted mesh_provider values whose built-in metrics the canary's
// pods report, in the drivers' order; a driver that needs certain option values for it is
// listed with them ("gatewayapi with gateway_api.metrics other than envoy").
func MeasuredAtPods() []string {
	var out []string
	for _, d := range drivers {
		desc := d.Describe()
		if !desc.Capabilities.Weighted {
			continue
		}
		g, ok := d.(mesh.GatewayMeasured)
		switch {
		case !ok:
			out = append(out, desc.Name)
		case g.Unless() != "":
			out = append(out, desc.Name+" with "+g.Unless())
		}
	}
	return out
}

// Identity lists the option values of a mesh_provider that name its generated objects.
func Identity(name string, v mesh.Values) ([]mesh.Identity, error) {
	if d, ok := Get(name); ok {
		if i, ok := d.(mesh.Identified); ok {
			return i.Identity(v)
		}
	}
	return nil, nil
}

func configurable(name string) (mesh.Configurable, bool) {
	d, ok := Get(name)
	if !ok {
		return nil, false
	}
	c, ok := d.(mesh.Configurable)
	return c, ok
}
