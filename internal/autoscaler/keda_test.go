package autoscaler

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// kedaScaledObject is the user's ScaledObject of podinfo: 2 to 5 replicas on one Prometheus trigger.
func kedaScaledObject() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": "podinfo", "namespace": "test"},
		"spec": map[string]any{
			"scaleTargetRef":  map[string]any{"name": "podinfo"},
			"minReplicaCount": int64(2), "maxReplicaCount": int64(5),
			"triggers": []any{map[string]any{"type": "prometheus", "name": "rps", "metadata": map[string]any{
				"serverAddress": "http://prometheus:9090", "query": `sum(rate(http_requests_total{deployment="podinfo"}[1m]))`, "threshold": "100",
			}}},
		},
	}}
}

// primary_scaler_queries replace the primary's queries by trigger name (Flagger's primaryScalerQueries).
func TestPrimaryScalerQueries(t *testing.T) {
	s := Scalers{Namespace: "test", Target: "podinfo", Primary: "podinfo-primary", Ref: &Ref{
		Name: "podinfo", Kind: KindScaledObject, PrimaryMinReplicas: 3, PrimaryScalerQueries: map[string]string{"rps": "vector(7)"},
	}}
	spec := s.primaryScaledObjectSpec(kedaScaledObject())
	triggers, _, _ := unstructured.NestedSlice(spec, "triggers")
	if q := triggers[0].(map[string]any)["metadata"].(map[string]any)["query"]; q != "vector(7)" {
		t.Errorf("query = %v, want primary_scaler_queries' vector(7)", q)
	}
	if spec["minReplicaCount"] != int64(3) {
		t.Errorf("minReplicaCount = %v, want primary_scaler_replicas' 3", spec["minReplicaCount"])
	}
	// The target's object is not changed.
	if q, _, _ := unstructured.NestedSlice(kedaScaledObject().Object, "spec", "triggers"); !strings.Contains(q[0].(map[string]any)["metadata"].(map[string]any)["query"].(string), `"podinfo"`) {
		t.Error("the target's query changed")
	}
}
