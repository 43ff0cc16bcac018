package provider

import (
	"fmt"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
)

// decodeScalerKind reads autoscaler_ref's kind, api_version and primary_scaler_queries into a.
func decodeScalerKind(m AutoscalerRefModel, a *autoscaler.Ref) error {
	kind, version := m.Kind.ValueString(), m.APIVersion.ValueString()
	if kind == autoscaler.KindScaledObject {
		if version != "keda.sh/v1alpha1" {
			return fmt.Errorf("autoscaler_ref.api_version is %q; a ScaledObject is keda.sh/v1alpha1: set api_version = \"keda.sh/v1alpha1\"", version)
		}
		a.Kind = autoscaler.KindScaledObject
		if err := decodeElements(m.PrimaryScalerQueries, &a.PrimaryScalerQueries); err != nil {
			return fmt.Errorf("autoscaler_ref.primary_scaler_queries: %w", err)
		}
		return nil
	}
	if version != "" && version != "autoscaling/v2" {
		return fmt.Errorf("autoscaler_ref.api_version is %q; a HorizontalPodAutoscaler is autoscaling/v2", version)
	}
	if !m.PrimaryScalerQueries.IsNull() && !m.PrimaryScalerQueries.IsUnknown() {
		return fmt.Errorf("autoscaler_ref.primary_scaler_queries is for a ScaledObject's triggers; a HorizontalPodAutoscaler has none")
	}
	return nil
}
