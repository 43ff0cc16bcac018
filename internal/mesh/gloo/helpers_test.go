package gloo

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// New is the gloo router, as the registry would build it (this package cannot import the registry).
func New(provider string, c router.Clients, s router.Spec) (router.Router, error) {
	if provider != "gloo" {
		return nil, fmt.Errorf("the gloo driver's tests cannot build a %s router", provider)
	}
	return Driver{}.NewRouter(c, s), nil
}

// errForbidden is an RBAC refusal, which no retry can cure.
var errForbidden = apierrors.NewForbidden(router.TrafficSplitResource.GroupResource(), "podinfo", errors.New("RBAC: access denied"))
