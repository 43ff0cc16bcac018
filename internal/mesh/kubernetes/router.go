package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// kubernetesRouter is Flagger's kubernetes provider: no mesh and no router object. The apex
// Service's selector is the route: it selects the primary's pods, or the canary's for a
// blue/green switch, by copying the selector of the -primary or -canary Service, which the
// engine writes. A partial split is a replica ratio (ratio.go): the apex then selects both
// sides by router.LabelApex.
type kubernetesRouter struct {
	kube kubernetes.Interface
	s    router.Spec
	can  router.Capabilities
	// written is the split the last successful SetRoutes made (nil before one): a replica
	// ratio rounds the canary's share to whole pods.
	written *router.Weights
	// sizedBeside is the primary's Ready pods the last replica ratio was sized for.
	sizedBeside int32
}

// newRouter is the kubernetes router; can says what it refuses besides partial splits.
func newRouter(c router.Clients, s router.Spec, can router.Capabilities) router.Router {
	return &kubernetesRouter{kube: c.Kube, s: s, can: can}
}

func (r *kubernetesRouter) ref() string { return "Service " + r.s.Namespace + "/" + r.s.Apex }

// Reconcile has nothing to write: the engine creates the three Services.
func (r *kubernetesRouter) Reconcile(context.Context) error { return nil }

// SetRoutes points the apex Service at the side w sends everything to, and verifies the
// selector the API server holds.
func (r *kubernetesRouter) SetRoutes(ctx context.Context, w router.Weights) error {
	r.written, r.sizedBeside = nil, 0
	if err := router.ValidateWeights(w); err != nil {
		return err
	}
	if err := r.can.Check("kubernetes", r.s, w); err != nil {
		return fmt.Errorf("%s: %w", r.ref(), err)
	}
	if w.Primary != 100 && w.Canary != 100 {
		return r.setRatio(ctx, w)
	}
	side := r.s.Apex + "-primary"
	if w.Canary == 100 {
		side = r.s.Apex + "-canary"
	}
	if err := r.selectLike(ctx, side, router.SplitText(w)); err != nil {
		return err
	}
	r.written = &w
	return nil
}

// Written is the split the last SetRoutes made: asked, unless a replica ratio rounded it.
func (r *kubernetesRouter) Written(asked router.Weights) router.Weights {
	if r.written == nil || r.written.Matched || asked.Matched {
		return asked
	}
	w := asked
	w.Primary, w.Canary = r.written.Primary, r.written.Canary
	return w
}

// SizedBeside is the primary's Ready pods the last replica ratio was sized for (router.Sizing).
func (r *kubernetesRouter) SizedBeside() int32 { return r.sizedBeside }

// selectLike gives the apex Service the selector of the Service side, and verifies the
// selector the API server holds.
func (r *kubernetesRouter) selectLike(ctx context.Context, side, split string) error {
	api := r.kube.CoreV1().Services(r.s.Namespace)
	return r.writeSelector(ctx, "the selector of "+side+" ("+split+")", func() (map[string]string, error) {
		from, err := api.Get(ctx, side, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading Service %s/%s: %w", r.s.Namespace, side, err)
		}
		return from.Spec.Selector, nil
	})
}

// writeSelector sets the apex Service's selector to what selecting returns (read again on
// each retry), and verifies the selector the API server holds; what names it in errors.
func (r *kubernetesRouter) writeSelector(ctx context.Context, what string, selecting func() (map[string]string, error)) error {
	api := r.kube.CoreV1().Services(r.s.Namespace)
	var held *corev1.Service
	var want map[string]string
	err := router.WithRetry(ctx, func() error {
		var err error
		if want, err = selecting(); err != nil {
			return err
		}
		apex, err := api.Get(ctx, r.s.Apex, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading %s: %w", r.ref(), err)
		}
		if maps.Equal(apex.Spec.Selector, want) {
			held = apex
			return nil
		}
		apex.Spec.Selector = maps.Clone(want)
		held, err = api.Update(ctx, apex, metav1.UpdateOptions{FieldManager: router.FieldManager})
		if err != nil {
			return fmt.Errorf("updating %s: %w", r.ref(), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// held is the apex as the API server answered the write (or as read, unchanged): it must
	// select what the side it was pointed at selects.
	if !maps.Equal(held.Spec.Selector, want) {
		return fmt.Errorf("%s: wrote %s but the API server holds %v", r.ref(), what, held.Spec.Selector)
	}
	return nil
}

// GetRoutes tells which side the apex Service selects.
func (r *kubernetesRouter) GetRoutes(ctx context.Context) (router.Weights, error) {
	var apex *corev1.Service
	err := router.WithRetry(ctx, func() (err error) {
		apex, err = r.kube.CoreV1().Services(r.s.Namespace).Get(ctx, r.s.Apex, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return router.Weights{}, &router.NotFoundError{Ref: r.ref()}
	}
	if err != nil {
		return router.Weights{}, fmt.Errorf("reading %s: %w", r.ref(), err)
	}
	return r.weightsOf(ctx, apex)
}

// weightsOf compares the apex's selector with those of the -primary and -canary Services.
func (r *kubernetesRouter) weightsOf(ctx context.Context, apex *corev1.Service) (router.Weights, error) {
	if maps.Equal(apex.Spec.Selector, map[string]string{router.LabelApex: r.s.Apex}) {
		return r.ratioWeights(ctx)
	}
	for _, side := range []struct {
		suffix string
		w      router.Weights
	}{{"-primary", router.Weights{Primary: 100}}, {"-canary", router.Weights{Canary: 100}}} {
		var svc *corev1.Service
		err := router.WithRetry(ctx, func() (err error) {
			svc, err = r.kube.CoreV1().Services(r.s.Namespace).Get(ctx, r.s.Apex+side.suffix, metav1.GetOptions{})
			return err
		})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return router.Weights{}, fmt.Errorf("reading Service %s/%s: %w", r.s.Namespace, r.s.Apex+side.suffix, err)
		}
		if len(svc.Spec.Selector) > 0 && maps.Equal(apex.Spec.Selector, svc.Spec.Selector) {
			return side.w, nil
		}
	}
	return router.Weights{}, errors.New(r.ref() + " selects neither the primary's nor the canary's pods")
}

// Drift has nothing to compare: the engine reconciles the Services.
func (r *kubernetesRouter) Drift(context.Context) ([]string, error) { return nil, nil }

// Finalize has nothing to delete; the engine points the apex back at the serving pods.
func (r *kubernetesRouter) Finalize(context.Context) error { return nil }

func (r *kubernetesRouter) Warnings(context.Context) []string { return nil }
