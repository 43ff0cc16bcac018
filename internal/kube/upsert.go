package kube

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TypedAPI is the part of a client-go typed client that UpsertOwned uses.
type TypedAPI[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// UpsertOwned creates want, or brings the live object, which owned must accept (the writer
// owns it), in line with it: merge copies what the writer manages from want into live and
// reports whether anything changed (no write otherwise). Conflicts and transient errors are
// retried.
func UpsertOwned[T metav1.Object](ctx context.Context, api TypedAPI[T], want T, fieldManager string, owned func(live T) error, merge func(live T) bool) error {
	return Retry(ctx, func() error {
		live, err := api.Get(ctx, want.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.Create(ctx, want, metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}
		if err != nil {
			return err
		}
		if err := owned(live); err != nil {
			return err
		}
		if !merge(live) {
			return nil
		}
		_, err = api.Update(ctx, live, metav1.UpdateOptions{FieldManager: fieldManager})
		return err
	})
}
