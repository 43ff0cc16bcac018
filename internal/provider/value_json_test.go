package provider

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

func releaseType(t *testing.T) tftypes.Type {
	t.Helper()
	var resp resource.SchemaResponse
	NewReleaseResource().Schema(context.Background(), resource.SchemaRequest{}, &resp)
	if resp.Diagnostics.HasError() {
		t.Fatal(resp.Diagnostics)
	}
	return resp.Schema.Type().TerraformType(context.Background())
}

// What a release saves for import must come back as the same configuration.
func TestSpecJSONRoundTrip(t *testing.T) {
	typ := releaseType(t)
	saved := `{"name":"podinfo","namespace":"test","mesh_provider":"osm","target_ref":{"name":"podinfo"},
		"triggers":{"image":"podinfo:6.0.1"},"service":{"port":9898,"target_port":"9898"},
		"analysis":{"interval":"15s","threshold":5,"step_weights":[5,10,25.5],
			"metrics":[{"name":"request-success-rate","interval":"1m","threshold_range":{"min":99}}]}}`
	v, err := valueFromJSON([]byte(saved), typ)
	if err != nil {
		t.Fatal(err)
	}
	out, err := valueJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal([]byte(saved), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	// Attributes the configuration left out come back null.
	if got := withoutNulls(got); !reflect.DeepEqual(got, want) {
		t.Errorf("came back as %v\nwant %v", got, want)
	}
}

func withoutNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, f := range v {
			if f != nil {
				out[k] = withoutNulls(f)
			}
		}
		return out
	case []any:
		for i := range v {
			v[i] = withoutNulls(v[i])
		}
	}
	return v
}

func TestSpecJSONNamesTheAttributeThatDoesNotFit(t *testing.T) {
	_, err := valueFromJSON([]byte(`{"name":"podinfo","analysis":{"step_weights":["ten"]}}`), releaseType(t))
	if err == nil || !strings.Contains(err.Error(), "analysis") {
		t.Fatalf("error = %v, want one that names analysis.step_weights", err)
	}
}

// The state ConfigMap must never hold what may be secret: webhook URLs and metadata, the
// manifest, triggers.
func TestRecordableDropsSecretsAndKeepsTheAnalysis(t *testing.T) {
	typ := releaseType(t)
	planned := `{"name":"podinfo","namespace":"test","mesh_provider":"osm","manifest":"kind: Deployment # env TOKEN=s3cret",
		"triggers":{"image":"s3cret-trigger"},"service":{"port":9898},
		"analysis":{"interval":"15s","step_weights":[5,10],
			"webhooks":[{"name":"slack","url":"https://hooks.example/T000/s3cret-url","timeout":"5s","metadata":{"cmd":"s3cret-cmd"}}]}}`
	v, err := valueFromJSON([]byte(planned), typ)
	if err != nil {
		t.Fatal(err)
	}
	out := string(specJSON(recordable(v)))
	if strings.Contains(out, "s3cret") {
		t.Errorf("the recorded spec holds a secret: %s", out)
	}
	for _, kept := range []string{`"interval":"15s"`, `"name":"slack"`, `"timeout":"5s"`, `"step_weights":[5,10]`, `"mesh_provider":"osm"`} {
		if !strings.Contains(out, kept) {
			t.Errorf("the recorded spec lost %s: %s", kept, out)
		}
	}
}
