package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/canary-release/terraform-provider-canary/internal/configs"
	"github.com/canary-release/terraform-provider-canary/internal/kube"
	"github.com/canary-release/terraform-provider-canary/internal/rollout/promotion"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// FieldManager is the server-side-apply field manager of everything the release writes.
const FieldManager = "terraform-provider-canary"

// AnnotationPrimarySpec on the primary Deployment is the template hash of the target template
// it was copied from. It is written in the same update as the template, so it is the fallback
// truth of what was promoted when the state ConfigMap is lost.
const AnnotationPrimarySpec = "canary-release.dev/primary-spec"

// AnnotationConfigRevision on the primary's pod template is the promoted revision, set when the
// target tracks ConfigMaps or Secrets, so that a promotion of a config change alone rolls the
// primary's pods onto the promoted values (Flagger does the same).
const AnnotationConfigRevision = "canary-release.dev/config-revision"

// workload manages the target, its -primary copy and the three Services.
type workload struct {
	kube kubernetes.Interface
	rel  Release
	// dyn reads and writes the custom resources a workload may have (a KEDA ScaledObject).
	dyn dynamic.Interface
}

// releaseSelector selects what carries this release's label, which is what checkOwned asks
// of an object the release manages.
func (w workload) releaseSelector() string {
	return labels.SelectorFromSet(labels.Set{router.LabelRelease: w.rel.Name}).String()
}

func (w workload) ownedLabels() map[string]string {
	return map[string]string{router.LabelManagedBy: router.ManagedByValue, router.LabelRelease: w.rel.Name}
}

// target reads the target Deployment.
func (w workload) target(ctx context.Context) (*appsv1.Deployment, error) {
	d, err := w.workloads().Get(ctx, w.rel.Target, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, &targetNotFoundError{kind: w.rel.WorkloadKind(), namespace: w.rel.Namespace, name: w.rel.Target}
	}
	return d, err
}

// targetNotFoundError is a target workload that does not exist.
type targetNotFoundError struct{ kind, namespace, name string }

func (e *targetNotFoundError) Error() string {
	return fmt.Sprintf("target %s %s/%s not found", e.kind, e.namespace, e.name)
}

// applyManifest server-side-applies the release-owned Deployment. The engine owns its
// replicas, so they are set to what the engine wants rather than what the manifest says.
func (w workload) applyManifest(ctx context.Context, replicas int32) (*appsv1.Deployment, error) {
	return w.patchManifest(ctx, replicas, nil)
}

// manifestTemplate is the revision the manifest gives the target once applied, with the API
// server's defaults, found by a dry run that changes nothing.
func (w workload) manifestTemplate(ctx context.Context) (string, error) {
	d, err := w.patchManifest(ctx, 0, []string{metav1.DryRunAll})
	if err != nil {
		return "", err
	}
	return w.revision(ctx, d)
}

func (w workload) patchManifest(ctx context.Context, replicas int32, dryRun []string) (*appsv1.Deployment, error) {
	m := w.rel.Manifest.DeepCopy()
	m.APIVersion, m.Kind = "apps/v1", "Deployment"
	m.Namespace, m.Name = w.rel.Namespace, w.rel.Target
	m.Labels = mergeLabels(m.Labels, w.ownedLabels())
	m.Spec.Replicas = &replicas
	w.labelForRatio(&m.Spec.Template)
	body, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	force := true
	d, err := w.workloads().Patch(ctx, w.rel.Target, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: FieldManager, Force: &force, DryRun: dryRun})
	if err != nil {
		return nil, fmt.Errorf("applying manifest %s %s/%s: %w", w.rel.WorkloadKind(), w.rel.Namespace, w.rel.Target, err)
	}
	return d, nil
}

// TemplateHash identifies a pod template; a rollout runs when it differs from the last promoted one.
// The label that a mesh-less weighted release gives both sides' pods (router.LabelApex) is
// the release's, not the template's: it is left out.
func TemplateHash(d *appsv1.Deployment) string {
	t := d.Spec.Template
	if _, ok := t.Labels[router.LabelApex]; ok {
		t = withoutApexLabel(t)
	}
	b, _ := json.Marshal(t)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// primaryFrom builds the primary from the target's template, on the primary's
// copies of the tracked configs; revision is what it runs.
func (w workload) primaryFrom(target *appsv1.Deployment, replicas int32, revision string, tracked []configs.Tracked) (*appsv1.Deployment, error) {
	key, value, err := kinds.Selector(target)
	if err != nil {
		return nil, err
	}
	primaryValue := value + "-primary"
	tmpl := *target.Spec.Template.DeepCopy()
	tmpl.Labels = maps.Clone(tmpl.Labels)
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	tmpl.Labels[key] = primaryValue
	w.labelForRatio(&tmpl)
	copiedLabels, copiedAnnotations := w.metadata().CopiedFrom(target.Labels, key), w.metadata().CopiedFrom(target.Annotations, key)
	tmpl = configs.WithCopied(tmpl, copiedLabels, copiedAnnotations)
	configs.UsePrimary(&tmpl.Spec, tracked)
	if revision != TemplateHash(target) {
		// A promotion that changes only a config must still restart the primary: pods read
		// env, envFrom and subPath values once, at start.
		tmpl.Annotations = maps.Clone(tmpl.Annotations)
		if tmpl.Annotations == nil {
			tmpl.Annotations = map[string]string{}
		}
		tmpl.Annotations[AnnotationConfigRevision] = revision
	}
	meta := metav1.ObjectMeta{
		Name:        w.rel.PrimaryName(),
		Namespace:   w.rel.Namespace,
		Labels:      mergeLabels(copiedLabels, mergeLabels(map[string]string{key: primaryValue}, w.ownedLabels())),
		Annotations: w.withOwner(w.withRouter(mergeLabels(copiedAnnotations, map[string]string{AnnotationPrimarySpec: revision}))),
	}
	return kinds.Primary(target, meta, replicas, map[string]string{key: primaryValue}, tmpl), nil
}

// ensurePrimary creates the primary, or adopts and updates one this release owns. known, when
// set, is the primary as the caller last read or wrote it: the first update starts from it
// instead of a fresh read, and its resourceVersion makes the API server refuse it (Conflict,
// then read again) if anyone changed the primary since. It returns the primary as the API
// server then holds it, nil when that is not known.
func (w workload) ensurePrimary(ctx context.Context, target *appsv1.Deployment, replicas int32, proof promotion.Proof, known *appsv1.Deployment) (*appsv1.Deployment, error) {
	tracked, err := w.trackedConfigs(ctx, target)
	if err != nil {
		return nil, err
	}
	revision := proof.Revision()
	if now := revisionOf(target, tracked); !proof.Admits(now) {
		// Only what was analysed (or promoted before) may reach the primary.
		return known, fmt.Errorf("the primary is not updated: %s %s/%s now has revision %s (its template and the ConfigMaps and Secrets it uses), "+
			"and only %s may become the primary (%s); the next apply analyses the change", w.rel.WorkloadKind(), w.rel.Namespace, w.rel.Target, now, revision, proof.Route())
	}
	if err := w.copies().EnsurePrimary(ctx, tracked); err != nil {
		return nil, err
	}
	want, err := w.primaryFrom(target, replicas, revision, tracked)
	if err != nil {
		return nil, err
	}
	api := w.workloads()
	var held *appsv1.Deployment
	var before []configs.Ref // the copies the primary read before this update
	err = onAPIError(ctx, func() error {
		held, before = nil, nil
		var live *appsv1.Deployment
		var err error
		if known != nil {
			live, known = known.DeepCopy(), nil
		} else {
			live, err = api.Get(ctx, want.Name, metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			held, err = api.Create(ctx, want, metav1.CreateOptions{FieldManager: FieldManager})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(appsv1.Resource("deployments"), want.Name, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		if err := w.checkOwned(live, "Deployment"); err != nil {
			return err
		}
		before = w.copies().Used(live.Spec.Template.Spec)
		key := kinds.SelectorKey(want)
		live.Labels = w.metadata().ReplaceCopied(live.Labels, want.Labels, key)
		live.Annotations = w.metadata().ReplaceCopied(live.Annotations, want.Annotations, key)
		live.Spec.Template = want.Spec.Template
		live.Spec.Replicas = want.Spec.Replicas
		live.Spec.Strategy = want.Spec.Strategy
		live.Spec.MinReadySeconds = want.Spec.MinReadySeconds
		live.Spec.ProgressDeadlineSeconds = want.Spec.ProgressDeadlineSeconds
		held, err = api.Update(ctx, live, metav1.UpdateOptions{FieldManager: FieldManager})
		if apierrors.IsNotFound(err) {
			// Deleted since it was read: the next attempt reads again, and creates it.
			return apierrors.NewConflict(appsv1.Resource("deployments"), want.Name, err)
		}
		return err
	})
	if err == nil {
		w.leaveUnusedCopies(ctx, before, want.Spec.Template.Spec)
	}
	return held, err
}

// leaveUnusedCopies takes the release off the copies its primary no longer reads, so that
// the other releases that share them may change them. It is best effort: a membership left
// over only makes a later change of that config refuse, naming this release, until its
// destroy drops it.
func (w workload) leaveUnusedCopies(ctx context.Context, before []configs.Ref, now corev1.PodSpec) {
	used := w.copies().Used(now)
	for _, ref := range before {
		if !slices.Contains(used, ref) {
			_ = w.copies().Drop(ctx, ref, false)
		}
	}
}

// owns reports whether the object carries this release's label (see checkOwned).
func (w workload) owns(m metav1.Object) bool { return m.GetLabels()[router.LabelRelease] == w.rel.Name }

// checkOwned refuses to take over an object that this release did not create.
func (w workload) checkOwned(m metav1.Object, kind string) error {
	if !w.owns(m) {
		return fmt.Errorf("%s %s/%s already exists and is not managed by canary_release %q (missing label %s=%s)",
			kind, m.GetNamespace(), m.GetName(), w.rel.Name, router.LabelRelease, w.rel.Name)
	}
	return nil
}

// serviceSpecs returns the apex, -primary and -canary Services.
func (w workload) serviceSpecs(target *appsv1.Deployment, key, value string) []*corev1.Service {
	apex := w.rel.Apex()
	targetPort := w.rel.Service.TargetPort
	if targetPort.Type == intstr.Int && targetPort.IntVal == 0 && targetPort.StrVal == "" {
		targetPort = intstr.FromInt32(w.rel.Service.Port)
	}
	portName := w.rel.Service.PortName
	if portName == "" {
		portName = "http"
	}
	var appProtocol *string
	if p := w.rel.Service.AppProtocol; p != "" {
		appProtocol = &p
	}
	mk := func(name, selectorValue string, meta ServiceMetadata) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.rel.Namespace, Labels: mergeLabels(meta.Labels, w.ownedLabels()), Annotations: w.withOwner(maps.Clone(meta.Annotations))},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeClusterIP,
				Selector: map[string]string{key: selectorValue},
				Ports: append([]corev1.ServicePort{{
					Name: portName, Port: w.rel.Service.Port, TargetPort: targetPort, Protocol: corev1.ProtocolTCP, AppProtocol: appProtocol,
				}}, w.discoveredPorts(target, portName, targetPort)...),
			},
		}
	}
	return []*corev1.Service{
		mk(apex, value+"-primary", w.rel.Service.Apex),
		mk(apex+"-primary", value+"-primary", w.rel.Service.Primary),
		mk(apex+"-canary", value, w.rel.Service.Canary),
	}
}

// ensureServices creates or updates the three Services, keeping their cluster IPs. When the
// router routes by the apex's selector, an apex that selects the canary keeps doing so: the
// router, not this reconciliation, moves it back. So does an apex that an interrupted destroy
// handed over (AnnotationHandedOver): only the traffic gate gives it back (run.returnApex).
//
// The Services this release labelled are found by one list; any other is read by name (a
// missing one, or an apex the release does not own yet). Without the right to list Services
// (a Role from before it was asked for), each is read by name.
//
// listed, when not nil, are the Services as the run read them earlier (see run.knownServices)
// instead of a list now: a Service missing from it is read by name.
func (w workload) ensureServices(ctx context.Context, target *appsv1.Deployment, key, value string, listed map[string]*corev1.Service) error {
	if listed == nil {
		listed = w.listedServices(ctx)
	}
	for _, want := range w.serviceSpecs(target, key, value) {
		if err := w.ensureService(ctx, want, listed[want.Name], w.routedSelectors(want.Name, key, value)); err != nil {
			return err
		}
	}
	return nil
}

// routedSelectors are the selectors besides its own that the router may give Service name:
// when it routes by the apex's selector, the apex selects the canary, or both sides by replica
// ratio, until the router, not a reconciliation, moves it back.
func (w workload) routedSelectors(name, key, value string) []map[string]string {
	if name != w.rel.Apex() || !w.rel.Service.SelectorRouted {
		return nil
	}
	return []map[string]string{{key: value}, ratioSelector(w.rel)}
}

// listedServices lists the Services labelled as this release's, by name; nil when the list
// fails (each Service is then read by name, and any real problem shows there).
func (w workload) listedServices(ctx context.Context) map[string]*corev1.Service {
	list, err := w.kube.CoreV1().Services(w.rel.Namespace).List(ctx, metav1.ListOptions{LabelSelector: w.releaseSelector()})
	if err != nil {
		return nil
	}
	out := make(map[string]*corev1.Service, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

// ensureService writes want, starting from listed when the list found it; a live selector
// equal to one of alsoAllowed is kept, and so is a handed-over one.
func (w workload) ensureService(ctx context.Context, want, listed *corev1.Service, alsoAllowed []map[string]string) error {
	var api kube.TypedAPI[*corev1.Service] = w.kube.CoreV1().Services(w.rel.Namespace)
	if listed != nil {
		api = &listedOnce[*corev1.Service]{TypedAPI: api, listed: listed, fresh: true}
	}
	return upsertOwned(ctx, w, api, "Service", want, func(live *corev1.Service) bool {
		switch {
		case handedTo(live) != "":
			want = want.DeepCopy()
			want.Spec.Selector = live.Spec.Selector
		case slices.ContainsFunc(alsoAllowed, func(m map[string]string) bool { return maps.Equal(live.Spec.Selector, m) }):
			want = want.DeepCopy()
			want.Spec.Selector = live.Spec.Selector
		}
		labels := mergeLabels(live.Labels, want.Labels)
		annotations := mergeLabels(live.Annotations, want.Annotations)
		if maps.Equal(labels, live.Labels) && maps.Equal(annotations, live.Annotations) && maps.Equal(live.Spec.Selector, want.Spec.Selector) &&
			equality.Semantic.DeepEqual(live.Spec.Ports, want.Spec.Ports) {
			// Every apply reconciles the Services; most find them as they were.
			return false
		}
		live.Labels, live.Annotations = labels, annotations
		live.Spec.Selector = want.Spec.Selector
		live.Spec.Ports = want.Spec.Ports
		return true
	})
}

// handOverApex makes the apex Service serve on its own for a destroy: it selects key=value
// (nil: keeps its selector) and, in the same write, is marked AnnotationHandedOver with the
// Deployment whose pods it selects, so that a run after an interrupted destroy knows where
// traffic is and takes it back only once the primary serves.
func (w workload) handOverApex(ctx context.Context, selector map[string]string, deployment string) error {
	api := w.kube.CoreV1().Services(w.rel.Namespace)
	return onAPIError(ctx, func() error {
		live, err := api.Get(ctx, w.rel.Apex(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if selector != nil {
			live.Spec.Selector = selector
		}
		live.Annotations = mergeLabels(live.Annotations, map[string]string{AnnotationHandedOver: deployment})
		_, err = api.Update(ctx, live, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
}

// takeBackApex points a handed-over apex Service at the primary's pods (key=primaryValue)
// again and drops its AnnotationHandedOver, in one write. Only the traffic gate calls it.
func (w workload) takeBackApex(ctx context.Context, key, primaryValue string) error {
	api := w.kube.CoreV1().Services(w.rel.Namespace)
	return onAPIError(ctx, func() error {
		live, err := api.Get(ctx, w.rel.Apex(), metav1.GetOptions{})
		if err != nil || handedTo(live) == "" {
			return err
		}
		live.Spec.Selector = map[string]string{key: primaryValue}
		delete(live.Annotations, AnnotationHandedOver)
		_, err = api.Update(ctx, live, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
}

// scale sets a Deployment's replicas through the scale subresource, in one request: a Scale
// without a resourceVersion sets the replicas of the Deployment as the API server holds it
// (what a read-then-update would do, without the read). Unchanged replicas change nothing.
func (w workload) scale(ctx context.Context, name string, replicas int32) error {
	if name == w.rel.Target && w.scalers().ScaledObject() {
		// KEDA would scale the target behind the release: pause it at the same count first.
		if err := w.scalers().PauseTarget(ctx, replicas, false); err != nil {
			return err
		}
	}
	api := w.workloads()
	return onAPIError(ctx, func() error {
		s := &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.rel.Namespace},
			Spec:       autoscalingv1.ScaleSpec{Replicas: replicas},
		}
		if _, err := api.UpdateScale(ctx, name, s, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
			return fmt.Errorf("scaling %s %s/%s to %d: %w", w.rel.WorkloadKind(), w.rel.Namespace, name, replicas, err)
		}
		return nil
	})
}

// primary reads the primary Deployment; nil without error when it does not exist.
func (w workload) primary(ctx context.Context) (*appsv1.Deployment, error) {
	var d *appsv1.Deployment
	err := onAPIError(ctx, func() error {
		var err error
		d, err = w.workloads().Get(ctx, w.rel.PrimaryName(), metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return d, err
}

// serving reads a Deployment and reports whether it has Ready pods: the invariant's test for
// a side that may receive traffic.
func (w workload) serving(ctx context.Context, name string) (bool, error) {
	var d *appsv1.Deployment
	err := onAPIError(ctx, func() error {
		var err error
		d, err = w.workloads().Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return kinds.HasReadyPods(d), nil
}

// drift lists generated workload objects that are missing or no longer as the release wrote them.
func (w workload) drift(ctx context.Context) ([]string, error) {
	target, err := w.target(ctx)
	if err != nil {
		return nil, err
	}
	key, value, err := kinds.Selector(target)
	if err != nil {
		return nil, err
	}
	var out []string
	primary, err := w.workloads().Get(ctx, w.rel.PrimaryName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		out = append(out, fmt.Sprintf("%s %s/%s is missing", w.rel.WorkloadKind(), w.rel.Namespace, w.rel.PrimaryName()))
	case err != nil:
		return nil, err
	default:
		edited, err := w.primaryEdited(ctx, primary, target)
		if err != nil {
			return nil, err
		}
		if edited {
			out = append(out, fmt.Sprintf("%s %s/%s: its pod template was edited (kubectl edit, set image, rollout restart?); the next apply restores the promoted one", w.rel.WorkloadKind(), w.rel.Namespace, w.rel.PrimaryName()))
		}
	}
	for _, want := range w.serviceSpecs(target, key, value) {
		live, err := w.kube.CoreV1().Services(w.rel.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			out = append(out, fmt.Sprintf("Service %s/%s is missing", want.Namespace, want.Name))
			continue
		}
		if err != nil {
			return nil, err
		}
		routed := slices.ContainsFunc(w.routedSelectors(want.Name, key, value), func(s map[string]string) bool { return maps.Equal(live.Spec.Selector, s) })
		if (!routed && !maps.Equal(live.Spec.Selector, want.Spec.Selector)) || !samePorts(live.Spec.Ports, want.Spec.Ports) {
			out = append(out, fmt.Sprintf("Service %s/%s was edited", want.Namespace, want.Name))
		}
	}
	return out, nil
}

// primaryEdited reports a primary whose pod template is not the one the release wrote from the
// revision it runs. It can only tell while the target still has that revision.
func (w workload) primaryEdited(ctx context.Context, primary, target *appsv1.Deployment) (bool, error) {
	tracked, err := w.trackedConfigs(ctx, target)
	if err != nil {
		return false, err
	}
	revision := revisionOf(target, tracked)
	if primary.Annotations[AnnotationPrimarySpec] != revision || primary.Spec.Replicas == nil {
		return false, nil
	}
	w.copies().ReadCopies(tracked, primary.Spec.Template.Spec)
	want, err := w.primaryFrom(target, *primary.Spec.Replicas, revision, tracked)
	if err != nil {
		return false, err
	}
	// The target's copied labels and annotations are not part of the revision: the primary
	// takes a change of them when it is written next, which is no edit.
	key := kinds.SelectorKey(want)
	live, wanted := withoutApexLabel(primary.Spec.Template), withoutApexLabel(want.Spec.Template)
	for _, t := range []*corev1.PodTemplateSpec{&live, &wanted} {
		t.Labels = w.metadata().WithoutCopiedFrom(t.Labels, target.Spec.Template.Labels, key)
		t.Annotations = w.metadata().WithoutCopiedFrom(t.Annotations, target.Spec.Template.Annotations, key)
	}
	return !equality.Semantic.DeepEqual(live, wanted), nil
}

func mergeLabels(base, extra map[string]string) map[string]string {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, extra)
	return out
}

// discoveredPorts are the target's other container ports, exposed on the Services too with
// service.port_discovery (Flagger's portDiscovery); the routers only split the main port.
func (w workload) discoveredPorts(target *appsv1.Deployment, mainName string, mainTarget intstr.IntOrString) []corev1.ServicePort {
	if !w.rel.Service.PortDiscovery || target == nil {
		return nil
	}
	var out []corev1.ServicePort
	seen := map[int32]bool{w.rel.Service.Port: true}
	for _, c := range target.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if seen[p.ContainerPort] || (p.Protocol != "" && p.Protocol != corev1.ProtocolTCP) || p.Name == mainName ||
				mainTarget.IntVal == p.ContainerPort || (mainTarget.StrVal != "" && mainTarget.StrVal == p.Name) {
				continue
			}
			seen[p.ContainerPort] = true
			name := p.Name
			if name == "" {
				name = fmt.Sprintf("tcp-%d", p.ContainerPort)
			}
			out = append(out, corev1.ServicePort{Name: name, Port: p.ContainerPort, TargetPort: intstr.FromInt32(p.ContainerPort), Protocol: corev1.ProtocolTCP})
		}
	}
	return out
}

// samePorts compares the ports the release writes, ignoring what the API server adds.
func samePorts(live, want []corev1.ServicePort) bool {
	if len(live) != len(want) {
		return false
	}
	for i := range want {
		if live[i].Name != want[i].Name || live[i].Port != want[i].Port || live[i].TargetPort != want[i].TargetPort {
			return false
		}
	}
	return true
}
