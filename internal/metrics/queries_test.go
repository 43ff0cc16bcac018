package metrics

import (
	"strings"
	"testing"
)

var podinfo = Vars{Name: "podinfo-release", Namespace: "test", Target: "podinfo", Service: "podinfo", Ingress: "podinfo", Route: "podinfo", Interval: "1m"}

func TestRenderFunctionsAndVariables(t *testing.T) {
	v := podinfo
	v.Service, v.Ingress, v.Route = "svc", "ing", "rt"
	v.Variables = map[string]string{"destination_kind": "Deployment"}
	got, err := Render(`{{ name }} {{ namespace }} {{ target }} {{ service }} {{ ingress }} {{ route }} {{ interval }} {{ variables.destination_kind }}`, v)
	if err != nil {
		t.Fatal(err)
	}
	if want := "podinfo-release test podinfo svc ing rt 1m Deployment"; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestRenderErrors(t *testing.T) {
	v := podinfo
	v.Variables = map[string]string{"a": "1"}
	if _, err := Render(`x{{ variables.missing }}`, v); err == nil || !strings.Contains(err.Error(), `no entry for key "missing"`) {
		t.Errorf("missing variable: %v", err)
	}
	if _, err := Render(`x{{ variables.missing }}`, podinfo); err == nil {
		t.Error("missing variable with no variables at all was accepted")
	}
	if _, err := Render(`{{ cluster }}`, v); err == nil || !strings.Contains(err.Error(), `"cluster" not defined`) {
		t.Errorf("unknown function: %v", err)
	}
	if _, err := Render(`{{ name `, v); err == nil {
		t.Error("unterminated action accepted")
	}
}
