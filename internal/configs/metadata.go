package configs

import (
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Copied metadata, as Flagger's -include-label-prefix: the target Deployment's labels and
// annotations whose keys start with one of Release.IncludeLabelPrefix ("*" is every key) are
// put on the primary Deployment and on its pod template, so that what selects the workload by
// them (dashboards, cost allocation, network policies) sees the primary too. They are not the
// pod template's: they never enter the revision, so changing one starts no analysis; the
// primary takes them whenever it is written next. A key the pod template sets itself keeps the
// template's value.

// Metadata copies a target's labels and annotations to its primary.
type Metadata struct {
	// IncludePrefix is Release.IncludeLabelPrefix.
	IncludePrefix []string
}

// DefaultIncludeLabelPrefix is Flagger's documented -include-label-prefix.
var DefaultIncludeLabelPrefix = []string{"app.kubernetes.io"}

// neverCopied are keys that describe the target object rather than the workload, or that the
// release writes itself.
var neverCopied = []string{"toolkit.fluxcd.io", "kubectl.kubernetes.io/last-applied-configuration", "deployment.kubernetes.io/"}

// copiable reports whether key is copied from the target to the primary; selectorKey is the
// workload's identity label, which the primary has a value of its own for.
func (m Metadata) copiable(key, selectorKey string) bool {
	if key == selectorKey || key == router.LabelManagedBy || key == router.LabelRelease || strings.HasPrefix(key, "canary-release.dev/") {
		return false
	}
	for _, never := range neverCopied {
		if strings.Contains(key, never) {
			return false
		}
	}
	for _, prefix := range m.IncludePrefix {
		if prefix == "*" || (prefix != "" && strings.HasPrefix(key, prefix)) {
			return true
		}
	}
	return false
}

// CopiedFrom is the part of meta that is copied to the primary.
func (m Metadata) CopiedFrom(meta map[string]string, selectorKey string) map[string]string {
	out := map[string]string{}
	for k, v := range meta {
		if m.copiable(k, selectorKey) {
			out[k] = v
		}
	}
	return out
}

// WithCopied is the pod template tmpl with the target's copied labels and annotations added
// where the template does not set the key itself.
func WithCopied(tmpl corev1.PodTemplateSpec, labels, annotations map[string]string) corev1.PodTemplateSpec {
	if len(labels) == 0 && len(annotations) == 0 {
		return tmpl
	}
	add := func(own, copied map[string]string) map[string]string {
		out := maps.Clone(copied)
		maps.Copy(out, own)
		return out
	}
	tmpl.Labels = add(tmpl.Labels, labels)
	if len(annotations) > 0 {
		tmpl.Annotations = add(tmpl.Annotations, annotations)
	}
	return tmpl
}

// ReplaceCopied is live's metadata with its copied keys replaced by want's: a key the target no
// longer has leaves the primary too. Keys that are not copied are kept.
func (m Metadata) ReplaceCopied(live, want map[string]string, selectorKey string) map[string]string {
	out := maps.Clone(live)
	if out == nil {
		out = map[string]string{}
	}
	for k := range out {
		if _, kept := want[k]; !kept && m.copiable(k, selectorKey) {
			delete(out, k)
		}
	}
	maps.Copy(out, want)
	return out
}

// WithoutCopiedFrom is a pod template's metadata without the keys copied from the target
// Deployment (those its own template does not set), for comparing templates whatever the
// copies hold: they are not part of the revision.
func (m Metadata) WithoutCopiedFrom(meta, own map[string]string, selectorKey string) map[string]string {
	out := map[string]string{}
	for k, v := range meta {
		if _, set := own[k]; set || !m.copiable(k, selectorKey) {
			out[k] = v
		}
	}
	return out
}
