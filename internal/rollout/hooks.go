package rollout

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/canary-release/terraform-provider-canary/internal/kube"
)

// webhookPayload is Flagger's webhook body.
type webhookPayload struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Phase     Phase             `json:"phase"`
	Checksum  string            `json:"checksum"`
	Metadata  map[string]string `json:"metadata,omitempty"`
}

// hooksOf lists the release's webhooks of one type.
func (a analyzer) hooksOf(hookType string) []Webhook {
	var out []Webhook
	for _, h := range a.rel.Analysis.Webhooks {
		if h.Type == hookType {
			out = append(out, h)
		}
	}
	return out
}

// runHooks calls every webhook of one type, stopping at the first failure.
func (a analyzer) runHooks(ctx context.Context, hookType string, phase Phase, checksum string) *CheckFailure {
	for _, h := range a.hooksOf(hookType) {
		if h.URL == "" {
			continue // a built-in gate: opened by the operator's approval (controls.go)
		}
		if err := a.callHook(ctx, h, phase, checksum); err != nil {
			return &CheckFailure{Check: h.Name, Message: fmt.Sprintf("%s webhook %s failed: %v", h.Type, h.Name, err)}
		}
		a.progress(Progress{Kind: ProgressCheck, Message: fmt.Sprintf("%s webhook %s passed", h.Type, h.Name)})
	}
	return nil
}

// rollbackRequested asks the rollback webhooks; the first that answers success (status ≤ 202)
// names itself. One that fails to answer asks for nothing, as in Flagger.
func (a analyzer) rollbackRequested(ctx context.Context, phase Phase, checksum string) string {
	for _, h := range a.hooksOf(HookRollback) {
		if h.URL != "" && a.callHook(ctx, h, phase, checksum) == nil {
			return h.Name
		}
	}
	return ""
}

// sendEvent gives every event webhook one event, with Flagger's event payload. Failures are
// only logged: an event is news, not a check.
func (a analyzer) sendEvent(ctx context.Context, phase Phase, eventType, message string, at time.Time, note func(string, ...any)) {
	for _, h := range a.hooksOf(HookEvent) {
		if h.URL == "" {
			continue
		}
		event := h
		event.Metadata = map[string]string{}
		for k, v := range h.Metadata {
			event.Metadata[k] = v
		}
		event.Metadata["eventMessage"] = message
		event.Metadata["eventType"] = eventType
		event.Metadata["timestamp"] = strconv.FormatInt(at.UnixMilli(), 10)
		if err := a.callHook(ctx, event, phase, ""); err != nil {
			note("event webhook %s failed: %v", h.Name, err)
		}
	}
}

// defaultHookTimeout is a webhook's timeout when none is set, as in Flagger.
const defaultHookTimeout = 10 * time.Second

func hookTimeout(h Webhook) time.Duration {
	if h.Timeout <= 0 {
		return defaultHookTimeout
	}
	return h.Timeout
}

// callHook posts Flagger's payload; like Flagger, any status above 202 is a failure. A call
// that could not connect, or got a 5xx or 429, is tried again up to h.Retries times.
func (a analyzer) callHook(ctx context.Context, h Webhook, phase Phase, checksum string) error {
	body, err := json.Marshal(webhookPayload{Name: a.rel.Name, Namespace: a.rel.Namespace, Phase: phase, Checksum: checksum, Metadata: h.Metadata})
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		retry, err := a.postHook(ctx, h, body)
		if err == nil || !retry || attempt >= h.Retries {
			return err
		}
		if sleep(ctx, time.Duration(attempt+1)*hookRetryBackoff) != nil {
			return err
		}
	}
}

// hookRetryBackoff is the pause before a webhook's first retry; later ones wait longer.
const hookRetryBackoff = 500 * time.Millisecond

// postHook makes one call; retry says whether another try may succeed.
func (a analyzer) postHook(ctx context.Context, h Webhook, body []byte) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, hookTimeout(h))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.clientFor(h).Do(req)
	if err != nil {
		// net/http's errors quote the whole URL, and incoming-webhook URLs carry their token
		// in the path or the query: name only the endpoint.
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = fmt.Errorf("%s %s: %w", urlErr.Op, endpoint(h.URL), urlErr.Err)
		}
		return ctx.Err() == nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode > http.StatusAccepted {
		text, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests,
			fmt.Errorf("status %d%s", resp.StatusCode, bodyExcerpt(text, h.URL))
	}
	return false, nil
}

// clientFor is the HTTP client of one webhook: the engine's, or one that skips TLS
// verification when the webhook asks for it (disable_tls).
func (a analyzer) clientFor(h Webhook) *http.Client {
	client := a.http
	if client == nil {
		client = http.DefaultClient
	}
	if !h.DisableTLS {
		return client
	}
	if a.insecureHTTP != nil {
		return a.insecureHTTP
	}
	base, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return client
	}
	insecure := base.Clone()
	insecure.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the user asked for it
	return &http.Client{Transport: insecure}
}

// endpoint is a URL without what may be secret: user information, path and query.
func endpoint(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "the webhook URL"
	}
	return u.Scheme + "://" + u.Host
}

// maxBodyExcerpt bounds what of a webhook's answer reaches a message, the status and the
// Terraform state.
const maxBodyExcerpt = 240

// bodyExcerpt is a short, single-line excerpt of a failed webhook's answer, for the message
// that explains the failure. Control characters go, and so does the webhook's own URL, which
// some services echo back.
func bodyExcerpt(body []byte, hookURL string) string {
	text := string(body)
	if message := kube.StatusMessage(body); message != "" {
		// The API server's service proxy refused the call (RBAC, no endpoints): its own
		// message names the missing permission, and is worth more than the JSON around it.
		text = "the API server answered: " + message
	}
	if u, err := url.Parse(hookURL); err == nil && len(u.Path) > 1 {
		text = strings.ReplaceAll(text, u.Path, "/…")
		if u.RawQuery != "" {
			text = strings.ReplaceAll(text, u.RawQuery, "…")
		}
	}
	text = strings.Join(strings.FieldsFunc(text, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	if text == "" {
		return ""
	}
	if runes := []rune(text); len(runes) > maxBodyExcerpt {
		text = string(runes[:maxBodyExcerpt]) + "…"
	}
	return ": " + text
}
