package localstack

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// ReadyAnnotation set to "false" on a pod keeps kwok from ever making it Ready: the pod
// runs but stays unready, as a canary whose containers fail their readiness probe.
const ReadyAnnotation = "sim.canary-release.dev/ready"

// FakeNodeAnnotation marks the nodes kwok manages.
const FakeNodeAnnotation = "kwok.x-k8s.io/node"

// kwokStageFiles are kwok's fast stages, relative to the module's kustomize/stage folder.
// The lease heartbeat keeps nodes Ready without frequent status writes.
var kwokStageFiles = []string{
	"node/fast/node-initialize.yaml",
	"node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"pod/fast/pod-ready.yaml",
	"pod/fast/pod-complete.yaml",
	"pod/fast/pod-delete.yaml",
}

// kwok evaluates selector keys as jq queries against the object.
var readyAnnotationQuery = fmt.Sprintf(".metadata.annotations[%q]", ReadyAnnotation)

// RenderStages returns kwok's stage configuration read from the kwok module source
// (kwokDir, e.g. $GOMODCACHE/sigs.k8s.io/kwok@v0.8.0): the pod-ready stage skips pods
// annotated ReadyAnnotation="false", and an extra stage runs those pods unready.
func RenderStages(kwokDir string) ([]byte, error) {
	var out bytes.Buffer
	foundPodReady := false
	for _, rel := range kwokStageFiles {
		data, err := os.ReadFile(filepath.Join(kwokDir, "kustomize", "stage", rel))
		if err != nil {
			return nil, err
		}
		objs, err := DecodeManifests(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		for _, obj := range objs {
			if obj.GetName() == "pod-ready" {
				foundPodReady = true
				exprs, _, _ := unstructured.NestedSlice(obj.Object, "spec", "selector", "matchExpressions")
				exprs = append(exprs, map[string]any{
					"key": readyAnnotationQuery, "operator": "NotIn", "values": []any{"false"},
				})
				if err := unstructured.SetNestedSlice(obj.Object, exprs, "spec", "selector", "matchExpressions"); err != nil {
					return nil, err
				}
			}
			doc, err := yaml.Marshal(obj.Object)
			if err != nil {
				return nil, err
			}
			out.WriteString("---\n")
			out.Write(doc)
		}
	}
	if !foundPodReady {
		return nil, fmt.Errorf("no pod-ready stage in %s", kwokDir)
	}
	out.WriteString("---\n")
	fmt.Fprintf(&out, podRunningUnreadyStage, readyAnnotationQuery)
	return out.Bytes(), nil
}

// podRunningUnreadyStage moves a pod annotated ReadyAnnotation="false" from Pending to
// Running with Ready=False, so Deployments count it as unavailable.
const podRunningUnreadyStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-running-unready
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: [Pending]
    - key: '%s'
      operator: In
      values: ["false"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Running
      startTime: {{ $now | Quote }}
      conditions:
      - type: Initialized
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: ContainersReady
        status: "False"
        reason: ContainersNotReady
        lastTransitionTime: {{ $now | Quote }}
      - type: Ready
        status: "False"
        reason: ContainersNotReady
        lastTransitionTime: {{ $now | Quote }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      {{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
`

// FakeNodeName names the i-th fake node.
func FakeNodeName(i int) string { return fmt.Sprintf("kwok-node-%d", i) }

// EnsureFakeNodes creates count kwok nodes with room for many pods and waits until they
// are Ready. Existing nodes are left as they are.
func EnsureFakeNodes(ctx context.Context, client kubernetes.Interface, count int, timeout time.Duration) error {
	capacity := corev1.ResourceList{
		corev1.ResourcePods:   resource.MustParse("1000"),
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
	}
	for i := range count {
		name := FakeNodeName(i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: name,
				Annotations: map[string]string{
					FakeNodeAnnotation: "fake",
					// Lets the kubelet-less node skip TTL-based caching of its objects.
					"node.alpha.kubernetes.io/ttl": "0",
				},
				Labels: map[string]string{
					"type":                   "kwok",
					"kubernetes.io/hostname": name,
					"kubernetes.io/os":       "linux",
					"kubernetes.io/arch":     "amd64",
				},
			},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
		}
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{FieldManager: FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", name, err)
		}
	}
	var notReady []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		notReady = notReady[:0]
		for i := range count {
			node, err := client.CoreV1().Nodes().Get(ctx, FakeNodeName(i), metav1.GetOptions{})
			if err != nil || !NodeReady(node) {
				notReady = append(notReady, FakeNodeName(i))
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("nodes not Ready (%v): %w", notReady, err)
	}
	return nil
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
