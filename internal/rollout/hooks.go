package rollout

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/webhook"
)

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

// callHook calls one webhook with Flagger's payload (package webhook).
func (a analyzer) callHook(ctx context.Context, h Webhook, phase Phase, checksum string) error {
	return webhook.Client{HTTP: a.http, Insecure: a.insecureHTTP}.Call(ctx,
		webhook.Hook{URL: h.URL, Timeout: h.Timeout, Retries: h.Retries, DisableTLS: h.DisableTLS},
		webhook.Payload{Name: a.rel.Name, Namespace: a.rel.Namespace, Phase: string(phase), Checksum: checksum, Metadata: h.Metadata})
}
