// Package webhook calls Flagger-style webhooks: it posts Flagger's payload, retries what may
// succeed on another try, and keeps the webhook's URL, which may carry a token, out of every
// error. When a run calls which webhook is the engine's concern.
package webhook

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
	"strings"
	"time"
	"unicode"

	"github.com/canary-release/terraform-provider-canary/internal/kube"
)

// Payload is Flagger's webhook body.
type Payload struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Phase     string            `json:"phase"`
	Checksum  string            `json:"checksum"`
	Metadata  map[string]string `json:"metadata,omitempty"`
}

// Hook is where and how one webhook is called.
type Hook struct {
	URL     string
	Timeout time.Duration
	// Retries is how many more times a call that could not connect or got a 5xx or 429 is
	// tried, as Flagger's retries.
	Retries int
	// DisableTLS skips the verification of the webhook's TLS certificate.
	DisableTLS bool
}

// Client calls webhooks.
type Client struct {
	// HTTP is the client of the calls; nil is http.DefaultClient.
	HTTP *http.Client
	// Insecure calls the webhooks with DisableTLS; nil builds one when needed.
	Insecure *http.Client
}

// defaultTimeout is a webhook's timeout when none is set, as in Flagger.
const defaultTimeout = 10 * time.Second

// Timeout is how long a call of a webhook with timeout set to timeout may take.
func Timeout(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return defaultTimeout
	}
	return timeout
}

// Call posts p to h; like Flagger, any status above 202 is a failure. A call that could not
// connect, or got a 5xx or 429, is tried again up to h.Retries times.
func (c Client) Call(ctx context.Context, h Hook, p Payload) error {
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		retry, err := c.post(ctx, h, body)
		if err == nil || !retry || attempt >= h.Retries {
			return err
		}
		if sleep(ctx, time.Duration(attempt+1)*retryBackoff) != nil {
			return err
		}
	}
}

// retryBackoff is the pause before a webhook's first retry; later ones wait longer.
const retryBackoff = 500 * time.Millisecond

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// post makes one call; retry says whether another try may succeed.
func (c Client) post(ctx context.Context, h Hook, body []byte) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout(h.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.clientFor(h).Do(req)
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
func (c Client) clientFor(h Hook) *http.Client {
	client := c.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	if !h.DisableTLS {
		return client
	}
	if c.Insecure != nil {
		return c.Insecure
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
