package rollout

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// typedAPI is the part of a client-go typed client that upsertOwned uses.
type typedAPI[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// upsertOwned creates want, or brings the live object, which the release must own, in line
// with it: merge copies what the release manages from want into live and reports whether
// anything changed (no write otherwise). Conflicts and transient errors are retried.
func upsertOwned[T metav1.Object](ctx context.Context, w workload, api typedAPI[T], kind string, want T, merge func(live T) bool) error {
	return onAPIError(ctx, func() error {
		live, err := api.Get(ctx, want.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.Create(ctx, want, metav1.CreateOptions{FieldManager: FieldManager})
			return err
		}
		if err != nil {
			return err
		}
		if err := w.checkOwned(live, kind); err != nil {
			return err
		}
		if !merge(live) {
			return nil
		}
		_, err = api.Update(ctx, live, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
}

// listedOnce is a typedAPI whose first Get answers with a copy just listed, so that a list
// of several objects replaces their reads; later Gets (a retry after a Conflict) read.
type listedOnce[T any] struct {
	typedAPI[T]
	listed T
	fresh  bool
}

func (a *listedOnce[T]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	if a.fresh {
		a.fresh = false
		return a.listed, nil
	}
	return a.typedAPI.Get(ctx, name, opts)
}
