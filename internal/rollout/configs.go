package rollout

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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Config tracking, as in Flagger: the ConfigMaps and Secrets a pod template references are
// part of its revision, so a change to them alone is released through an analysis, and the
// primary runs on "<name>-primary" copies, so that a rollback keeps the promoted config.
// Only hashes of their data ever leave the cluster.

// AnnotationConfigTracking set to "disabled" on a ConfigMap or Secret leaves it untracked:
// shared by both sides and outside the revision. Flagger's own annotation is honoured too.
const AnnotationConfigTracking = "canary-release.dev/config-tracking"

const flaggerConfigTracking = "flagger.app/config-tracking"

// configRef names a ConfigMap or a Secret that a pod template references.
type configRef struct {
	kind string // "ConfigMap" or "Secret"
	name string
}

func (c configRef) String() string { return c.kind + "/" + c.name }

// trackedConfig is a referenced config that is tracked, with its data's hash; absent when it
// does not exist (an optional reference).
type trackedConfig struct {
	configRef
	hash      string
	configMap *corev1.ConfigMap
	secret    *corev1.Secret
	absent    bool
	// copy is the copy the primary reads, when it is not the shared "<name>-primary": the
	// release's own (ownCopyName), while other releases' primaries read other contents of the
	// shared one.
	copy string
}

// copyName is the copy of t that the primary reads.
func (t trackedConfig) copyName() string {
	if t.copy != "" {
		return t.copy
	}
	return primaryConfigName(t.name)
}

// referencedConfigs lists the ConfigMaps and Secrets a pod spec uses: env, envFrom and volumes
// (projected ones included), of every container.
func referencedConfigs(spec corev1.PodSpec) []configRef {
	seen := map[configRef]bool{}
	add := func(kind, name string) {
		if name != "" {
			seen[configRef{kind, name}] = true
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

// trackedConfigs reads the configs the target's template references, leaving out those opted
// out. A missing one (an optional reference) is tracked as absent: the primary still points at
// its copy, which is absent too, so the config created later reaches the primary only through
// an analysis of the revision it then makes.
func (w workload) trackedConfigs(ctx context.Context, target *appsv1.Deployment) ([]trackedConfig, error) {
	var out []trackedConfig
	for _, ref := range referencedConfigs(target.Spec.Template.Spec) {
		t := trackedConfig{configRef: ref}
		var meta metav1.ObjectMeta
		var err error
		switch ref.kind {
		case "ConfigMap":
			t.configMap, err = w.kube.CoreV1().ConfigMaps(w.rel.Namespace).Get(ctx, ref.name, metav1.GetOptions{})
			if err == nil {
				meta, t.hash = t.configMap.ObjectMeta, dataHash(t.configMap.Data, t.configMap.BinaryData)
			}
		case "Secret":
			t.secret, err = w.kube.CoreV1().Secrets(w.rel.Namespace).Get(ctx, ref.name, metav1.GetOptions{})
			if err == nil {
				meta, t.hash = t.secret.ObjectMeta, dataHash(t.secret.StringData, t.secret.Data)
			}
		}
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, trackedConfig{configRef: ref, absent: true})
			continue
		case err != nil:
			return nil, fmt.Errorf("reading %s referenced by %s %s/%s: %w", ref, w.rel.WorkloadKind(), w.rel.Namespace, w.rel.Target, err)
		case meta.Annotations[AnnotationConfigTracking] == "disabled", meta.Annotations[flaggerConfigTracking] == "disabled":
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

// revision identifies what a rollout releases: the pod template and the data of the configs
// it tracks. Without tracked configs it is the template hash, as before config tracking.
func (w workload) revision(ctx context.Context, target *appsv1.Deployment) (string, error) {
	tracked, err := w.trackedConfigs(ctx, target)
	if err != nil {
		return "", err
	}
	return revisionOf(target, tracked), nil
}

func revisionOf(target *appsv1.Deployment, tracked []trackedConfig) string {
	present := slices.DeleteFunc(slices.Clone(tracked), func(t trackedConfig) bool { return t.absent })
	if len(present) == 0 {
		return TemplateHash(target)
	}
	h := sha256.New()
	h.Write([]byte(TemplateHash(target)))
	for _, t := range present {
		fmt.Fprintf(h, ";%s=%s", t, t.hash)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// primaryConfigName is the primary's copy of a tracked config, shared by the releases whose
// primaries read the same contents.
func primaryConfigName(name string) string { return name + "-primary" }

// ownCopyName is the release's own copy of a tracked config, which its primary reads while the
// shared copy holds other contents for other releases' primaries: a config shared by several
// releases changes through each of them, each promoting into a copy of its own.
func (w workload) ownCopyName(name string) string { return primaryConfigName(name) + "-" + w.rel.Name }

// originalOf is the config a copy of this release's is made from.
func (w workload) originalOf(copyName string) string {
	if original, ok := strings.CutSuffix(copyName, "-primary-"+w.rel.Name); ok {
		return original
	}
	return strings.TrimSuffix(copyName, "-primary")
}

// ensurePrimaryConfigs makes the primary's copies of the tracked configs hold the data the
// target has now, the data that was analysed: the shared copy when no other release's primary
// reads other contents from it (created, joined, or changed), and otherwise the release's own
// copy, so that a change of a config that several releases read is released through each of
// them without changing what another's primary runs. It records in tracked which copy each
// config's primary reads.
func (w workload) ensurePrimaryConfigs(ctx context.Context, tracked []trackedConfig) error {
	for i := range tracked {
		t := &tracked[i]
		err := w.ensureCopy(ctx, *t, primaryConfigName(t.name))
		var shared *sharedContentsError
		if errors.As(err, &shared) {
			t.copy = w.ownCopyName(t.name)
			err = w.ensureCopy(ctx, *t, t.copy)
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
func (w workload) ensureCopy(ctx context.Context, t trackedConfig, name string) error {
	switch {
	case t.absent:
		// The promoted revision has no such config: neither may the primary.
		return w.dropPrimaryConfig(ctx, configRef{t.kind, name}, true)
	case t.configMap != nil:
		want := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.rel.Namespace}, Data: t.configMap.Data, BinaryData: t.configMap.BinaryData}
		return shareCopy(ctx, w, w.configMapCopies(), t.name, want, t.hash)
	default:
		want := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.rel.Namespace}, Type: t.secret.Type, Data: t.secret.Data}
		return shareCopy(ctx, w, w.secretCopies(), t.name, want, t.hash)
	}
}

// readCopies sets, in tracked, the copies a primary of this release reads (its pod spec).
func (w workload) readCopies(tracked []trackedConfig, primary corev1.PodSpec) {
	used := referencedConfigs(primary)
	for i := range tracked {
		if own := w.ownCopyName(tracked[i].name); slices.Contains(used, configRef{tracked[i].kind, own}) {
			tracked[i].copy = own
		}
	}
}

// usePrimaryConfigs points a primary pod spec at the copies of the tracked configs.
func usePrimaryConfigs(spec *corev1.PodSpec, tracked []trackedConfig) {
	if len(tracked) == 0 {
		return
	}
	copies := map[configRef]string{}
	for _, t := range tracked {
		copies[t.configRef] = t.copyName()
	}
	rename := func(kind string, name *string) {
		if c, ok := copies[configRef{kind, *name}]; ok {
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

// primaryConfigCopies lists the copies the primary uses, read from its template, so that a
// destroy removes them by name: no list permission, and no Secret permission unless the
// workload uses Secrets.
func (w workload) primaryConfigCopies(ctx context.Context) ([]configRef, error) {
	primary, err := w.primary(ctx)
	if err != nil || primary == nil {
		return nil, err
	}
	return w.usedCopies(primary.Spec.Template.Spec), nil
}

// deletePrimaryConfigs takes the release off the copies' owners: a copy goes with its last
// owner, and one that another release's primary reads stays.
func (w workload) deletePrimaryConfigs(ctx context.Context, copies []configRef) error {
	for _, ref := range copies {
		if err := w.dropPrimaryConfig(ctx, ref, false); err != nil {
			return fmt.Errorf("deleting the primary's copy %s: %w", ref, err)
		}
	}
	return nil
}

// dropPrimaryConfig takes the release off one copy's owners (see dropCopy).
func (w workload) dropPrimaryConfig(ctx context.Context, ref configRef, mustBeAlone bool) error {
	original := w.originalOf(ref.name)
	if ref.kind == "ConfigMap" {
		return dropCopy(ctx, w, w.configMapCopies(), original, ref.name, mustBeAlone)
	}
	return dropCopy(ctx, w, w.secretCopies(), original, ref.name, mustBeAlone)
}

// usedCopies are the copies a pod spec of this release reads: shared ("-primary") or its own.
func (w workload) usedCopies(spec corev1.PodSpec) []configRef {
	return slices.DeleteFunc(referencedConfigs(spec), func(ref configRef) bool {
		return !strings.HasSuffix(ref.name, "-primary") && !strings.HasSuffix(ref.name, "-primary-"+w.rel.Name)
	})
}

// Pods read env and envFrom (and subPath mounts) once, when their containers start. What a
// canary's pods run is therefore the template and the tracked configs as they were when the
// pods started, which is what the analysis judges: the two helpers below make that the
// revision this run read (r.hash) before its first check counts.

// restartStaleCanary scales to zero a canary that still runs pods from before this run (a
// rollback that was held because the primary had no Ready pods, or a scale-down that failed)
// when its template uses tracked configs: those pods read the configs when they started, maybe
// an older version than the revision under analysis. The scale-up that follows starts pods
// that read them now. The canary has no traffic here (recovery took it away). It returns the
// canary as it then is.
func (r *run) restartStaleCanary(ctx context.Context, watch *canaryWatch, before *appsv1.Deployment) (*appsv1.Deployment, error) {
	if before.Spec.Replicas != nil && *before.Spec.Replicas == 0 {
		return before, nil
	}
	var tracked []trackedConfig
	err := onAPIError(ctx, func() (err error) {
		tracked, err = r.w.trackedConfigs(ctx, r.target)
		return err
	})
	if err != nil || len(tracked) == 0 {
		return before, err
	}
	r.note("the canary %s still runs pods that started before this run, which may read an older version of the ConfigMaps and Secrets it uses: "+
		"restarting it from zero, so that the analysis judges revision %s", r.rel.Target, r.hash)
	if err := r.w.scale(ctx, r.rel.Target, 0); err != nil {
		return nil, err
	}
	return watch.scaledToZero(ctx, r.rel.ProgressDeadline)
}

// configsChangedSinceStart reads the tracked configs again once the canary's pods are Ready:
// when their data is not that of the revision read before the pods started (r.hash), the pods
// may have read either version, so no check of them may count for r.hash. It returns why the
// analysis cannot go on, "" when it can.
func (r *run) configsChangedSinceStart(ctx context.Context) (string, error) {
	var now string
	err := onAPIError(ctx, func() (err error) {
		now, err = r.w.revision(ctx, r.target)
		return err
	})
	if err != nil || now == r.hash {
		return "", err
	}
	return fmt.Sprintf("a ConfigMap or Secret that %s %s/%s uses changed while the canary's pods started (revision %s, then %s), "+
		"so they may run either version and none was analysed; apply again to analyse the new one",
		r.rel.WorkloadKind(), r.rel.Namespace, r.rel.Target, r.hash, now), nil
}
