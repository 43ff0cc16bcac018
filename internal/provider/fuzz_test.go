package provider

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzDurationValidator: whatever a user writes, an accepted duration parses and meets the
// minimum, and a refused one gets an error that names the attribute.
func FuzzDurationValidator(f *testing.F) {
	for _, s := range []string{"30s", "1m30s", "1.5m", "0s", "-1s", "10", "999999999999h", "1h2m3s4ms"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, v := range []durationValidator{{Minimum: time.Second}, {Minimum: time.Second, PromQL: true}} {
			resp := &validator.StringResponse{}
			v.ValidateString(context.Background(), validator.StringRequest{Path: path.Root("analysis").AtName("interval"), ConfigValue: types.StringValue(s)}, resp)
			if resp.Diagnostics.HasError() {
				if !strings.Contains(resp.Diagnostics.Errors()[0].Detail(), "analysis.interval") {
					t.Fatalf("%q: the error does not name the attribute: %s", s, resp.Diagnostics.Errors()[0].Detail())
				}
				continue
			}
			if d, err := time.ParseDuration(s); err != nil || d < time.Second {
				t.Fatalf("%q accepted (promQL %v), but parses as %v, %v", s, v.PromQL, d, err)
			}
		}
	})
}

// FuzzParseManifest: any text either is refused with an error or is an apps/v1 Deployment
// whose name makes valid Service names.
func FuzzParseManifest(f *testing.F) {
	f.Add("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: podinfo\n")
	f.Add(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"test"}}`)
	f.Add("kind: Service")
	f.Add("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: 1bad\n")
	f.Fuzz(func(t *testing.T, text string) {
		d, err := parseManifest(text, "test")
		if err != nil {
			return
		}
		if d.APIVersion != "apps/v1" || d.Kind != "Deployment" {
			t.Fatalf("accepted %s/%s", d.APIVersion, d.Kind)
		}
		if problems := validation.IsDNS1035Label(d.Name + "-primary"); len(problems) > 0 {
			t.Fatalf("accepted the name %q: %v", d.Name, problems)
		}
	})
}
