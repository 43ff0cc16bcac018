package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/canary-release/terraform-provider-canary/internal/controlpolicy"
)

// warnOpenControls says, in a plan that creates or changes the release, when its controls
// and record are open to every ConfigMap writer of its namespace, or when the provider's
// identity cannot tell (controlpolicy.Check). Once per plan of the resource: a plan without
// changes stays quiet.
func (r *ReleaseResource) warnOpenControls(ctx context.Context, plan ReleaseModel, diags *diag.Diagnostics) {
	if r.c.kube == nil || plan.Name.IsUnknown() || plan.Namespace.IsUnknown() || plan.Namespace.IsNull() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, planReadTimeout)
	defer cancel()
	if w := controlpolicy.Check(ctx, r.c.kube, plan.Namespace.ValueString(), plan.Name.ValueString()); w != nil {
		diags.AddWarning(w.Summary, w.Detail)
	}
}
