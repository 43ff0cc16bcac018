// Package router is the machinery every mesh driver's router is built on: the Router interface
// the rollout engine sees, the release's Spec and Weights, and the shared parts of writing a
// routing object (managed objects with ownership, retries and verified writes, hand-over on
// destroy, match rendering, the HTTPRoute base of gatewayapi and linkerd). The routers
// themselves live in their drivers (internal/mesh/<name>).
package router

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Weights is a traffic split in whole percent; Primary+Canary is always 100.
type Weights struct {
	Primary int
	Canary  int
	// Matched sends the requests that match Spec.Match to the canary, whatever the weights
	// (A/B testing; the weights then stay 100/0). Only routers with Capabilities.Match write it.
	Matched bool
	// Mirrored also copies the requests the split sends to the primary to the canary, whose
	// answers are dropped (Flagger's mirror). Only routers with Capabilities.Mirror write it.
	Mirrored bool
	// Session is the value of the session-affinity cookies of the canary's revision: clients
	// the canary answered keep reaching it while its weight is above 0. Empty without
	// Spec.SessionAffinity or at canary weight 0. Only routers with Capabilities.SessionAffinity.
	Session string
	// Expired is the cookie value of the last revision whose canary had weight, once the
	// canary has none (the release ended): requests carrying those cookies go to the primary,
	// whose answer expires them (Flagger's expiring Set-Cookie), until the next release sends
	// the canary weight again. Only with Spec.SessionAffinity and Canary 0.
	Expired string
}

// Match is one of Flagger's analysis.match conditions: a request matches when every header
// and query parameter listed matches; the canary gets the requests that match any Match.
type Match struct {
	Headers     map[string]StringMatch
	QueryParams map[string]StringMatch
}

// StringMatch is exactly one of an exact value, a prefix, a suffix or a regular expression.
type StringMatch struct {
	Exact, Prefix, Suffix, Regex string
}

// SessionAffinity is Flagger's analysis.sessionAffinity: the canary's answers set a cookie
// CookieName, and requests carrying it go to the canary while its weight is above 0;
// PrimaryCookieName, when set, does the same for the primary.
type SessionAffinity struct {
	CookieName, PrimaryCookieName string
	// MaxAge is the cookies' Max-Age in seconds.
	MaxAge                        int
	Domain, Path, SameSite        string
	HTTPOnly, Secure, Partitioned bool
}

// SetCookie is the Set-Cookie value of cookie name with value.
func (a SessionAffinity) SetCookie(name, value string) string {
	out := fmt.Sprintf("%s=%s; Max-Age=%d", name, value, a.MaxAge)
	for _, attr := range []struct {
		on   bool
		text string
	}{
		{a.Domain != "", "Domain=" + a.Domain},
		{a.Path != "", "Path=" + a.Path},
		{a.HTTPOnly, "HttpOnly"},
		{a.Secure, "Secure"},
		{a.SameSite != "", "SameSite=" + a.SameSite},
		{a.Partitioned, "Partitioned"},
	} {
		if attr.on {
			out += "; " + attr.text
		}
	}
	return out
}

// Cookies are the cookie names, the canary's first.
func (a SessionAffinity) Cookies() []string {
	if a.PrimaryCookieName == "" {
		return []string{a.CookieName}
	}
	return []string{a.CookieName, a.PrimaryCookieName}
}

// ExpireCookie is the Set-Cookie value that makes a client drop cookie name=value: Max-Age=-1,
// with the Domain, Path, Secure, SameSite and Partitioned attributes the cookie was set with,
// which a browser needs to find the cookie it holds (HttpOnly is not part of that identity).
func (a SessionAffinity) ExpireCookie(name, value string) string {
	a.MaxAge, a.HTTPOnly = -1, false
	return a.SetCookie(name, value)
}

// CookieRegex matches a Cookie header that carries cookie name with value.
func CookieRegex(name, value string) string {
	return ".*" + regexp.QuoteMeta(name+"="+value) + ".*"
}

// CookieValue is the value cookieRegex(name, value) was made with, if re is one.
func CookieValue(name, re string) (string, bool) {
	inner, ok := strings.CutPrefix(re, ".*"+regexp.QuoteMeta(name+"="))
	if !ok {
		return "", false
	}
	inner, ok = strings.CutSuffix(inner, ".*")
	return inner, ok && inner != "" && regexp.QuoteMeta(inner) == inner
}

// Ref names an object the user owns (Flagger's routeRef, upstreamRef), in a driver's options.
type Ref struct {
	APIVersion string
	Kind       string
	Name       string
	Namespace  string // empty means the release's namespace
}

// Spec is what a router needs to know about one release.
type Spec struct {
	Namespace string
	// Name is the canary_release name; generated objects carry it in LabelRelease.
	Name string
	// Target is the target Deployment's name, used by the built-in metric queries.
	Target string
	// Apex is the apex Service name; <Apex>-primary and <Apex>-canary are its backends.
	Apex  string
	Port  int32
	Hosts []string
	// Options are the driver's own options (its mesh.Configurable decodes them from its
	// attributes); each router reads its own type, and nil means the driver's defaults.
	Options any
	// Match lists the A/B conditions (routers with Capabilities.Match only).
	Match []Match
	// MirrorWeight is the percent of requests Weights.Mirrored copies; 0 means all of them.
	MirrorWeight int
	// SessionAffinity, when set, makes Weights.Session stick clients to a side.
	SessionAffinity *SessionAffinity
	// OwnsWorkload is set when the release owns its Deployment (a manifest): destroy removes
	// the workload, so no route is left behind to lead to it.
	OwnsWorkload bool
	// ApexLabels and ApexAnnotations are service.apex's metadata, which the routers also stamp
	// on the object that stands for the apex (Managed.StampApex), where Flagger does.
	ApexLabels, ApexAnnotations map[string]string
	// ReadyDeadline bounds a router's wait for pods it scales itself (the mesh-less replica
	// ratio) to be Ready; 0 waits as long as the context allows.
	ReadyDeadline time.Duration
}

// Labels put on every generated object, so that a later Create can adopt them.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "terraform-provider-canary"
	LabelRelease   = "canary-release.dev/release"
	// LabelApex, valued with the apex Service's name, is on the pods of both the primary and
	// the canary: the apex selects it alone while a mesh-less canary shares the traffic by
	// replica ratio. It is outside both Deployments' selectors and the revision hash.
	LabelApex = "canary-release.dev/apex"
	// AnnotationLeftBehind marks an object a destroyed release left for the user instead of
	// deleting it, because a Gateway serves it or the user's own routes name it; the value says
	// what to do with it.
	AnnotationLeftBehind = "canary-release.dev/left-behind"
)

// Router manages the generated routing objects of one release.
type Router interface {
	// Reconcile creates or updates the generated objects. New objects start at 100/0;
	// existing weights are kept.
	Reconcile(ctx context.Context) error
	// SetRoutes writes new weights and verifies that the API server holds them. Both zero is
	// an error.
	SetRoutes(ctx context.Context, w Weights) error
	// GetRoutes reads the weights back from the live object; a missing object is a
	// *NotFoundError.
	GetRoutes(ctx context.Context) (Weights, error)
	// Drift lists, in words, how the live objects differ from what Reconcile would write,
	// weights aside. Empty means in sync. Used at plan time.
	Drift(ctx context.Context) ([]string, error)
	// Finalize deletes the generated routing objects, except that an object a Gateway serves
	// (Istio, Gateway API) or the user's own routes name (Gloo) is handed over to the apex
	// Service and left behind.
	Finalize(ctx context.Context) error
	// Warnings are plan-time hints (for example: nothing routes to the generated object).
	Warnings(ctx context.Context) []string
}

// Rounding is a router whose SetRoutes may give the canary another share than the one asked
// for: a replica ratio rounds to whole pods. Written is the split its last successful
// SetRoutes made, which the engine records instead of the one it asked for.
type Rounding interface {
	Written(asked Weights) Weights
}

// Sizing is a router that sizes the canary to the primary's Ready pods (a replica ratio), so
// that a split it wrote is the step's share only beside as many pods as it was sized for.
type Sizing interface {
	// SizedBeside is how many Ready primary pods the last successful SetRoutes sized the
	// canary for: 0 when it sized nothing (a whole side, a failed write, a new process).
	SizedBeside() int32
}

// Clients are the API clients a router may use.
type Clients struct {
	Dynamic dynamic.Interface
	Kube    kubernetes.Interface
}

// NotFoundError is a generated routing object that does not exist.
type NotFoundError struct{ Ref string }

func (e *NotFoundError) Error() string { return e.Ref + " not found" }

// IsNotFound reports whether err says a generated routing object does not exist.
func IsNotFound(err error) bool {
	var nf *NotFoundError
	return errors.As(err, &nf)
}
