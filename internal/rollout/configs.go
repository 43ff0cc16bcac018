package rollout

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/canary-release/terraform-provider-canary/internal/configs"
)

// copies are the release's copies of the configs its target tracks (package configs).
func (w workload) copies() configs.Copies {
	return configs.Copies{Kube: w.kube, Namespace: w.rel.Namespace, Release: w.rel.Name, FieldManager: FieldManager, CheckOwned: w.checkOwned}
}

// metadata copies the target's labels and annotations to the primary (package configs).
func (w workload) metadata() configs.Metadata {
	return configs.Metadata{IncludePrefix: w.rel.IncludeLabelPrefix}
}

// trackedConfigs reads the configs the target's template references (configs.Copies.Track).
func (w workload) trackedConfigs(ctx context.Context, target *appsv1.Deployment) ([]configs.Tracked, error) {
	return w.copies().Track(ctx, target.Spec.Template.Spec, fmt.Sprintf("%s %s/%s", w.rel.WorkloadKind(), w.rel.Namespace, w.rel.Target))
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

func revisionOf(target *appsv1.Deployment, tracked []configs.Tracked) string {
	return configs.Revision(TemplateHash(target), tracked)
}

// primaryConfigCopies lists the copies the primary uses, read from its template, so that a
// destroy removes them by name: no list permission, and no Secret permission unless the
// workload uses Secrets.
func (w workload) primaryConfigCopies(ctx context.Context) ([]configs.Ref, error) {
	primary, err := w.primary(ctx)
	if err != nil || primary == nil {
		return nil, err
	}
	return w.copies().Used(primary.Spec.Template.Spec), nil
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
	var tracked []configs.Tracked
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
