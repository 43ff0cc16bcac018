package provider

import (
	"fmt"
	"slices"
	"sort"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/workload"
)

// The target kinds a release accepts: a Deployment, a StatefulSet (released in place), or a kind a mesh driver owns
// (registry.TargetKinds), which only that driver's mesh_provider releases.

const (
	deploymentAPIVersion = "apps/v1"
	deploymentKind       = "Deployment"
)

// engineKinds are the apps/v1 kinds the engine releases itself, with any mesh_provider that
// supports them: the Deployment, then the workload drivers' kinds (released in place, then
// copied), as internal/workload registers them.
var engineKinds = append(append([]string{deploymentKind}, workload.InPlaceKinds()...), workload.Others()...)

// targetAPIVersions and targetKinds are the values target_ref accepts.
func targetAPIVersions() []string {
	return targetValues([]string{deploymentAPIVersion}, func(api, _ string) string { return api })
}

func targetKinds() []string {
	return targetValues(engineKinds, func(_, kind string) string { return kind })
}

// targetValues are the engine's own values (builtins) followed by those of driver-owned kinds.
func targetValues(builtins []string, pick func(api, kind string) string) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, b := range builtins {
		seen[b] = true
		out = append(out, b)
	}
	var owned []string
	for _, k := range registry.TargetKinds() {
		if v := pick(k.APIVersion, k.Kind); !seen[v] {
			seen[v] = true
			owned = append(owned, v)
		}
	}
	sort.Strings(owned)
	return append(out, owned...)
}

// checkTargetKind: a driver that owns its target kind releases only a target_ref of that kind,
// and a target of another kind than a Deployment needs the driver that owns it.
func checkTargetKind(m ReleaseModel, provider string) (at path.Path, summary, detail string) {
	apiVersion, kind := deploymentAPIVersion, deploymentKind
	var target TargetRefModel
	if ok, err := decode(m.TargetRef, &target); err != nil || (ok && (target.APIVersion.IsUnknown() || target.Kind.IsUnknown())) {
		return path.Empty(), "", ""
	} else if ok {
		if !target.APIVersion.IsNull() {
			apiVersion = target.APIVersion.ValueString()
		}
		if !target.Kind.IsNull() {
			kind = target.Kind.ValueString()
		}
	}
	owned, owns := registry.TargetKind(provider)
	switch {
	case owns && (apiVersion != owned.APIVersion || kind != owned.Kind):
		return path.Root("target_ref"), fmt.Sprintf("mesh_provider %s releases a %s", provider, owned.Kind),
			fmt.Sprintf("mesh_provider %q routes between the revisions of a %s %s: set target_ref = { api_version = %q, kind = %q, name = ... } (not %s %s, and not manifest).",
				provider, owned.APIVersion, owned.Kind, owned.APIVersion, owned.Kind, apiVersion, kind)
	case owns, apiVersion == deploymentAPIVersion && slices.Contains(engineKinds, kind):
	case slices.Contains(targetAPIVersions(), apiVersion) && slices.Contains(targetKinds(), kind):
		// Values the schema accepts one by one (a value it refuses has its error already), in
		// a pair that only a driver's mesh_provider releases, or none does.
		return path.Root("target_ref").AtName("kind"), fmt.Sprintf("target_ref kind %s needs its mesh_provider", kind),
			fmt.Sprintf("A target of kind %s %s is released only by the mesh_provider that owns that kind (%s); mesh_provider %q releases an apps/v1 %s.",
				apiVersion, kind, ownerText(apiVersion, kind), provider, router.OrList(engineKinds))
	}
	return path.Empty(), "", ""
}

func ownerText(apiVersion, kind string) string {
	for name, k := range registry.TargetKinds() {
		if k.APIVersion == apiVersion && k.Kind == kind {
			return fmt.Sprintf("mesh_provider = %q", name)
		}
	}
	return "none"
}

// validateTargetKind is checkTargetKind as a plan-time error.
func validateTargetKind(m ReleaseModel, provider string, resp *resource.ValidateConfigResponse) {
	if at, summary, detail := checkTargetKind(m, provider); summary != "" {
		resp.Diagnostics.AddAttributeError(at, summary, detail)
	}
}

// codeList is "`a` or `b`" for the docs.
func codeList(values []string) string {
	out := ""
	for i, v := range values {
		switch {
		case i == 0:
		case i == len(values)-1:
			out += " or "
		default:
			out += ", "
		}
		out += "`" + v + "`"
	}
	return out
}
