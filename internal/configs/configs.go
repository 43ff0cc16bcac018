// Package configs is what a primary copies from its target besides the pod template: the
// ConfigMaps and Secrets the template references, tracked as part of the revision and copied
// into "<name>-primary" copies that releases share, and the labels and annotations copied by
// prefix. It reads and writes them for one release; when is the engine's concern.
package configs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Config tracking, as in Flagger: the ConfigMaps and Secrets a pod template references are
// part of its revision, so a change to them alone is released through an analysis, and the
// primary runs on "<name>-primary" copies, so that a rollback keeps the promoted config.
// Only hashes of their data ever leave the cluster.

// AnnotationTracking set to "disabled" on a ConfigMap or Secret leaves it untracked:
// shared by both sides and outside the revision. Flagger's own annotation is honoured too.
const AnnotationTracking = "canary-release.dev/config-tracking"

const flaggerConfigTracking = "flagger.app/config-tracking"

// Ref names a ConfigMap or a Secret that a pod template references.
type Ref struct {
	Kind string // "ConfigMap" or "Secret"
	Name string
}

func (c Ref) String() string { return c.Kind + "/" + c.Name }

// Tracked is a referenced config that is tracked, with its data's hash; absent when it
// does not exist (an optional reference).
type Tracked struct {
	Ref
	hash      string
	configMap *corev1.ConfigMap
	secret    *corev1.Secret
	absent    bool
	// copy is the copy the primary reads, when it is not the shared "<name>-primary": the
	// release's own (Copies.OwnCopyName), while other releases' primaries read other contents of the
	// shared one.
	copy string
}

// copyName is the copy of t that the primary reads.
func (t Tracked) copyName() string {
	if t.copy != "" {
		return t.copy
	}
	return PrimaryName(t.Name)
}

// Referenced lists the ConfigMaps and Secrets a pod spec uses: env, envFrom and volumes
// (projected ones included), of every container.
func Referenced(spec corev1.PodSpec) []Ref {
	seen := map[Ref]bool{}
	add := func(kind, name string) {
		if name != "" {
			seen[Ref{kind, name}] = true
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				add("ConfigMap", e.ConfigMapRef.Name)
			}
			if e.SecretRef != nil {
				add("Secret", e.SecretRef.Name)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				add("ConfigMap", r.Name)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				add("Secret", r.Name)
			}
		}
	}
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			add("ConfigMap", v.ConfigMap.Name)
		}
		if v.Secret != nil {
			add("Secret", v.Secret.SecretName)
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					add("ConfigMap", s.ConfigMap.Name)
				}
				if s.Secret != nil {
					add("Secret", s.Secret.Name)
				}
			}
		}
	}
	refs := slices.Collect(maps.Keys(seen))
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	return refs
}

// Copies reads the configs one release's target references and writes its primary's copies.
type Copies struct {
	Kube      kubernetes.Interface
	Namespace string
	// Release is the canary_release that owns the copies it writes.
	Release string
	// FieldManager writes the copies.
	FieldManager string
	// CheckOwned refuses to take over an object of kind that the release did not create.
	CheckOwned func(m metav1.Object, kind string) error
}

// Track reads the configs spec (the pod spec of subject, for messages) references, leaving out
// those opted out. A missing one (an optional reference) is tracked as absent: the primary still
// points at its copy, which is absent too, so the config created later reaches the primary only
// through an analysis of the revision it then makes.
func (c Copies) Track(ctx context.Context, spec corev1.PodSpec, subject string) ([]Tracked, error) {
	var out []Tracked
	for _, ref := range Referenced(spec) {
		t := Tracked{Ref: ref}
		var meta metav1.ObjectMeta
		var err error
		switch ref.Kind {
		case "ConfigMap":
			t.configMap, err = c.Kube.CoreV1().ConfigMaps(c.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err == nil {
				meta, t.hash = t.configMap.ObjectMeta, dataHash(t.configMap.Data, t.configMap.BinaryData)
			}
		case "Secret":
			t.secret, err = c.Kube.CoreV1().Secrets(c.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err == nil {
				meta, t.hash = t.secret.ObjectMeta, dataHash(t.secret.StringData, t.secret.Data)
			}
		}
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, Tracked{Ref: ref, absent: true})
			continue
		case err != nil:
			return nil, fmt.Errorf("reading %s referenced by %s: %w", ref, subject, err)
		case meta.Annotations[AnnotationTracking] == "disabled", meta.Annotations[flaggerConfigTracking] == "disabled":
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// dataHash is a hash of a config's data, in a stable order.
func dataHash(text map[string]string, binary map[string][]byte) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(text)) {
		fmt.Fprintf(h, "%s=%d:%s;", k, len(text[k]), text[k])
	}
	for _, k := range slices.Sorted(maps.Keys(binary)) {
		fmt.Fprintf(h, "%s=%d:", k, len(binary[k]))
		h.Write(binary[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Revision identifies what a rollout releases: the pod template (its hash, templateHash) and
// the data of the configs it tracks. Without tracked configs it is the template hash, as before
// config tracking.
func Revision(templateHash string, tracked []Tracked) string {
	present := slices.DeleteFunc(slices.Clone(tracked), func(t Tracked) bool { return t.absent })
	if len(present) == 0 {
		return templateHash
	}
	h := sha256.New()
	h.Write([]byte(templateHash))
	for _, t := range present {
		fmt.Fprintf(h, ";%s=%s", t, t.hash)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// PrimaryName is the primary's copy of a tracked config, shared by the releases whose
// primaries read the same contents.
func PrimaryName(name string) string { return name + "-primary" }

// OwnCopyName is the release's own copy of a tracked config, which its primary reads while the
// shared copy holds other contents for other releases' primaries: a config shared by several
// releases changes through each of them, each promoting into a copy of its own.
func (c Copies) OwnCopyName(name string) string { return PrimaryName(name) + "-" + c.Release }

// originalOf is the config a copy of this release's is made from.
func (c Copies) originalOf(copyName string) string {
	if original, ok := strings.CutSuffix(copyName, "-primary-"+c.Release); ok {
		return original
	}
	return strings.TrimSuffix(copyName, "-primary")
}

// EnsurePrimary makes the primary's copies of the tracked configs hold the data the
// target has now, the data that was analysed: the shared copy when no other release's primary
// reads other contents from it (created, joined, or changed), and otherwise the release's own
// copy, so that a change of a config that several releases read is released through each of
// them without changing what another's primary runs. It records in tracked which copy each
// config's primary reads.
func (c Copies) EnsurePrimary(ctx context.Context, tracked []Tracked) error {
	for i := range tracked {
		t := &tracked[i]
		err := c.ensureCopy(ctx, *t, PrimaryName(t.Name))
		var shared *sharedContentsError
		if errors.As(err, &shared) {
			t.copy = c.OwnCopyName(t.Name)
			err = c.ensureCopy(ctx, *t, t.copy)
		}
		switch {
		case err != nil && t.absent:
			return fmt.Errorf("removing the primary's copy of %s, which the promoted revision lacks: %w", t, err)
		case err != nil:
			return fmt.Errorf("copying %s for the primary: %w", t, err)
		}
	}
	return nil
}

// ensureCopy makes the copy name of t hold t's data (none when t is absent), or fails with a
// *sharedContentsError when another release's primary reads other contents from it.
func (c Copies) ensureCopy(ctx context.Context, t Tracked, name string) error {
	switch {
	case t.absent:
		// The promoted revision has no such config: neither may the primary.
		return c.Drop(ctx, Ref{t.Kind, name}, true)
	case t.configMap != nil:
		want := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}, Data: t.configMap.Data, BinaryData: t.configMap.BinaryData}
		return shareCopy(ctx, c, c.configMapCopies(), t.Name, want, t.hash)
	default:
		want := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}, Type: t.secret.Type, Data: t.secret.Data}
		return shareCopy(ctx, c, c.secretCopies(), t.Name, want, t.hash)
	}
}

// ReadCopies sets, in tracked, the copies a primary of this release reads (its pod spec).
func (c Copies) ReadCopies(tracked []Tracked, primary corev1.PodSpec) {
	used := Referenced(primary)
	for i := range tracked {
		if own := c.OwnCopyName(tracked[i].Name); slices.Contains(used, Ref{tracked[i].Kind, own}) {
			tracked[i].copy = own
		}
	}
}

// UsePrimary points a primary pod spec at the copies of the tracked configs.
func UsePrimary(spec *corev1.PodSpec, tracked []Tracked) {
	if len(tracked) == 0 {
		return
	}
	copies := map[Ref]string{}
	for _, t := range tracked {
		copies[t.Ref] = t.copyName()
	}
	rename := func(kind string, name *string) {
		if c, ok := copies[Ref{kind, *name}]; ok {
			*name = c
		}
	}
	for _, containers := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range containers {
			c := &containers[i]
			for j := range c.EnvFrom {
				if r := c.EnvFrom[j].ConfigMapRef; r != nil {
					rename("ConfigMap", &r.Name)
				}
				if r := c.EnvFrom[j].SecretRef; r != nil {
					rename("Secret", &r.Name)
				}
			}
			for j := range c.Env {
				if vf := c.Env[j].ValueFrom; vf != nil {
					if vf.ConfigMapKeyRef != nil {
						rename("ConfigMap", &vf.ConfigMapKeyRef.Name)
					}
					if vf.SecretKeyRef != nil {
						rename("Secret", &vf.SecretKeyRef.Name)
					}
				}
			}
		}
	}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if v.ConfigMap != nil {
			rename("ConfigMap", &v.ConfigMap.Name)
		}
		if v.Secret != nil {
			rename("Secret", &v.Secret.SecretName)
		}
		if v.Projected != nil {
			for j := range v.Projected.Sources {
				if s := v.Projected.Sources[j].ConfigMap; s != nil {
					rename("ConfigMap", &s.Name)
				}
				if s := v.Projected.Sources[j].Secret; s != nil {
					rename("Secret", &s.Name)
				}
			}
		}
	}
}

// DeleteAll takes the release off the copies' owners: a copy goes with its last owner, and one
// that another release's primary reads stays.
func (c Copies) DeleteAll(ctx context.Context, copies []Ref) error {
	for _, ref := range copies {
		if err := c.Drop(ctx, ref, false); err != nil {
			return fmt.Errorf("deleting the primary's copy %s: %w", ref, err)
		}
	}
	return nil
}

// Drop takes the release off one copy's owners (see dropCopy).
func (c Copies) Drop(ctx context.Context, ref Ref, mustBeAlone bool) error {
	original := c.originalOf(ref.Name)
	if ref.Kind == "ConfigMap" {
		return dropCopy(ctx, c, c.configMapCopies(), original, ref.Name, mustBeAlone)
	}
	return dropCopy(ctx, c, c.secretCopies(), original, ref.Name, mustBeAlone)
}

// Used are the copies a pod spec of this release reads: shared ("-primary") or its own.
func (c Copies) Used(spec corev1.PodSpec) []Ref {
	return slices.DeleteFunc(Referenced(spec), func(ref Ref) bool {
		return !strings.HasSuffix(ref.Name, "-primary") && !strings.HasSuffix(ref.Name, "-primary-"+c.Release)
	})
}
