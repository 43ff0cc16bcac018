package provider

import (
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// autoscaler_ref's kind, api_version and primary_scaler_queries must agree; the error names
// the attribute and what is allowed.
func TestDecodeScalerKind(t *testing.T) {
	queries := stringMap("rps", "vector(1)")
	for _, c := range []struct {
		kind, version string
		queries       types.Map
		wantErr       string
		wantKind      string
	}{
		{"ScaledObject", "keda.sh/v1alpha1", queries, "", autoscaler.KindScaledObject},
		{"ScaledObject", "autoscaling/v2", types.MapNull(types.StringType), `autoscaler_ref.api_version is "autoscaling/v2"; a ScaledObject is keda.sh/v1alpha1`, ""},
		{"HorizontalPodAutoscaler", "autoscaling/v2", types.MapNull(types.StringType), "", ""},
		{"HorizontalPodAutoscaler", "keda.sh/v1alpha1", types.MapNull(types.StringType), "a HorizontalPodAutoscaler is autoscaling/v2", ""},
		{"HorizontalPodAutoscaler", "autoscaling/v2", queries, "primary_scaler_queries is for a ScaledObject", ""},
	} {
		a := &autoscaler.Ref{}
		err := decodeScalerKind(AutoscalerRefModel{Kind: types.StringValue(c.kind), APIVersion: types.StringValue(c.version), PrimaryScalerQueries: c.queries}, a)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s %s: %v", c.kind, c.version, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s %s: error %v, want %q", c.kind, c.version, err, c.wantErr)
		case err == nil && a.Kind != c.wantKind:
			t.Errorf("%s %s: kind %q, want %q", c.kind, c.version, a.Kind, c.wantKind)
		case err == nil && c.wantKind != "" && a.PrimaryScalerQueries["rps"] != "vector(1)":
			t.Errorf("%s %s: queries %v", c.kind, c.version, a.PrimaryScalerQueries)
		}
	}
}
