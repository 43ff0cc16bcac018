// Package alert sends a release's alerts to chat services, as Flagger's AlertProviders do.
//
// An Alert names a provider (Slack, Microsoft Teams, Discord, Rocket.Chat, Google Chat, or a
// generic JSON webhook) and the least severity it wants to hear about. Notifier.Notify posts an
// Event to every alert whose severity admits it, in the payload that service's incoming
// webhook expects (the shapes Flagger's notifier sends), and returns one error per failed
// delivery. A failed alert never fails a release: the caller reports the errors as warnings.
//
// Webhook addresses carry tokens (Slack, Discord, Teams and Google Chat put them in the
// path or query), and proxies may carry passwords, so no error from this package quotes them.
package alert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Types are the provider types: Flagger's, plus "generic", which posts Flagger's event
// webhook payload to any HTTP endpoint.
var Types = []string{"slack", "msteams", "discord", "rocket", "gchat", "generic"}

// Severities are the alert and event severities, least severe first.
var Severities = []string{"info", "warn", "error"}

// DefaultTimeout bounds one delivery when Notifier.HTTP is nil.
const DefaultTimeout = 10 * time.Second

// Provider says where and how an alert is posted.
type Provider struct {
	Type    string // one of Types
	Address string // the webhook URL; secret
	// Channel and Username override the webhook's defaults for slack, discord and rocket;
	// empty means Flagger's defaults, "general" and "flagger". Other types ignore them.
	Channel  string
	Username string
	Proxy    string // optional http(s) proxy URL for this provider only
}

// Alert is one entry of analysis.alerts.
type Alert struct {
	Name string
	// Severity is the least severe event the alert receives: "info" (or empty) gets every
	// event, "warn" gets warn and error, "error" only error.
	Severity string
	Provider Provider
}

// Event is one thing to tell the alerts about.
type Event struct {
	Name, Namespace string // the release
	Phase           string // Flagger phase at the time, e.g. "Progressing"
	Message         string
	Severity        string    // info | warn | error; empty means info
	Fields          []Field   // ordered key/values shown under the message
	Time            time.Time // zero means now; only the generic payload carries it
}

// Field is one key/value shown in a message, e.g. "Canary weight" = "20".
type Field struct{ Name, Value string }

// Notifier sends events to a release's alerts. Delivery failures are returned, never fatal;
// the caller turns them into warnings.
type Notifier struct {
	Alerts []Alert
	// HTTP posts the payloads; nil means a client with DefaultTimeout that does not follow
	// redirects (a redirected POST would silently become a GET). For a provider with a proxy,
	// a copy of HTTP is used whose transport is a clone of its *http.Transport (or of
	// http.DefaultTransport if it has another RoundTripper) with that proxy.
	HTTP *http.Client
}

// Notify posts ev to every alert whose severity admits it, concurrently, and waits for all.
// It returns one error per failed delivery, in the order of Alerts, each naming the alert
// and its type but never its address; nil if all succeeded. A delivery succeeds on any 2xx.
// Errors caused by ctx wrap ctx.Err().
func (n Notifier) Notify(ctx context.Context, ev Event) []error {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	errs := make([]error, len(n.Alerts))
	var wg sync.WaitGroup
	for i, a := range n.Alerts {
		// No address: a write-only one (address_wo) that this operation was not given, as a
		// destroy is not; the alert is left out rather than failed.
		if a.Provider.Address == "" {
			continue
		}
		if admits(a.Severity, ev.Severity) {
			wg.Go(func() { errs[i] = n.send(ctx, a, ev) })
		}
	}
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	return failed
}

// rank orders severities; unknown ones count as info.
func rank(severity string) int { return max(0, slices.Index(Severities, severity)) }

// admits says whether an alert of severity alertSev receives an event of severity evSev:
// events at or above the alert's severity, as Flagger filters them.
func admits(alertSev, evSev string) bool { return rank(evSev) >= rank(alertSev) }

// Validate checks an alert at plan time: a name, a known type and severity, and http(s)
// URLs for the address and the proxy. Its errors name the alert and the field and say what
// is allowed; they never quote the address or the proxy.
func Validate(a Alert) error {
	if a.Name == "" {
		return errors.New("alert: name must not be empty")
	}
	if a.Severity != "" && !slices.Contains(Severities, a.Severity) {
		return fmt.Errorf("alert %q: severity %q is not one of %s", a.Name, a.Severity, strings.Join(Severities, ", "))
	}
	p := a.Provider
	if !slices.Contains(Types, p.Type) {
		return fmt.Errorf("alert %q: provider.type %q is not one of %s", a.Name, p.Type, strings.Join(Types, ", "))
	}
	if p.Address == "" {
		return fmt.Errorf("alert %q: provider.address must be set to an http:// or https:// URL", a.Name)
	}
	if !isHTTPURL(p.Address) {
		return fmt.Errorf("alert %q: provider.address must be an http:// or https:// URL with a host", a.Name)
	}
	if p.Proxy != "" && !isHTTPURL(p.Proxy) {
		return fmt.Errorf("alert %q: provider.proxy must be an http:// or https:// URL with a host", a.Name)
	}
	return nil
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// send posts ev to one alert.
func (n Notifier) send(ctx context.Context, a Alert, ev Event) error {
	if err := Validate(a); err != nil {
		return err
	}
	p := a.Provider
	who := fmt.Sprintf("alert %q (%s)", a.Name, p.Type)
	target, body, err := request(p, ev)
	if err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	secrets := secretsOf(p.Address, target, p.Proxy)

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: building the request failed", who) // err quotes the URL
	}
	req.Header.Set("Content-Type", "application/json")
	client, done := n.client(p.Proxy)
	defer done()
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", who, ctx.Err())
		}
		// A *url.Error quotes the URL; its cause (a dial or TLS error) names the host at most,
		// but is redacted anyway in case it echoes more.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%s: %s", who, redact(err.Error(), secrets))
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, bodyLimit)) // lets the connection be reused
		return nil
	}
	return fmt.Errorf("%s: HTTP %d%s", who, resp.StatusCode, excerpt(resp.Body, secrets))
}

// client returns the client for a provider and a func to call when done with it.
func (n Notifier) client(proxy string) (*http.Client, func()) {
	c := n.HTTP
	if c == nil {
		c = &http.Client{
			Timeout:       DefaultTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	u, err := url.Parse(proxy)
	if proxy == "" || err != nil { // Validate has rejected a bad proxy
		return c, func() {}
	}
	t, ok := c.Transport.(*http.Transport)
	if !ok {
		if t, ok = http.DefaultTransport.(*http.Transport); !ok {
			return c, func() {}
		}
	}
	t = t.Clone()
	t.Proxy = http.ProxyURL(u)
	withProxy := *c
	withProxy.Transport = t
	// The transport lives for one delivery; close its connections rather than leak them.
	return &withProxy, t.CloseIdleConnections
}

const (
	bodyLimit  = 4 << 10 // bytes of an error response read for the excerpt
	excerptMax = 120     // runes of it kept
	minSecret  = 6       // shorter path segments and query values are not taken for tokens
)

// secretsOf lists what must not appear in an error: the URLs themselves, their path
// segments and query values (where webhooks keep tokens) and passwords. Short segments and
// values ("v1", "api") are left, lest every error be starred. Longest first, so a URL is
// replaced whole before its parts.
func secretsOf(urls ...string) []string {
	var s []string
	add := func(v string, shortest int) {
		if len(v) >= shortest {
			s = append(s, v)
		}
	}
	for _, raw := range urls {
		add(raw, 1)
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		for seg := range strings.SplitSeq(u.EscapedPath(), "/") {
			add(seg, minSecret)
			if dec, err := url.PathUnescape(seg); err == nil {
				add(dec, minSecret)
			}
		}
		add(u.RawQuery, minSecret)
		for _, vs := range u.Query() {
			for _, v := range vs {
				add(v, minSecret)
			}
		}
		add(u.Fragment, minSecret)
		if u.User != nil {
			add(u.User.String(), 1)
			add(u.User.Username(), minSecret)
			pw, _ := u.User.Password()
			add(pw, 1) // however short: a password is always secret
		}
	}
	sort.Slice(s, func(i, j int) bool { return len(s[i]) > len(s[j]) })
	return slices.Compact(s)
}

func redact(s string, secrets []string) string {
	for _, x := range secrets {
		s = strings.ReplaceAll(s, x, "***")
	}
	return s
}

// excerpt returns ": " and the start of an error response on one line, redacted, or "".
func excerpt(r io.Reader, secrets []string) string {
	b, _ := io.ReadAll(io.LimitReader(r, bodyLimit))
	s := string(b)
	if len(b) == bodyLimit && len(secrets) > 0 {
		// A secret cut at the limit would not be found; drop any such tail.
		s = s[:max(0, len(s)-len(secrets[0]))]
	}
	s = redact(s, secrets)
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }), " ")
	if s == "" {
		return ""
	}
	if r := []rune(s); len(r) > excerptMax {
		s = string(r[:excerptMax-1]) + "…"
	}
	return ": " + s
}
