package provider

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/knative"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
	"github.com/canary-release/terraform-provider-canary/internal/workload/statefulset"
)

// A chaos schedule runs on a workload kind (issue 32 item 6): a Deployment with its -primary
// copy, a DaemonSet with its -primary copy, a StatefulSet released in place by its partition
// (no copy: the primary is the revision every pod runs), or a Knative Service whose revisions
// Knative makes (the primary is the pinned revision). chaosKind is what a schedule does
// differently on each.

// primaryEvent is what the witness sees of the primary: the template it serves (the release's
// name for it, and its image) and whether it has Ready pods, or its deletion.
type primaryEvent struct {
	deleted     bool
	spec, image string
	rv          uint64
	ready       bool
}

type chaosKind struct {
	name string
	// createTarget and setTarget make the user's target (target_ref) and change its template,
	// whose pods fail errorRate of requests.
	createTarget, setTarget func(t *testing.T, c *testCluster, ns, image, errorRate string)
	// followPrimary delivers the primary's every change until ctx ends, from its state now.
	followPrimary func(ctx context.Context, c *testCluster, ns string, on func(primaryEvent))
	// sabotages are the out-of-band changes that make sense for the kind; deletePrimary needs
	// a -primary copy, scaleCanaryToZero a canary with a scale of its own.
	sabotages []sabotage
	// faultPaths are the URL paths of the kind's objects that a release reads and writes,
	// which API faults hit besides the router object's; the release only reads those of
	// readOnlyPaths, so their faults hit reads.
	faultPaths, readOnlyPaths []string
	// deletePrimary and scaleCanary do what the sabotages of that name say.
	deletePrimary, scaleCanary func(ctx context.Context, c *testCluster, ns string) error
	// canaryPods selects the canary's pods now and names the Services the simulator sends the
	// canary's traffic to, when the router's canaryServices do not (nil).
	canaryPods func(ctx context.Context, c *testCluster, ns string) (selector string, services []string, err error)
	// restartsUnready: pods made unready survive a rollback (they are not the canary copy's,
	// which the rollback scales away), so the readiness loss ends, as a restart would end it,
	// before the recovery apply: the unready pods are deleted and their controller starts
	// Ready ones.
	restartsUnready bool
	// primaryRuns checks that the primary runs image on Ready pods and the canary serves no
	// pod of another template.
	primaryRuns func(c *testCluster, ns, image string) error
	// settle, when set, waits before the judge until the kind's controller has caught up
	// with the release's last writes.
	settle func(c *testCluster, ns string)
}

// The objects a release only reads: a StatefulSet's pods (listed by revision), the
// ControllerRevision a rollback restores, a Knative Service's Revisions.
const (
	statefulSetPodsPath    = `^/api/v1/namespaces/[^/]+/pods$`
	controllerRevisionPath = `^/apis/apps/v1/namespaces/[^/]+/controllerrevisions/[^/]+$`
	knativeRevisionPath    = `^/apis/serving\.knative\.dev/v1/namespaces/[^/]+/revisions/[^/]+$`
)

// primaryPath is the URL path of the -primary copy of a kind's resource.
func primaryPath(resource string) string {
	return `^/apis/apps/v1/namespaces/[^/]+/` + resource + `/podinfo-primary$`
}

// followAppsPrimary follows the -primary copy of a Deployment or a DaemonSet: its template is
// the release's spec annotation.
func followAppsPrimary[T runtime.Object](open func(c *testCluster, ns string) func(context.Context, metav1.ListOptions) (watch.Interface, error),
	read func(T) (image string, ready bool)) func(context.Context, *testCluster, string, func(primaryEvent)) {
	return func(ctx context.Context, c *testCluster, ns string, on func(primaryEvent)) {
		followNamed(ctx, "podinfo-primary", open(c, ns), func(ev watch.Event) {
			obj, ok := ev.Object.(T)
			if !ok {
				return
			}
			m, _ := metaOf(obj)
			image, ready := read(obj)
			on(primaryEvent{deleted: ev.Type == watch.Deleted, spec: m.GetAnnotations()[rollout.AnnotationPrimarySpec], image: image, rv: resourceVersion(m), ready: ready})
		})
	}
}

var chaosDeployment = chaosKind{
	name: "Deployment",
	createTarget: func(t *testing.T, c *testCluster, ns, image, errorRate string) {
		c.createDeployment(t, podinfoDeployment(ns, image, map[string]string{meshsim.AnnotationErrorRate: errorRate}))
	},
	setTarget: func(t *testing.T, c *testCluster, ns, image, errorRate string) {
		c.setTemplate(t, ns, "podinfo", image, map[string]string{meshsim.AnnotationErrorRate: errorRate})
	},
	followPrimary: followAppsPrimary(func(c *testCluster, ns string) func(context.Context, metav1.ListOptions) (watch.Interface, error) {
		return c.kube.AppsV1().Deployments(ns).Watch
	}, func(d *appsv1.Deployment) (string, bool) {
		return d.Spec.Template.Spec.Containers[0].Image, d.Status.ReadyReplicas > 0
	}),
	sabotages:  []sabotage{deleteStateConfigMap, deletePrimary, scaleCanaryToZero, makeCanaryUnready},
	faultPaths: []string{scalePath, stateCMPath, primaryPath("deployments")},
	deletePrimary: func(ctx context.Context, c *testCluster, ns string) error {
		return c.kube.AppsV1().Deployments(ns).Delete(ctx, "podinfo-primary", metav1.DeleteOptions{})
	},
	scaleCanary: func(ctx context.Context, c *testCluster, ns string) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			scale, err := c.kube.AppsV1().Deployments(ns).GetScale(ctx, "podinfo", metav1.GetOptions{})
			if err != nil {
				return err
			}
			scale.Spec.Replicas = 0
			_, err = c.kube.AppsV1().Deployments(ns).UpdateScale(ctx, "podinfo", scale, metav1.UpdateOptions{})
			return err
		})
	},
	canaryPods: appPods,
	primaryRuns: func(c *testCluster, ns, image string) error {
		if err := c.checkImage(ns, "podinfo-primary", image)(nil); err != nil {
			return err
		}
		return c.checkReady(ns, "podinfo-primary")(nil)
	},
}

// appPods are the pods of the canary copy podinfo, whose traffic the router's canary
// Services carry.
func appPods(context.Context, *testCluster, string) (string, []string, error) {
	return "app=podinfo", nil, nil
}

// chaosDaemonSet: the target DaemonSet is the canary, which runs pods only during an analysis
// (a node selector no node matches empties it otherwise); podinfo-primary serves.
var chaosDaemonSet = chaosKind{
	name: "DaemonSet",
	createTarget: func(t *testing.T, c *testCluster, ns, image, errorRate string) {
		ds := podinfoDaemonSetOn(ns, image)
		ds.Spec.Template.Annotations = map[string]string{meshsim.AnnotationErrorRate: errorRate}
		c.createDaemonSet(t, ds)
	},
	setTarget: func(t *testing.T, c *testCluster, ns, image, errorRate string) {
		c.setDaemonSetTemplate(t, ns, image, map[string]string{meshsim.AnnotationErrorRate: errorRate})
	},
	followPrimary: followAppsPrimary(func(c *testCluster, ns string) func(context.Context, metav1.ListOptions) (watch.Interface, error) {
		return c.kube.AppsV1().DaemonSets(ns).Watch
	}, func(d *appsv1.DaemonSet) (string, bool) {
		return d.Spec.Template.Spec.Containers[0].Image, d.Status.NumberReady > 0
	}),
	sabotages:  []sabotage{deleteStateConfigMap, deletePrimary, makeCanaryUnready},
	faultPaths: []string{`^/apis/apps/v1/namespaces/[^/]+/daemonsets/podinfo$`, stateCMPath, primaryPath("daemonsets")},
	deletePrimary: func(ctx context.Context, c *testCluster, ns string) error {
		return c.kube.AppsV1().DaemonSets(ns).Delete(ctx, "podinfo-primary", metav1.DeleteOptions{})
	},
	canaryPods:      appPods,
	restartsUnready: true,
	primaryRuns: func(c *testCluster, ns, image string) error {
		if err := c.checkPrimaryDaemonSet(ns, image)(nil); err != nil {
			return err
		}
		return c.checkCanaryDaemonSetEmpty(ns)(nil)
	},
}

// chaosStatefulSet: StatefulSet podinfo released in place; the primary is the controller's
// current revision, which every pod runs once a rollout or a rollback is done.
var chaosStatefulSet = chaosKind{
	name: "StatefulSet",
	createTarget: func(t *testing.T, c *testCluster, ns, image, errorRate string) {
		c.createStatefulSet(t, ns, "podinfo", image, map[string]string{meshsim.AnnotationErrorRate: errorRate})
	},
	setTarget: func(t *testing.T, c *testCluster, ns, image, errorRate string) {
		c.setStatefulSet(t, ns, "podinfo", image, errorRate)
	},
	followPrimary: func(ctx context.Context, c *testCluster, ns string, on func(primaryEvent)) {
		current := ""
		var image string
		followNamed(ctx, "podinfo", c.kube.AppsV1().StatefulSets(ns).Watch, func(ev watch.Event) {
			set, ok := ev.Object.(*appsv1.StatefulSet)
			if !ok {
				return
			}
			rev := set.Status.CurrentRevision
			if rev == "" {
				rev = set.Status.UpdateRevision
			}
			if rev != current {
				current = rev
				var err error
				if image, err = c.revisionImage(ctx, ns, rev); err != nil {
					image = "unknown: " + err.Error()
				}
			}
			on(primaryEvent{deleted: ev.Type == watch.Deleted, spec: rev, image: image, rv: resourceVersion(set), ready: set.Status.ReadyReplicas > 0})
		})
	},
	sabotages: []sabotage{deleteStateConfigMap, makeCanaryUnready},
	// The set (its partition and, for a rollback, its template), the pods whose revisions it
	// counts, and the ControllerRevision a rollback restores.
	faultPaths:    []string{statefulSetPodsPath, stateCMPath, controllerRevisionPath},
	readOnlyPaths: []string{statefulSetPodsPath, controllerRevisionPath},
	// The pods on the update revision, behind the set's Service with the others.
	canaryPods: func(ctx context.Context, c *testCluster, ns string) (string, []string, error) {
		set, err := c.kube.AppsV1().StatefulSets(ns).Get(ctx, "podinfo", metav1.GetOptions{})
		if err != nil {
			return "", nil, err
		}
		return labels.Set{"app": "podinfo", appsv1.ControllerRevisionHashLabelKey: set.Status.UpdateRevision}.String(), []string{}, nil
	},
	restartsUnready: true,
	primaryRuns: func(c *testCluster, ns, image string) error {
		return c.checkStatefulSetNamed(ns, "podinfo", image)(nil)
	},
	// The set's status (its revisions and updated replicas, which the live split is read from)
	// follows its pods a moment late: a release that waited for every pod to run the promoted
	// revision may end before the controller says so.
	settle: func(c *testCluster, ns string) {
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			set, err := c.kube.AppsV1().StatefulSets(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
			if err == nil && set.Status.ObservedGeneration >= set.Generation && set.Status.CurrentRevision == set.Status.UpdateRevision &&
				set.Status.UpdatedReplicas == statefulset.Replicas(set) {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	},
}

// statefulSetLiveSplit is the StatefulSet's live split as its driver reads it (GetRoutes): the
// share of its pods on the update revision while that is not the current one.
func statefulSetLiveSplit(u *unstructured.Unstructured) (int64, int64, error) {
	var set appsv1.StatefulSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &set); err != nil {
		return 0, 0, err
	}
	current, update := set.Status.CurrentRevision, set.Status.UpdateRevision
	if update == "" || current == "" || update == current {
		return 100, 0, nil
	}
	share := int64(set.Status.UpdatedReplicas) * 100 / int64(max(statefulset.Replicas(&set), 1))
	return 100 - share, share, nil
}

// inPlaceAnalysis is killAnalysis for a set of 3 pods: steps of 1 and 2 pods (33% and 66%),
// and no paced promotion (the promotion moves every pod at once).
func inPlaceAnalysis(analysis string) string {
	out := strings.NewReplacer(
		"max_weight            = 30", "max_weight            = 67",
		"step_weight           = 10", "step_weight           = 34",
		"step_weight_promotion = 10\n", "",
	).Replace(analysis)
	if strings.Contains(out, "step_weight_promotion") || !strings.Contains(out, "= 67") {
		panic("inPlaceAnalysis: killAnalysis changed; update the replacements")
	}
	return out
}

// chaosKnative: the user's Knative Service, whose revisions the simulator makes as Knative
// would; the primary is the revision the release pins, the canary the latest one. The
// router case's hooks make and change the Service.
func chaosKnative(rc routerCase) chaosKind {
	errorRate := func(rate string) map[string]string { return map[string]string{meshsim.AnnotationErrorRate: rate} }
	services := func(c *testCluster, ns string) (*unstructured.Unstructured, error) {
		return c.dyn.Resource(meshsim.KnativeServiceGVR).Namespace(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
	}
	return chaosKind{
		name: "Knative Service",
		createTarget: func(t *testing.T, c *testCluster, ns, image, rate string) {
			rc.target.create(t, c, ns, image, errorRate(rate))
		},
		setTarget: func(t *testing.T, c *testCluster, ns, image, rate string) {
			rc.target.set(t, c, ns, image, errorRate(rate))
		},
		followPrimary: func(ctx context.Context, c *testCluster, ns string, on func(primaryEvent)) {
			revisions := c.dyn.Resource(meshsim.KnativeRevisionGVR).Namespace(ns)
			followNamed(ctx, "podinfo", c.dyn.Resource(meshsim.KnativeServiceGVR).Namespace(ns).Watch, func(ev watch.Event) {
				svc, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					return
				}
				primary := svc.GetAnnotations()[knative.AnnotationPrimaryRevision]
				image := ""
				if rev, err := revisions.Get(ctx, primary, metav1.GetOptions{}); err == nil {
					containers, _, _ := unstructured.NestedSlice(rev.Object, "spec", "containers")
					if len(containers) > 0 {
						image, _ = containers[0].(map[string]any)["image"].(string)
					}
				}
				on(primaryEvent{deleted: ev.Type == watch.Deleted, spec: primary, image: image, rv: resourceVersion(svc), ready: true})
			})
		},
		sabotages: []sabotage{deleteStateConfigMap, makeCanaryUnready},
		// The Service (its traffic and pins) and the Revisions whose readiness gates the split.
		faultPaths:    []string{knativeRevisionPath, stateCMPath},
		readOnlyPaths: []string{knativeRevisionPath},
		// The pods of the pinned canary revision (or the latest one, before the pin), which the
		// simulator reaches through the revision's private Service.
		canaryPods: func(ctx context.Context, c *testCluster, ns string) (string, []string, error) {
			svc, err := services(c, ns)
			if err != nil {
				return "", nil, err
			}
			rev := svc.GetAnnotations()[knative.AnnotationCanaryRevision]
			if rev == "" {
				rev, _, _ = unstructured.NestedString(svc.Object, "status", "latestCreatedRevisionName")
			}
			return labels.Set{knative.LabelRevision: rev}.String(), []string{rev + "-private"}, nil
		},
		restartsUnready: true,
		primaryRuns: func(c *testCluster, ns, image string) error {
			return rc.primaryRuns(c, ns, image)(nil)
		},
	}
}

// kindRouters are the chaos entries of the kinds other than Deployment (issue 32 item 6).
func kindRouters() []chaosRouter {
	knativeService := chaosKnative(knativeRouter)
	return []chaosRouter{
		{
			// Weighted, on OSM's TrafficSplit: the target DaemonSet is the user's.
			name: "daemonset", kind: &chaosDaemonSet, routes: trafficSplitObject, targetRef: true,
			prepare: func(t *testing.T, c *testCluster, ns string) {
				chaosDaemonSet.createTarget(t, c, ns, chaosFirstImage, "0")
			},
			resource: func(_ *testCluster, ns, image, _, analysis string) string {
				return releaseConfig(ns, daemonSetTargetRef(image), analysis, "")
			},
			primaryServices: primarySide, canaryServices: canarySide,
		},
		{
			// No router object: the set's pods are the split, its own Service sends to them all.
			name: "statefulset", kind: &chaosStatefulSet, targetRef: true, inPlaceSteps: []int{33, 66},
			routes: routerObject{gvr: appsv1.SchemeGroupVersion.WithResource("statefulsets"), name: "podinfo", weights: statefulSetLiveSplit},
			prepare: func(t *testing.T, c *testCluster, ns string) {
				chaosStatefulSet.createTarget(t, c, ns, chaosFirstImage, "0")
			},
			resource: func(_ *testCluster, ns, image, _, analysis string) string {
				return statefulSetRelease(ns, "podinfo", image, inPlaceAnalysis(analysis), 60)
			},
		},
		chaosFromCaseOn(func(string) routerCase { return knativeRouter }, &knativeService),
	}
}
