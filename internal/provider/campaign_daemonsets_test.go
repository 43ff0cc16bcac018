package provider

// DaemonSets in the campaign: about one schedule in six releases a DaemonSet (target_ref.kind
// or the manifest's kind) through the DaemonSet driver. The fake API server serves the
// daemonsets resource over the same store as Deployments, by the driver's own mapping: a
// DaemonSet is kept as its Deployment-shaped view on campaignNodes nodes (none when the
// engine empties it by NodeSelectorEmptied), so the pod simulator, the schedule's faults and
// the judge treat its pods as they treat a Deployment's, and every read of it is answered as a
// DaemonSet with the status the DaemonSet controller would write (desired, current, updated,
// ready and available pods at its observed generation).

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/workload/daemonset"
)

// daemonSetShare is the share of schedules that release a DaemonSet.
const daemonSetShare = 1.0 / 6

// campaignNodes is how many nodes a DaemonSet of the campaign runs on: one pod each.
const campaignNodes = int32(2)

var daemonSetsResource = appsv1.SchemeGroupVersion.WithResource("daemonsets")

// drawDaemonSet makes about daemonSetShare of the schedules release a DaemonSet, keyed apart
// from the schedule's stream. A replica ratio has no DaemonSet (its pods are its nodes, so the
// provider refuses step weights without a mesh), nor is one drawn there.
//
// Only by target_ref: the store this fake keeps a DaemonSet in also answers for Deployments, so
// a manifest release's plan finds "a Deployment podinfo-primary" and refuses the kind change
// (no cluster serves one object as both kinds). Keeping the kinds apart is left to do.
func drawDaemonSet(s *campaignSchedule) {
	if s.shape.ratioRouted() || s.shape.knative || keyedCoin(s.seed, "daemonset") >= daemonSetShare {
		return
	}
	s.shape.daemonSet, s.shape.manifest = true, false
}

// daemonSetConfig turns a configuration's Deployment into the DaemonSet it stands for.
func (s releaseShape) daemonSetConfig(config map[string]any, rev revisionSpec) {
	if !s.daemonSet {
		return
	}
	if s.manifest {
		manifest, _ := json.Marshal(daemonset.Of(s.workload(rev)))
		config["manifest"] = string(manifest)
		return
	}
	config["target_ref"] = map[string]any{"name": campaignTarget, "kind": daemonset.Kind}
}

// storedView is how the fake API server keeps a DaemonSet: its view, on campaignNodes nodes.
func storedView(ds *appsv1.DaemonSet) *appsv1.Deployment {
	v := daemonset.View(ds)
	v.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	if *v.Spec.Replicas > 0 {
		nodes := campaignNodes
		v.Spec.Replicas = &nodes
	}
	return v
}

// daemonSetOf answers a read of a stored view as the DaemonSet, with its controller's status.
func daemonSetOf(obj runtime.Object) (runtime.Object, error) {
	v, ok := obj.(*appsv1.Deployment)
	if !ok {
		return obj, nil
	}
	ds := daemonset.Of(v)
	st := v.Status
	ds.Status = appsv1.DaemonSetStatus{
		ObservedGeneration: st.ObservedGeneration, DesiredNumberScheduled: desiredReplicas(v), CurrentNumberScheduled: st.Replicas,
		UpdatedNumberScheduled: st.UpdatedReplicas, NumberReady: st.ReadyReplicas, NumberAvailable: st.AvailableReplicas,
	}
	return ds, nil
}

// serveDaemonSet answers a request on the daemonsets resource from the store of views.
func (s *fakeAPIServer) serveDaemonSet(action k8stesting.Action, by string) (runtime.Object, error) {
	ns := action.GetNamespace()
	answer := func(obj runtime.Object, err error) (runtime.Object, error) {
		if err != nil || obj == nil {
			return obj, err
		}
		return daemonSetOf(obj)
	}
	switch a := action.(type) {
	case k8stesting.GetActionImpl:
		return answer(s.get(deploymentsResource, ns, a.GetName()))
	case k8stesting.ListActionImpl:
		obj, err := s.list(deploymentsResource, appsv1.SchemeGroupVersion.WithKind("Deployment"), ns)
		if err != nil {
			return nil, err
		}
		views, ok := obj.(*appsv1.DeploymentList)
		if !ok {
			return nil, fmt.Errorf("the store of DaemonSets listed a %T", obj)
		}
		out := &appsv1.DaemonSetList{ListMeta: views.ListMeta}
		for i := range views.Items {
			ds, _ := daemonSetOf(&views.Items[i])
			if typed, isDaemonSet := ds.(*appsv1.DaemonSet); isDaemonSet {
				out.Items = append(out.Items, *typed)
			}
		}
		return out, nil
	case k8stesting.CreateActionImpl:
		ds, ok := a.GetObject().(*appsv1.DaemonSet)
		if !ok {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("a %T is no DaemonSet", a.GetObject()))
		}
		return answer(s.create(deploymentsResource, ns, storedView(ds), len(a.CreateOptions.DryRun) > 0, by))
	case k8stesting.UpdateActionImpl:
		ds, ok := a.GetObject().(*appsv1.DaemonSet)
		if !ok || a.GetSubresource() != "" {
			return nil, apierrors.NewMethodNotSupported(daemonSetsResource.GroupResource(), "update "+a.GetSubresource())
		}
		return answer(s.update(deploymentsResource, ns, storedView(ds), len(a.UpdateOptions.DryRun) > 0, by))
	case k8stesting.DeleteActionImpl:
		return nil, s.delete(deploymentsResource, ns, a.GetName(), a.DeleteOptions.Preconditions, by)
	case k8stesting.PatchActionImpl:
		var ds appsv1.DaemonSet
		if err := json.Unmarshal(a.GetPatch(), &ds); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		body, err := json.Marshal(storedView(&ds))
		if err != nil {
			return nil, err
		}
		return answer(s.patch(deploymentsResource, ns, a.GetName(), a.GetPatchType(), body, len(a.PatchOptions.DryRun) > 0, by))
	}
	return nil, apierrors.NewMethodNotSupported(daemonSetsResource.GroupResource(), action.GetVerb())
}

// watchDaemonSets follows the store of views, each event's object as its DaemonSet.
func (s *fakeAPIServer) watchDaemonSets(ns, from string) (watch.Interface, error) {
	w, err := s.watch(deploymentsResource, ns, from)
	if err != nil {
		return nil, err
	}
	return newShiftedWatch(w, func(obj runtime.Object) runtime.Object {
		ds, _ := daemonSetOf(obj)
		return ds
	}), nil
}
