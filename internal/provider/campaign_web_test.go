package provider

// A metric backend other than Prometheus in the campaign (issue 32 item 4): the `web` backend
// (internal/metrics/web), its endpoint served by the harness in memory. The schedule's
// outages become the web endpoint's faults: an error status or a timeout (no answer: not a
// failed check), null or garbage (a failed check, or a query error). A hostile query, one
// that names another host (absolute, scheme-relative, or through a backslash that proxies
// read as //), must be refused before any request: the endpoint fails the schedule on any
// request that reaches it with one, and such a schedule's analysis can never pass.

import (
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"
	"unsafe"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/web"
)

// The web endpoint's address and the query a template asks it.
const (
	webBackendURL = "http://metrics.campaign.example/api/v1/check"
	webHost       = "metrics.campaign.example"
	webQuery      = `?metric=success&target={{ target }}`
	webTimeout    = 2 * time.Second
)

// hostileWebQueries are queries that name another host: the first two as written, the last
// two only as a server or proxy reads a backslash.
var hostileWebQueries = []string{
	`http://metrics.attacker.example/steal?target={{ target }}`,
	`//metrics.attacker.example/steal?target={{ target }}`,
	`/\metrics.attacker.example/steal?target={{ target }}`,
	`\\metrics.attacker.example/steal?target={{ target }}`,
}

// drawWebBackend makes one schedule in four use the web backend, a fifth of those with a
// hostile query.
func drawWebBackend(seed int64) (bool, string) {
	if keyedCoin(seed, "web backend") >= 0.25 {
		return false, ""
	}
	if keyedCoin(seed, "hostile web query") >= 0.2 {
		return true, webQuery
	}
	return true, hostileWebQueries[int(keyedCoin(seed, "hostile web query kind")*float64(len(hostileWebQueries)))%len(hostileWebQueries)]
}

// hostileQuery reports a schedule whose query names another host.
func (s releaseShape) hostileQuery() bool { return s.web && s.webQuery != webQuery }

// metricTemplates are the provider's metric templates: the campaign's one metric, on the
// simulated Prometheus or the web endpoint.
func (c *campaign) metricTemplates() map[string]metricTemplate {
	if !c.shape.web {
		return map[string]metricTemplate{campaignMetric: {query: `campaign_check{target="{{ target }}"}`, querier: simulatedPrometheus{c}}}
	}
	client, err := web.New(web.Config{URL: webBackendURL, JSONPath: "{$.data.value}", Headers: map[string]string{"Authorization": "Bearer campaign-secret"},
		HTTP: metrics.HTTPConfig{Timeout: webTimeout}})
	if err != nil {
		panic(err)
	}
	// The client's transport dials; the harness serves the endpoint in memory instead.
	field := reflect.ValueOf(client).Elem().FieldByName("http")
	hc, ok := reflect.NewAt(field.Type(), unsafe.Pointer(field.UnsafeAddr())).Elem().Interface().(*http.Client)
	if !ok {
		panic("web.Client has no *http.Client field named http")
	}
	hc.Transport = webEndpoint{c}
	return map[string]metricTemplate{campaignMetric: {query: c.shape.webQuery, querier: client}}
}

// webEndpoint is the web backend's endpoint.
type webEndpoint struct{ c *campaign }

func (w webEndpoint) RoundTrip(req *http.Request) (*http.Response, error) {
	c := w.c
	if req.URL.Host != webHost || strings.Contains(req.URL.Path, `\`) || strings.HasPrefix(req.URL.Path, "//") || c.shape.hostileQuery() {
		c.judge.fail("web query", "", "a request went to %s://%s%s with the backend's headers: the query %q names another host and must be refused before any request",
			req.URL.Scheme, req.URL.Host, req.URL.EscapedPath(), c.shape.webQuery)
		return webAnswer(req, http.StatusNotFound, `{}`), nil
	}
	revision := c.running(campaignTarget)
	outage := c.takeOutage()
	if outage == outageNone && revision == "" {
		outage = outageNaN // no canary pods: no requests to measure
	}
	switch outage {
	case outageDown:
		if keyedCoin(c.seed, fmt.Sprintf("web down %s", c.elapsed())) < 0.5 {
			c.tracef("check of %s: the web endpoint answers 503", podsOrNone(revision))
			return webAnswer(req, http.StatusServiceUnavailable, `upstream unavailable`), nil
		}
		c.tracef("check of %s: the web endpoint does not answer", podsOrNone(revision))
		<-req.Context().Done()
		return nil, req.Context().Err()
	case outageNaN:
		c.tracef("check of %s: the web endpoint answers null", podsOrNone(revision))
		c.judge.observeCheck(revision, false)
		return webAnswer(req, http.StatusOK, `{"data":{"value":null}}`), nil
	case outageEmpty:
		// Garbage: not JSON, a query error like an outage.
		c.tracef("check of %s: the web endpoint answers garbage", podsOrNone(revision))
		return webAnswer(req, http.StatusOK, `<html>502 Bad Gateway</html>`), nil
	}
	value := 100.0
	if isBadRevision(revision) {
		value = 50
	}
	c.tracef("check of %s: %g (web)", revision, value)
	c.judge.observeCheck(revision, value >= 99)
	return webAnswer(req, http.StatusOK, fmt.Sprintf(`{"data":{"value":%g}}`, value)), nil
}

func webAnswer(req *http.Request, status int, body string) *http.Response {
	return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body)), Header: http.Header{"Content-Type": {"application/json"}}, Request: req}
}

// analysisCannotPass reports a schedule whose analysis can never pass (its query is
// refused): its releases settle on a refusal, not on the new revision.
func (c *campaign) analysisCannotPass() bool { return c.shape.hostileQuery() }
