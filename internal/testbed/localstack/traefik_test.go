package localstack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// A request to the stack's Traefik with an IngressRoute's Host reaches one of the routed
// Deployment's pods, which answers through the simulator with its name and image; Prometheus
// scrapes Traefik.
func TestTraefikRoutesToPods(t *testing.T) {
	env := ensure(t)
	if env.ProxyAddress == "" {
		t.Skip("this stack runs no Traefik (started before it had one); make up adds it")
	}
	client, dyn, err := env.Clients()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ns := testNamespace(t, client)
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, deployment("web", 2, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	host := ns + ".example.com"
	route := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
		"metadata": map[string]any{"name": "web"},
		"spec": map[string]any{
			"entryPoints": []any{"web"},
			"routes": []any{map[string]any{
				"match": "Host(`" + host + "`)", "kind": "Rule",
				"services": []any{map[string]any{"name": "web", "port": int64(80)}},
			}},
		},
	}}
	ingressRoutes := schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "ingressroutes"}
	if _, err := dyn.Resource(ingressRoutes).Namespace(ns).Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var last string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+env.ProxyAddress+"/", nil)
		if err != nil {
			return false, err
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil //nolint:nilerr // not answering yet: poll again
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		last = fmt.Sprintf("%d X-Canary-Pod=%q X-Canary-Image=%q", resp.StatusCode, resp.Header.Get("X-Canary-Pod"), resp.Header.Get("X-Canary-Image"))
		return resp.StatusCode == http.StatusOK && resp.Header.Get("X-Canary-Image") == "example.invalid/app:1" &&
			len(resp.Header.Get("X-Canary-Pod")) > len("web-"), nil
	})
	if err != nil {
		t.Fatalf("GET http://%s/ (Host %s) never answered by a web pod: %v; last: %s", env.ProxyAddress, host, err, last)
	}

	prom, err := api.NewClient(api.Config{Address: env.PrometheusURL})
	if err != nil {
		t.Fatal(err)
	}
	var up model.Value
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		v, _, _, err := promv1.NewAPI(prom).Query(ctx, `up{job="traefik"}`, time.Now())
		if err != nil {
			return false, err
		}
		up = v
		vec, ok := v.(model.Vector)
		return ok && len(vec) == 1 && vec[0].Value == 1, nil
	})
	if err != nil {
		t.Fatalf(`up{job="traefik"} never 1: %v (last %v)`, err, up)
	}
}
