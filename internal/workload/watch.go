package workload

import (
	"context"
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// ListWatch lists and watches one workload by name through api. Its lists are consistent
// reads: the informer's default ("0") may be served from a lagging watch cache, a copy from
// before the scale-up a wait follows, whose old replica count (0) looks ready, so traffic
// would shift before any pod is Ready.
//
// With from, the copy the API server returned to this run's own write or read, the first list
// is that copy: the watch then starts at its resourceVersion, so it delivers every change
// after it, and a wait costs no list. A watch that cannot start there (the version is too old
// to watch from) lists afresh, as the informer does after any watch error.
func ListWatch(api API, name string, from *appsv1.Deployment) *cache.ListWatch {
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	var held atomic.Pointer[appsv1.Deployment]
	if from != nil && from.Name == name && from.ResourceVersion != "" {
		held.Store(from.DeepCopy())
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if d := held.Swap(nil); d != nil {
				return &appsv1.DeploymentList{ListMeta: metav1.ListMeta{ResourceVersion: d.ResourceVersion}, Items: []appsv1.Deployment{*d}}, nil
			}
			o.FieldSelector = byName
			o.ResourceVersion, o.ResourceVersionMatch = "", ""
			return api.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return api.Watch(ctx, o)
		},
	}
}

// Until watches the workload name through lw, handing a copy of it (nil when an event deletes
// it) to until, until until reports done or an error, or ctx ends.
func Until(ctx context.Context, lw *cache.ListWatch, name string, until func(d *appsv1.Deployment) (bool, error)) error {
	_, err := watchtools.UntilWithSync(ctx, lw, &appsv1.Deployment{}, nil, func(ev watch.Event) (bool, error) {
		d, ok := ev.Object.(*appsv1.Deployment)
		if !ok || d.Name != name {
			return false, nil
		}
		if ev.Type == watch.Deleted {
			d = nil
		}
		return until(d)
	})
	return err
}
