package rollout

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/kube"
)

// upsertOwned creates want, or brings the live object, which the release must own, in line
// with it (kube.UpsertOwned).
func upsertOwned[T metav1.Object](ctx context.Context, w workload, api kube.TypedAPI[T], kind string, want T, merge func(live T) bool) error {
	return kube.UpsertOwned(ctx, api, want, FieldManager, func(live T) error { return w.checkOwned(live, kind) }, merge)
}

// listedOnce is a kube.TypedAPI whose first Get answers with a copy just listed, so that a
// list of several objects replaces their reads; later Gets (a retry after a Conflict) read.
type listedOnce[T any] struct {
	kube.TypedAPI[T]
	listed T
	fresh  bool
}

func (a *listedOnce[T]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	if a.fresh {
		a.fresh = false
		return a.listed, nil
	}
	return a.TypedAPI.Get(ctx, name, opts)
}
