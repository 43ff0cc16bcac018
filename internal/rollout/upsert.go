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
	return upsertOwnedFrom(ctx, w, api, kind, want, nil, merge)
}

// upsertOwnedFrom is upsertOwned starting from known, the live object as just listed (nil:
// read it). A write built on it that the API server refuses as a Conflict reads afresh.
func upsertOwnedFrom[T metav1.Object](ctx context.Context, w workload, api typedAPI[T], kind string, want T, known *T, merge func(live T) bool) error {
	return onAPIError(ctx, func() error {
		var live T
		var err error
		if known != nil {
			live, known = *known, nil
		} else {
			live, err = api.Get(ctx, want.GetName(), metav1.GetOptions{})
		}
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
