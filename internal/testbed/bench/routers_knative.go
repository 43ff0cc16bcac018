package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/knative"
)

// The knative router releases the user's Knative Service, not a manifest: the bench creates
// the Service, gives it the new image itself (as the user's own apply would) and waits for
// the simulator's Knative to make that revision Ready, so the measured apply holds no pod wait
// (canary_wait_s and primary_wait_s are 0: a promotion pins a revision, it starts no pods).

// knativeTarget is the routerSetup.target of knative.
var knativeTarget = &targetSetup{
	ref:     `{ api_version = "serving.knative.dev/v1", kind = "Service", name = "podinfo" }`,
	create:  createKnativeService,
	release: releaseKnativeImage,
	remove: func(ctx context.Context, cl *cluster, ns string) {
		_ = cl.dyn.Resource(knative.ServiceResource).Namespace(ns).Delete(ctx, "podinfo", metav1.DeleteOptions{})
	},
	promoted: knativePromoted,
}

func knativeTemplate(image string) map[string]any {
	return map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
		"name": "podinfo", "image": image, "ports": []any{map[string]any{"containerPort": int64(9898)}},
	}}}}
}

func createKnativeService(ctx context.Context, cl *cluster, ns, image string) error {
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "serving.knative.dev/v1", "kind": "Service",
		"metadata": map[string]any{"name": "podinfo", "namespace": ns},
		"spec":     map[string]any{"template": knativeTemplate(image)},
	}}
	if _, err := cl.dyn.Resource(knative.ServiceResource).Namespace(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	return waitKnativeReady(ctx, cl, ns)
}

// releaseKnativeImage gives the Service's template the image and waits for its revision.
func releaseKnativeImage(ctx context.Context, cl *cluster, ns, image string) error {
	api := cl.dyn.Resource(knative.ServiceResource).Namespace(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc, err := api.Get(ctx, "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedMap(svc.Object, knativeTemplate(image), "spec", "template"); err != nil {
			return err
		}
		_, err = api.Update(ctx, svc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	return waitKnativeReady(ctx, cl, ns)
}

// waitKnativeReady waits until Knative has observed the Service's spec and its latest revision
// is Ready.
func waitKnativeReady(ctx context.Context, cl *cluster, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		svc, err := cl.dyn.Resource(knative.ServiceResource).Namespace(ns).Get(ctx, "podinfo", metav1.GetOptions{})
		if err == nil {
			seen, _, _ := unstructured.NestedInt64(svc.Object, "status", "observedGeneration")
			created, _, _ := unstructured.NestedString(svc.Object, "status", "latestCreatedRevisionName")
			ready, _, _ := unstructured.NestedString(svc.Object, "status", "latestReadyRevisionName")
			if seen >= svc.GetGeneration() && created != "" && created == ready {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("knative Service %s/podinfo: its latest revision is not Ready: %w", ns, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// knativePromoted: the release pinned the latest revision as the primary.
func knativePromoted(ctx context.Context, cl *cluster, ns string) error {
	svc, err := cl.dyn.Resource(knative.ServiceResource).Namespace(ns).Get(ctx, "podinfo", metav1.GetOptions{})
	if err != nil {
		return err
	}
	latest, _, _ := unstructured.NestedString(svc.Object, "status", "latestCreatedRevisionName")
	if primary := svc.GetAnnotations()[knative.AnnotationPrimaryRevision]; primary != latest {
		return fmt.Errorf("knative Service %s/podinfo: the primary revision is %q, not the latest %q", ns, primary, latest)
	}
	return nil
}
