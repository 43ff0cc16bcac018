package registry

import (
	"context"
	"reflect"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
)

// coreAttributes are canary_release's own: a driver may not declare one of them.
var coreAttributes = []string{"id", "name", "namespace", "mesh_provider", "target_ref", "manifest", "autoscaler_ref", "service",
	"analysis", "progress_deadline_seconds", "skip_analysis", "revert_on_deletion", "triggers", "timeouts", "rollout_plan", "status"}

var coreServiceAttributes = []string{"port", "target_port", "name", "app_protocol", "port_discovery", "apex", "primary", "canary", "port_name", "hosts"}

// Every driver's attribute is documented, names the mesh its errors name, leaves the
// provider's own attributes alone, and has the same shape wherever several drivers share it.
func TestDriverOptionsAreComplete(t *testing.T) {
	for _, o := range Options() {
		if o.Schema.GetMarkdownDescription() == "" {
			t.Errorf("%s has no MarkdownDescription: the docs are generated from it", o.Label())
		}
		if o.Mesh == "" {
			t.Errorf("%s: its drivers name no Mesh for the error of another mesh_provider", o.Label())
		}
		core := coreAttributes
		if o.InService {
			core = coreServiceAttributes
		}
		for _, c := range core {
			if o.Name == c {
				t.Errorf("%s is canary_release's own attribute; a driver cannot declare it", o.Label())
			}
		}
	}
	for _, d := range drivers {
		c, ok := d.(mesh.Configurable)
		if !ok {
			continue
		}
		opts := c.Options()
		for _, shared := range Options() {
			mine, ok := opts.Attributes[shared.Name]
			if shared.InService {
				mine, ok = opts.Service[shared.Name]
			}
			if ok && !mine.GetType().Equal(shared.Schema.GetType()) {
				t.Errorf("%s: %s declares it as %s, another driver as %s", shared.Label(), d.Describe().Name,
					mine.GetType().String(), shared.Schema.GetType().String())
			}
		}
	}
}

// A configuration without any option decodes to the router's defaults, and checks pass or
// fail without a panic.
func TestDriverOptionsWithNothingSet(t *testing.T) {
	nulls := mesh.Values{Attributes: map[string]attr.Value{}, Service: map[string]attr.Value{}}
	for _, o := range Options() {
		null, err := o.Schema.GetType().ValueFromTerraform(context.Background(), typeNull(o))
		if err != nil {
			t.Fatal(err)
		}
		if o.InService {
			nulls.Service[o.Name] = null
		} else {
			nulls.Attributes[o.Name] = null
		}
	}
	nulls.Service["port"] = types.Int64Value(80)
	for _, name := range Names() {
		if _, err := Decode(name, nulls); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		_, _ = CapabilitiesWith(name, nulls)
		_ = MeasuredAtGateway(name, nulls)
		if _, err := Identity(name, nulls); err != nil {
			t.Errorf("%s identity: %v", name, err)
		}
	}
	if !reflect.DeepEqual(MeasuredAtPods(), []string{"osm", "istio", "gatewayapi with gateway_api.metrics other than envoy", "linkerd"}) {
		t.Errorf("MeasuredAtPods: %v", MeasuredAtPods())
	}
}

func typeNull(o Option) tftypes.Value {
	return tftypes.NewValue(o.Schema.GetType().TerraformType(context.Background()), nil)
}
