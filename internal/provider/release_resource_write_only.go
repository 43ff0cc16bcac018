package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// writeOnlyValues are the write-only attributes of a configuration (url_wo, metadata_wo,
// address_wo): Terraform puts them in no plan and no state, so the engine gets them from the
// configuration of the Create or Update they come with, by list index. A Delete has no
// configuration: its run calls no webhook and sends no alert whose secret is write-only.
type writeOnlyValues struct {
	hookURLs       []string
	hookMetadata   []map[string]string
	alertAddresses []string
}

// readWriteOnly reads them from the configuration.
func readWriteOnly(ctx context.Context, cfg tfsdk.Config) (writeOnlyValues, diag.Diagnostics) {
	var w writeOnlyValues
	var obj types.Object
	diags := cfg.GetAttribute(ctx, path.Root("analysis"), &obj)
	if diags.HasError() {
		return w, diags
	}
	var a AnalysisModel
	if ok, err := decode(obj, &a); err != nil || !ok {
		if err != nil {
			diags.AddAttributeError(path.Root("analysis"), "Invalid canary_release", err.Error())
		}
		return w, diags
	}
	var hooks []WebhookModel
	if err := decodeElements(a.Webhooks, &hooks); err != nil {
		diags.AddAttributeError(path.Root("analysis").AtName("webhooks"), "Invalid canary_release", err.Error())
		return w, diags
	}
	for _, h := range hooks {
		w.hookURLs = append(w.hookURLs, h.URLWO.ValueString())
		var metadata map[string]string
		if err := decodeElements(h.MetadataWO, &metadata); err != nil {
			diags.AddAttributeError(path.Root("analysis").AtName("webhooks"), "Invalid canary_release", err.Error())
			return w, diags
		}
		w.hookMetadata = append(w.hookMetadata, metadata)
	}
	var alerts []AlertModel
	if err := decodeElements(a.Alerts, &alerts); err != nil {
		diags.AddAttributeError(path.Root("analysis").AtName("alerts"), "Invalid canary_release", err.Error())
		return w, diags
	}
	for _, am := range alerts {
		var p AlertProviderModel
		if _, err := decode(am.Provider, &p); err != nil {
			diags.AddAttributeError(path.Root("analysis").AtName("alerts"), "Invalid canary_release", err.Error())
			return w, diags
		}
		w.alertAddresses = append(w.alertAddresses, p.AddressWO.ValueString())
	}
	return w, diags
}

// apply gives the release the write-only values, over the empty ones the plan held.
func (w writeOnlyValues) apply(rel *rollout.Release) {
	for i := range rel.Analysis.Webhooks {
		if i < len(w.hookURLs) && w.hookURLs[i] != "" {
			rel.Analysis.Webhooks[i].URL = w.hookURLs[i]
		}
		if i < len(w.hookMetadata) && w.hookMetadata[i] != nil {
			rel.Analysis.Webhooks[i].Metadata = w.hookMetadata[i]
		}
	}
	for i := range rel.Analysis.Alerts {
		if i < len(w.alertAddresses) && w.alertAddresses[i] != "" {
			rel.Analysis.Alerts[i].Provider.Address = w.alertAddresses[i]
		}
	}
}

// secrets are the write-only URLs, masked wherever the run's text goes, as the provider's own
// credentials are (metadata values are left: short common words would garble the story).
func (w writeOnlyValues) secrets() []string {
	var out []string
	for _, s := range append(append([]string(nil), w.hookURLs...), w.alertAddresses...) {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
