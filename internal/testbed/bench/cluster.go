package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

// benchLabel marks every namespace the bench creates; its value is the bench's id.
const benchLabel = "canary-release.dev/bench"

type cluster struct {
	id   string
	rest *rest.Config
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

func newCluster(env *localstack.Env, id string) (*cluster, error) {
	cfg, err := env.RESTConfig()
	if err != nil {
		return nil, err
	}
	kube, dyn, err := env.Clients()
	if err != nil {
		return nil, err
	}
	return &cluster{id: id, rest: cfg, kube: kube, dyn: dyn}, nil
}

// namespace is the bench's name for a scenario's namespace, e.g. b134501-rollout-0.
func (c *cluster) namespace(parts ...any) string {
	name := c.id
	for _, p := range parts {
		name += fmt.Sprintf("-%v", p)
	}
	return name
}

func (c *cluster) createNamespaces(ctx context.Context, names ...string) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, 20)
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{benchLabel: c.id}}}
			_, err := c.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				mu.Lock()
				first = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// deleteNamespaces starts the deletion of the given namespaces; it does not wait.
//
// The routing objects go first, as a destroy does: a namespace's deletion takes its pods and
// its routes in no particular order, and routes left to pods already gone would send users
// to nothing (the simulator's invariant log counts every such moment).
func (c *cluster) deleteNamespaces(ctx context.Context, names ...string) {
	for _, name := range names {
		for _, gvr := range routingResources {
			_ = c.dyn.Resource(gvr).Namespace(name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		}
		_ = c.kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	}
}

// routingResources are the objects by which the bench's routers send traffic.
var routingResources = []schema.GroupVersionResource{
	router.TrafficSplitResource, router.ApisixRouteResource, router.RouteTableResource, router.UpstreamGroupResource,
	router.VirtualServiceResource, router.HTTPRouteResource, router.IstioVirtualServiceResource,
	ingressRouteResource,
}

// deleteAll deletes every namespace of this bench and waits until they are gone, so the
// stack is left as it was found.
func (c *cluster) deleteAll(ctx context.Context) error {
	sel := metav1.ListOptions{LabelSelector: benchLabel + "=" + c.id}
	list, err := c.kube.CoreV1().Namespaces().List(ctx, sel)
	if err != nil {
		return err
	}
	for _, ns := range list.Items {
		c.deleteNamespaces(ctx, ns.Name)
	}
	left := len(list.Items)
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.kube.CoreV1().Namespaces().List(ctx, sel)
		if err != nil {
			return false, nil
		}
		left = len(list.Items)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%d namespace(s) labelled %s=%s are still terminating: %w", left, benchLabel, c.id, err)
	}
	return nil
}
