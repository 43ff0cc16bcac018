package meshsim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Knative Serving (serving.knative.dev/v1). There is no Knative controller on the stack, so the
// simulator plays the part of it the releases need, besides the data plane:
//
//   - Revisions (knativeReconcile): each template a Knative Service is given becomes a Revision
//     <service>-<5-digit generation>, labelled serving.knative.dev/service, with a Deployment
//     <revision>-deployment whose pods carry serving.knative.dev/revision (the stack's kwok makes
//     them Ready) and a Service <revision>-private selecting them, both owned by the Revision,
//     which the Knative Service owns. A Revision is Ready once its Deployment has a Ready
//     replica. A template equal to the newest revision's makes no new one; any other does, even
//     one equal to an older revision's, as Knative does.
//   - The Knative Service's status: latestCreatedRevisionName, latestReadyRevisionName, and the
//     traffic its route serves. spec.traffic (or, without it, everything to the latest Ready
//     revision) is served once every revision it names exists and is Ready; until then the
//     route keeps serving what it served, as Knative's route does ("RevisionMissing").
//
// Modelling choices: one replica per revision (no autoscaling, no scale to zero, no activator),
// no Configuration or Route objects, a template's metadata.name (a revision name the user
// chooses) is not honoured, and tags are served like their untagged targets.
//
// Traffic (knativeCandidates) enters at Kourier, Knative's ingress, for the Knative Service
// name, and splits by status.traffic between the revisions' pods. Metrics are Envoy's cluster
// stats, as Kourier exports them, with cluster name <namespace>/<revision>.

// Knative's resources.
var (
	KnativeServiceGVR  = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}
	KnativeRevisionGVR = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "revisions"}
)

// Knative's labels, and the simulator's record of the template a revision was made from.
const (
	knativeLabelService       = "serving.knative.dev/service"
	knativeLabelConfiguration = "serving.knative.dev/configuration"
	knativeLabelGeneration    = "serving.knative.dev/configurationGeneration"
	knativeLabelRevision      = "serving.knative.dev/revision"
	annotationTemplateHash    = "sim.canary-release.dev/template-hash"
)

// knativeCandidates: each Knative Service's served traffic, to its revisions' pods.
func knativeCandidates(v *view) []candidate {
	var out []candidate
	for _, ks := range v.list(KnativeServiceGVR) {
		ns := ks.GetNamespace()
		share := map[string]float64{}
		var order []string
		for _, t := range maps(ks.Object, "status", "traffic") {
			rev := str(t, "revisionName")
			if rev == "" {
				continue
			}
			pct, _ := num(t, "percent")
			if _, seen := share[rev]; !seen {
				order = append(order, rev)
			}
			share[rev] += pct
		}
		if len(order) == 0 {
			continue
		}
		r := &route{mesh: MeshKnative, object: objectRef{Kind: "Service", Namespace: ns, Name: ks.GetName()}, weighted: true}
		for _, rev := range order {
			r.backends = append(r.backends, backend{
				service: types.NamespacedName{Namespace: ns, Name: rev + "-private"},
				weight:  share[rev],
				cluster: ns + "/" + rev,
			})
		}
		out = append(out, candidate{apexes: []types.NamespacedName{{Namespace: ns, Name: ks.GetName()}}, route: r})
	}
	return out
}

// ReconcileKnative plays Knative's controller once over every Knative Service (see above).
// Run calls it every tick; tests call it directly.
func (s *Simulator) ReconcileKnative(ctx context.Context) {
	s.mu.Lock()
	_, served := s.crds[KnativeServiceGVR]
	s.mu.Unlock()
	if !served {
		return
	}
	list, err := s.cfg.Dynamic.Resource(KnativeServiceGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.log.Warn("listing Knative Services", "error", err)
		return
	}
	for i := range list.Items {
		if err := s.reconcileKnativeService(ctx, &list.Items[i]); err != nil && ctx.Err() == nil {
			s.log.Warn("reconciling Knative Service", "service", list.Items[i].GetNamespace()+"/"+list.Items[i].GetName(), "error", err)
		}
	}
}

func (s *Simulator) reconcileKnativeService(ctx context.Context, ks *unstructured.Unstructured) error {
	ns, name := ks.GetNamespace(), ks.GetName()
	if ks.GetDeletionTimestamp() != nil {
		return nil
	}
	template := mapAt(ks.Object, "spec", "template")
	hash := templateHash(template)
	revs, err := s.cfg.Dynamic.Resource(KnativeRevisionGVR).Namespace(ns).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{knativeLabelService: name}).String()})
	if err != nil {
		return err
	}
	items := revs.Items
	sort.Slice(items, func(i, j int) bool { return generationOf(&items[i]) < generationOf(&items[j]) })
	if n := len(items); n == 0 || items[n-1].GetAnnotations()[annotationTemplateHash] != hash {
		gen := int64(1)
		if n > 0 {
			gen = generationOf(&items[n-1]) + 1
		}
		rev, err := s.createRevision(ctx, ks, template, hash, gen)
		if err != nil {
			return err
		}
		items = append(items, *rev)
	}
	ready := map[string]bool{}
	for i := range items {
		ok, err := s.reconcileRevision(ctx, ks, &items[i])
		if err != nil {
			return err
		}
		ready[items[i].GetName()] = ok
	}
	return s.knativeStatus(ctx, ks, items, ready)
}

// templateHash identifies a template, whatever the key order of its JSON.
func templateHash(template map[string]any) string {
	b, _ := json.Marshal(template) // maps marshal with sorted keys
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func generationOf(rev *unstructured.Unstructured) int64 {
	g, _ := strconv.ParseInt(rev.GetLabels()[knativeLabelGeneration], 10, 64)
	return g
}

func ownerRef(obj *unstructured.Unstructured) metav1.OwnerReference {
	controller := true
	return metav1.OwnerReference{APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Name: obj.GetName(), UID: obj.GetUID(), Controller: &controller}
}

func (s *Simulator) createRevision(ctx context.Context, ks *unstructured.Unstructured, template map[string]any, hash string, gen int64) (*unstructured.Unstructured, error) {
	ns, name := ks.GetNamespace(), ks.GetName()
	spec, _ := runtime.DeepCopyJSONValue(mapAt(template, "spec")).(map[string]any)
	if spec == nil {
		spec = map[string]any{}
	}
	rev := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "serving.knative.dev/v1", "kind": "Revision",
		"metadata": map[string]any{"name": fmt.Sprintf("%s-%05d", name, gen), "namespace": ns},
		"spec":     spec,
	}}
	rev.SetLabels(map[string]string{knativeLabelService: name, knativeLabelConfiguration: name, knativeLabelGeneration: strconv.FormatInt(gen, 10)})
	rev.SetAnnotations(map[string]string{annotationTemplateHash: hash})
	rev.SetOwnerReferences([]metav1.OwnerReference{ownerRef(ks)})
	created, err := s.cfg.Dynamic.Resource(KnativeRevisionGVR).Namespace(ns).Create(ctx, rev, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return s.cfg.Dynamic.Resource(KnativeRevisionGVR).Namespace(ns).Get(ctx, rev.GetName(), metav1.GetOptions{})
	}
	return created, err
}

// reconcileRevision makes the revision's Deployment and private Service, and its Ready
// condition follow the Deployment's Ready replicas; it reports that condition.
func (s *Simulator) reconcileRevision(ctx context.Context, ks, rev *unstructured.Unstructured) (bool, error) {
	ns, name := rev.GetNamespace(), rev.GetName()
	podLabels := map[string]string{}
	for k, v := range rev.GetLabels() {
		podLabels[k] = v
	}
	podLabels[knativeLabelRevision] = name
	podLabels["app"] = name
	tmpl := mapAt(ks.Object, "spec", "template", "metadata")
	var podAnnotations map[string]string
	if rev.GetAnnotations()[annotationTemplateHash] == templateHash(mapAt(ks.Object, "spec", "template")) {
		// The pods take the template's own labels and annotations (the simulator's behaviour
		// annotations among them) while the template is the revision's.
		for k, v := range strMap(tmpl, "labels") {
			if _, set := podLabels[k]; !set {
				podLabels[k] = v
			}
		}
		podAnnotations = strMap(tmpl, "annotations")
	}
	d, err := s.cfg.Kube.AppsV1().Deployments(ns).Get(ctx, name+"-deployment", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		var podSpec corev1.PodSpec
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(mapAt(rev.Object, "spec"), &podSpec); err != nil {
			return false, fmt.Errorf("revision %s/%s: %w", ns, name, err)
		}
		replicas := int32(1)
		d = &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-deployment", Namespace: ns, Labels: podLabels,
				OwnerReferences: []metav1.OwnerReference{ownerRef(rev)}},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{knativeLabelRevision: name}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnnotations},
					Spec:       corev1.PodSpec{Containers: podSpec.Containers, Volumes: podSpec.Volumes},
				},
			},
		}
		if d, err = s.cfg.Kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
	} else if err != nil {
		return false, err
	}
	if err := s.ensurePrivateService(ctx, rev); err != nil {
		return false, err
	}
	ready := d != nil && d.Status.ReadyReplicas > 0
	status := "False"
	if ready {
		status = "True"
	}
	if conditionStatus(rev, "Ready") == status {
		return ready, nil
	}
	conds := []any{}
	for _, typ := range []string{"Ready", "ResourcesAvailable", "ContainerHealthy"} {
		conds = append(conds, map[string]any{"type": typ, "status": status, "lastTransitionTime": metav1.Now().UTC().Format("2006-01-02T15:04:05Z")})
	}
	_ = unstructured.SetNestedSlice(rev.Object, conds, "status", "conditions")
	_ = unstructured.SetNestedField(rev.Object, rev.GetGeneration(), "status", "observedGeneration")
	_, err = s.cfg.Dynamic.Resource(KnativeRevisionGVR).Namespace(ns).UpdateStatus(ctx, rev, metav1.UpdateOptions{})
	return ready, err
}

// ensurePrivateService creates the revision's Service <revision>-private unless the informer
// already holds it: a create on every pass spent the simulator's API budget (client-go's rate
// limit), so the Knative Services' status lagged the users' applies by seconds.
func (s *Simulator) ensurePrivateService(ctx context.Context, rev *unstructured.Unstructured) error {
	ns, name := rev.GetNamespace(), rev.GetName()
	if _, err := s.typed.Core().V1().Services().Lister().Services(ns).Get(name + "-private"); err == nil {
		return nil
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-private", Namespace: ns, Labels: map[string]string{knativeLabelRevision: name},
			OwnerReferences: []metav1.OwnerReference{ownerRef(rev)}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{knativeLabelRevision: name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(containerPort(rev))}},
		},
	}
	if _, err := s.cfg.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func strMap(obj map[string]any, field string) map[string]string {
	out := map[string]string{}
	for k, v := range mapAt(obj, field) {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

func containerPort(rev *unstructured.Unstructured) int32 {
	for _, c := range maps(rev.Object, "spec", "containers") {
		for _, p := range maps(c, "ports") {
			if n, ok := num(p, "containerPort"); ok {
				return int32(n)
			}
		}
	}
	return 8080 // Knative's default user port
}

func conditionStatus(obj *unstructured.Unstructured, typ string) string {
	for _, c := range maps(obj.Object, "status", "conditions") {
		if str(c, "type") == typ {
			return str(c, "status")
		}
	}
	return ""
}

// knativeStatus writes the Knative Service's status: its newest created and Ready revisions,
// and the traffic served (see above).
func (s *Simulator) knativeStatus(ctx context.Context, ks *unstructured.Unstructured, revs []unstructured.Unstructured, ready map[string]bool) error {
	latestCreated, latestReady := "", ""
	for i := range revs {
		latestCreated = revs[i].GetName()
		if ready[latestCreated] {
			latestReady = latestCreated
		}
	}
	served, _, _ := unstructured.NestedSlice(ks.Object, "status", "traffic")
	routed := "True"
	message := ""
	if next, missing := resolveTraffic(maps(ks.Object, "spec", "traffic"), latestReady, ready); missing == "" {
		served = next
	} else {
		routed, message = "False", missing
	}
	status := map[string]any{
		"observedGeneration":        ks.GetGeneration(),
		"latestCreatedRevisionName": latestCreated,
		"latestReadyRevisionName":   latestReady,
		"traffic":                   served,
		"url":                       fmt.Sprintf("http://%s.%s.svc.cluster.local", ks.GetName(), ks.GetNamespace()),
		"conditions": []any{
			map[string]any{"type": "Ready", "status": routed, "message": message},
			map[string]any{"type": "RoutesReady", "status": routed, "message": message},
		},
	}
	if old, _, _ := unstructured.NestedMap(ks.Object, "status"); jsonEqual(old, status) {
		return nil
	}
	ks = ks.DeepCopy()
	ks.Object["status"] = status
	_, err := s.cfg.Dynamic.Resource(KnativeServiceGVR).Namespace(ks.GetNamespace()).UpdateStatus(ctx, ks, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return nil // the next pass sees the newer object
	}
	return err
}

// resolveTraffic is the traffic a route serves for spec (everything to the latest Ready revision
// when empty), or why it cannot serve it yet.
func resolveTraffic(spec []map[string]any, latestReady string, ready map[string]bool) ([]any, string) {
	if len(spec) == 0 {
		spec = []map[string]any{{"latestRevision": true, "percent": int64(100)}}
	}
	var out []any
	for _, t := range spec {
		rev := str(t, "revisionName")
		latest, _, _ := unstructured.NestedBool(t, "latestRevision")
		if latest {
			rev = latestReady
		}
		switch {
		case rev == "":
			return nil, "no revision is Ready yet"
		case !ready[rev]:
			return nil, fmt.Sprintf("revision %q is missing or not Ready", rev)
		}
		pct, _ := num(t, "percent")
		entry := map[string]any{"revisionName": rev, "latestRevision": latest, "percent": int64(pct)}
		if tag := str(t, "tag"); tag != "" {
			entry["tag"] = tag
		}
		out = append(out, entry)
	}
	return out, ""
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
