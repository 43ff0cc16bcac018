package alb_test

import (
	"fmt"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/alb"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// New is the alb router, as the registry would build it (this package cannot import the
// registry).
func New(provider string, c router.Clients, s router.Spec) (router.Router, error) {
	if provider != "alb" {
		return nil, fmt.Errorf("the alb driver's tests cannot build a %s router", provider)
	}
	return alb.Driver{}.NewRouter(c, s), nil
}

// spec is an alb release of podinfo on port 9898 whose ingress_ref is the Ingress podinfo.
var spec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 9898,
	Options: alb.Options{IngressRef: &router.Ref{Name: "podinfo"}}}

// UserIngress is the user's Ingress podinfo in IngressGroup demo: app.example.com/ to the apex
// on port http, with a header condition of its own on the apex's paths.
const UserIngress = `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: podinfo
  namespace: test
  annotations:
    alb.ingress.kubernetes.io/group.name: demo
    alb.ingress.kubernetes.io/group.order: "10"
    alb.ingress.kubernetes.io/target-type: ip
    alb.ingress.kubernetes.io/conditions.podinfo: '[{"field":"http-request-method","httpRequestMethodConfig":{"Values":["GET"]}}]'
    alb.ingress.kubernetes.io/actions.other: '{"type":"fixed-response","fixedResponseConfig":{"statusCode":"404"}}'
    kubectl.kubernetes.io/last-applied-configuration: "{}"
spec:
  ingressClassName: alb
  rules:
  - host: app.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: podinfo
            port:
              name: http
      - path: /other
        pathType: Exact
        backend:
          service:
            name: other
            port:
              name: use-annotation
`
