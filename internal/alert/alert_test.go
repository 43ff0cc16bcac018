package alert

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// token stands for the secret part of a webhook URL.
const token = "XyZzy0123456789SecretToken"

// hook is a webhook endpoint that records what it is sent.
type hook struct {
	*httptest.Server
	mu    sync.Mutex
	posts []post
}

type post struct {
	method, path, query, contentType string
	body                             []byte
}

func newHook(t *testing.T, status int) *hook {
	t.Helper()
	h := &hook{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.posts = append(h.posts, post{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), b})
		h.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hook) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.posts = nil
}

func (h *hook) received() []post {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]post(nil), h.posts...)
}

// only returns the one post h received, decoded into v.
func (h *hook) only(t *testing.T, v any) post {
	t.Helper()
	posts := h.received()
	if len(posts) != 1 {
		t.Fatalf("got %d posts, want 1", len(posts))
	}
	p := posts[0]
	if p.method != http.MethodPost || p.contentType != "application/json" {
		t.Errorf("got %s with Content-Type %q, want a POST of application/json", p.method, p.contentType)
	}
	if err := json.Unmarshal(p.body, v); err != nil {
		t.Fatalf("body %s: %v", p.body, err)
	}
	return p
}

var testEvent = Event{
	Name:      "web",
	Namespace: "shop",
	Phase:     "Progressing",
	Message:   "Halt advancement web.shop: request-success-rate 95 < 99",
	Severity:  "warn",
	Fields:    []Field{{"Target", "Deployment/web.shop"}, {"Canary weight", "20"}},
	Time:      time.UnixMilli(1700000000123),
}

func notify(t *testing.T, p Provider, ev Event) {
	t.Helper()
	n := Notifier{Alerts: []Alert{{Name: "ops", Provider: p}}}
	if errs := n.Notify(context.Background(), ev); errs != nil {
		t.Fatalf("Notify: %v", errs)
	}
}

func TestSlack(t *testing.T) {
	h := newHook(t, http.StatusOK)
	for _, tc := range []struct {
		severity, color string
	}{{"info", "good"}, {"", "good"}, {"warn", "warning"}, {"error", "danger"}} {
		t.Run(tc.severity, func(t *testing.T) {
			h.reset()
			ev := testEvent
			ev.Severity = tc.severity
			notify(t, Provider{Type: "slack", Address: h.URL + "/services/T0/B0/" + token}, ev)
			var m slackMessage
			p := h.only(t, &m)
			if p.path != "/services/T0/B0/"+token {
				t.Errorf("path %q", p.path)
			}
			if m.Channel != "general" || m.Username != "flagger" || m.IconEmoji != ":rocket:" {
				t.Errorf("channel, username, icon = %q, %q, %q; want Flagger's defaults", m.Channel, m.Username, m.IconEmoji)
			}
			if len(m.Attachments) != 1 {
				t.Fatalf("attachments: %+v", m.Attachments)
			}
			a := m.Attachments[0]
			if a.Color != tc.color {
				t.Errorf("color %q, want %q", a.Color, tc.color)
			}
			if want := "Halt advancement web.shop: request-success-rate 95 &lt; 99"; a.Text != want {
				t.Errorf("text %q, want %q", a.Text, want)
			}
			if a.AuthorName != "web.shop" || len(a.MrkdwnIn) != 1 || a.MrkdwnIn[0] != "text" {
				t.Errorf("author_name %q, mrkdwn_in %q", a.AuthorName, a.MrkdwnIn)
			}
			want := []slackField{{"Target", "Deployment/web.shop", false}, {"Canary weight", "20", false}}
			if len(a.Fields) != 2 || a.Fields[0] != want[0] || a.Fields[1] != want[1] {
				t.Errorf("fields %+v, want %+v", a.Fields, want)
			}
		})
	}
}

func TestSlackChannelUsernameAndEmptyFields(t *testing.T) {
	h := newHook(t, http.StatusOK)
	ev := testEvent
	ev.Fields = nil
	notify(t, Provider{Type: "slack", Address: h.URL, Channel: "#deploys", Username: "canary"}, ev)
	var raw map[string]any
	h.only(t, &raw)
	if raw["channel"] != "#deploys" || raw["username"] != "canary" {
		t.Errorf("channel %v, username %v", raw["channel"], raw["username"])
	}
	// Slack wants a list, not null.
	if f := raw["attachments"].([]any)[0].(map[string]any)["fields"]; f == nil {
		t.Errorf("fields is null")
	}
}

func TestDiscord(t *testing.T) {
	for _, tc := range []struct{ path, query, want string }{
		{"/api/webhooks/123/" + token, "", "/api/webhooks/123/" + token + "/slack"},
		{"/api/webhooks/123/" + token + "/slack", "", "/api/webhooks/123/" + token + "/slack"},
		{"/api/webhooks/123/" + token + "/", "wait=true", "/api/webhooks/123/" + token + "/slack"},
	} {
		h := newHook(t, http.StatusOK)
		addr := h.URL + tc.path
		if tc.query != "" {
			addr += "?" + tc.query
		}
		ev := testEvent
		ev.Severity = "error"
		notify(t, Provider{Type: "discord", Address: addr}, ev)
		var m slackMessage
		p := h.only(t, &m)
		if p.path != tc.want || p.query != tc.query {
			t.Errorf("%s: posted to %s?%s, want %s?%s", tc.path, p.path, p.query, tc.want, tc.query)
		}
		// Discord gets the message as written: it does not unescape Slack's entities.
		if len(m.Attachments) != 1 || m.Attachments[0].Text != testEvent.Message || m.Attachments[0].Color != "danger" {
			t.Errorf("attachments %+v", m.Attachments)
		}
	}
}

func TestRocket(t *testing.T) {
	h := newHook(t, http.StatusOK)
	notify(t, Provider{Type: "rocket", Address: h.URL + "/hooks/" + token, Channel: "ops"}, testEvent)
	var m slackMessage
	h.only(t, &m)
	if m.Channel != "ops" || len(m.Attachments) != 1 {
		t.Fatalf("message %+v", m)
	}
	a := m.Attachments[0]
	if a.Color != "#FFA500" || a.Text != testEvent.Message || a.AuthorName != "web.shop" || len(a.Fields) != 2 {
		t.Errorf("attachment %+v", a)
	}
}

func TestMSTeams(t *testing.T) {
	for sev, color := range map[string]string{"info": "0076D7", "warn": "FFA500", "error": "FF0000"} {
		h := newHook(t, http.StatusOK)
		ev := testEvent
		ev.Severity = sev
		notify(t, Provider{Type: "msteams", Address: h.URL + "/webhookb2/" + token}, ev)
		var raw map[string]any
		h.only(t, &raw)
		if raw["@type"] != "MessageCard" || raw["@context"] != "http://schema.org/extensions" {
			t.Errorf("@type %v, @context %v", raw["@type"], raw["@context"])
		}
		if raw["themeColor"] != color || raw["summary"] != "web.shop" {
			t.Errorf("%s: themeColor %v, summary %v", sev, raw["themeColor"], raw["summary"])
		}
		var card teamsCard
		_ = json.Unmarshal(h.received()[0].body, &card)
		if len(card.Sections) != 1 {
			t.Fatalf("sections %+v", card.Sections)
		}
		s := card.Sections[0]
		want := []teamsFact{{"Target", "Deployment/web.shop"}, {"Canary weight", "20"}}
		if s.ActivityTitle != testEvent.Message || s.ActivitySubtitle != "web.shop" ||
			len(s.Facts) != 2 || s.Facts[0] != want[0] || s.Facts[1] != want[1] {
			t.Errorf("section %+v", s)
		}
	}
}

func TestGChat(t *testing.T) {
	h := newHook(t, http.StatusOK)
	notify(t, Provider{Type: "gchat", Address: h.URL + "/v1/spaces/AAAA/messages?key=k3y0123456&token=" + token}, testEvent)
	var m gchatMessage
	p := h.only(t, &m)
	if !strings.Contains(p.query, token) {
		t.Errorf("query %q lost the token", p.query)
	}
	if len(m.Cards) != 1 || m.Cards[0].Header.Subtitle != "web.shop" || m.Cards[0].Header.Title == "" {
		t.Fatalf("cards %+v", m.Cards)
	}
	var texts []string
	for _, s := range m.Cards[0].Sections {
		for _, w := range s.Widgets {
			texts = append(texts, w.TextParagraph.Text)
		}
	}
	want := []string{
		"<b>Halt advancement web.shop: request-success-rate 95 &lt; 99</b>",
		"Target<br><b>Deployment/web.shop</b>",
		"Canary weight<br><b>20</b>",
	}
	if strings.Join(texts, "\n") != strings.Join(want, "\n") {
		t.Errorf("paragraphs %q, want %q", texts, want)
	}
}

func TestGeneric(t *testing.T) {
	for sev, eventType := range map[string]string{"info": "Normal", "": "Normal", "warn": "Warning", "error": "Warning"} {
		h := newHook(t, http.StatusOK)
		ev := testEvent
		ev.Severity = sev
		ev.Fields = append(ev.Fields, Field{"eventType", "not me"})
		notify(t, Provider{Type: "generic", Address: h.URL + "/events"}, ev)
		var raw map[string]any
		h.only(t, &raw)
		checksum, ok := raw["checksum"]
		if raw["name"] != "web" || raw["namespace"] != "shop" || raw["phase"] != "Progressing" || !ok || checksum != "" {
			t.Errorf("payload %v", raw)
		}
		md, _ := raw["metadata"].(map[string]any)
		if md["eventMessage"] != testEvent.Message || md["eventType"] != eventType || md["timestamp"] != "1700000000123" {
			t.Errorf("%q: metadata %v", sev, md)
		}
		if md["Canary weight"] != "20" {
			t.Errorf("fields missing from metadata %v", md)
		}
	}
}

func TestGenericTimestampDefaultsToNow(t *testing.T) {
	h := newHook(t, http.StatusOK)
	ev := testEvent
	ev.Time = time.Time{}
	before := time.Now().UnixMilli()
	notify(t, Provider{Type: "generic", Address: h.URL}, ev)
	var g genericEvent
	h.only(t, &g)
	ts, err := strconv.ParseInt(g.Metadata["timestamp"], 10, 64)
	if err != nil || ts < before || ts > time.Now().UnixMilli() {
		t.Errorf("timestamp %q, want now in ms", g.Metadata["timestamp"])
	}
}

func TestSeverityFilter(t *testing.T) {
	// want[alert severity] lists the event severities it receives.
	want := map[string][]string{
		"":      {"info", "warn", "error"},
		"info":  {"info", "warn", "error"},
		"warn":  {"warn", "error"},
		"error": {"error"},
	}
	hooks := map[string]*hook{}
	var alerts []Alert
	for sev := range want {
		hooks[sev] = newHook(t, http.StatusOK)
		alerts = append(alerts, Alert{Name: "a-" + sev, Severity: sev, Provider: Provider{Type: "generic", Address: hooks[sev].URL}})
	}
	n := Notifier{Alerts: alerts}
	for _, evSev := range Severities {
		ev := testEvent
		ev.Severity = evSev
		if errs := n.Notify(context.Background(), ev); errs != nil {
			t.Fatal(errs)
		}
	}
	for sev, evSevs := range want {
		if got := len(hooks[sev].received()); got != len(evSevs) {
			t.Errorf("alert severity %q received %d events, want %d (%q)", sev, got, len(evSevs), evSevs)
		}
	}
}

func TestProxy(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.String()) // absolute form: the proxy is asked for the target
		mu.Unlock()
	}))
	defer proxy.Close()
	// The target does not exist, so only the proxy can have answered.
	target := "http://hooks.example.invalid/services/T0/B0/" + token
	for _, client := range []*http.Client{nil, {Transport: &http.Transport{}}} {
		n := Notifier{HTTP: client, Alerts: []Alert{{Name: "ops", Provider: Provider{Type: "slack", Address: target, Proxy: proxy.URL}}}}
		if errs := n.Notify(context.Background(), testEvent); errs != nil {
			t.Fatalf("Notify: %v", errs)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != target || seen[1] != target {
		t.Errorf("proxy saw %q, want %q twice", seen, target)
	}
}

// checkSecret fails if err is nil or shows any secret.
func checkSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error %q shows %q", err, s)
		}
	}
}

func TestHTTPErrorHidesToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		// An error page that echoes the request, over several lines and far too long.
		_, _ = io.WriteString(w, "no_service\n\tfor "+r.URL.String()+" (token "+token+")\r\n"+strings.Repeat("x", 500))
	}))
	defer srv.Close()
	n := Notifier{Alerts: []Alert{{Name: "ops", Provider: Provider{Type: "slack", Address: srv.URL + "/services/T0/B0/" + token + "?t=" + token}}}}
	errs := n.Notify(context.Background(), testEvent)
	if len(errs) != 1 {
		t.Fatalf("errors %v, want one", errs)
	}
	err := errs[0]
	checkSecret(t, err, token, "/services/T0/B0/")
	msg := err.Error()
	if !strings.HasPrefix(msg, `alert "ops" (slack): HTTP 500: no_service for `) {
		t.Errorf("error %q does not name the alert, type, status and body", msg)
	}
	if strings.ContainsAny(msg, "\r\n\t") {
		t.Errorf("error %q is not one line", msg)
	}
	if i := strings.Index(msg, "HTTP 500: "); utf8.RuneCountInString(msg[i+len("HTTP 500: "):]) > 120 {
		t.Errorf("excerpt longer than 120: %q", msg)
	}
}

// A secret that straddles the read limit must not leak in part.
func TestExcerptDropsCutSecret(t *testing.T) {
	body := strings.Repeat(" ", bodyLimit-10) + token
	got := excerpt(strings.NewReader(body), secretsOf("http://h/"+token))
	if got != "" {
		t.Errorf("excerpt %q, want none", got)
	}
}

func TestTransportErrorHidesSecrets(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	deadProxy := httptest.NewServer(http.NotFoundHandler())
	deadProxy.Close()
	hostPort := strings.TrimPrefix(deadProxy.URL, "http://")
	for name, p := range map[string]Provider{
		"address": {Type: "msteams", Address: dead.URL + "/webhookb2/" + token + "?code=" + token},
		"proxy":   {Type: "discord", Address: "http://discord.example.invalid/api/webhooks/1/" + token, Proxy: "http://user:" + token + "@" + hostPort},
	} {
		n := Notifier{Alerts: []Alert{{Name: "ops", Provider: p}}}
		errs := n.Notify(context.Background(), testEvent)
		if len(errs) != 1 {
			t.Fatalf("%s: errors %v, want one", name, errs)
		}
		checkSecret(t, errs[0], token, "user:")
		if !strings.HasPrefix(errs[0].Error(), `alert "ops" (`+p.Type+`): `) {
			t.Errorf("%s: error %q does not name the alert", name, errs[0])
		}
	}
}

func TestStatuses(t *testing.T) {
	for _, code := range []int{200, 201, 202, 204} {
		h := newHook(t, code)
		notify(t, Provider{Type: "generic", Address: h.URL}, testEvent)
	}
	// A redirect is a failure, not followed: a redirected POST would arrive as a GET.
	other := newHook(t, http.StatusOK)
	redirect := httptest.NewServer(http.RedirectHandler(other.URL, http.StatusFound))
	defer redirect.Close()
	for _, code := range []int{302, 400, 404} {
		h := newHook(t, code)
		addr := h.URL
		if code == 302 {
			addr = redirect.URL
		}
		errs := Notifier{Alerts: []Alert{{Name: "x", Provider: Provider{Type: "generic", Address: addr}}}}.Notify(context.Background(), testEvent)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "HTTP "+strconv.Itoa(code)) {
			t.Errorf("%d: errors %v", code, errs)
		}
	}
	if len(other.received()) != 0 {
		t.Errorf("redirect was followed")
	}
}

func TestErrorsInAlertOrderAndAllSent(t *testing.T) {
	ok1, bad, ok2 := newHook(t, 200), newHook(t, 503), newHook(t, 200)
	n := Notifier{Alerts: []Alert{
		{Name: "first", Provider: Provider{Type: "generic", Address: ok1.URL}},
		{Name: "broken", Provider: Provider{Type: "generic", Address: bad.URL}},
		{Name: "invalid", Provider: Provider{Type: "pager", Address: ok2.URL}},
		{Name: "last", Provider: Provider{Type: "generic", Address: ok2.URL}},
	}}
	errs := n.Notify(context.Background(), testEvent)
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), `"broken"`) || !strings.Contains(errs[1].Error(), `"invalid"`) {
		t.Fatalf("errors %v", errs)
	}
	if len(ok1.received()) != 1 || len(bad.received()) != 1 || len(ok2.received()) != 1 {
		t.Errorf("not every valid alert was posted to")
	}
}

func TestContextCancel(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	errs := Notifier{Alerts: []Alert{{Name: "ops", Provider: Provider{Type: "slack", Address: srv.URL + "/" + token}}}}.Notify(ctx, testEvent)
	if len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Fatalf("errors %v, want context.Canceled", errs)
	}
	checkSecret(t, errs[0], token)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Notify took %v after cancel", d)
	}
}

func TestDefaultClient(t *testing.T) {
	c, _ := Notifier{}.client("")
	if c.Timeout != DefaultTimeout || c.CheckRedirect == nil {
		t.Errorf("default client: timeout %v, follows redirects: %v", c.Timeout, c.CheckRedirect == nil)
	}
	mine := &http.Client{}
	if c, _ := (Notifier{HTTP: mine}).client(""); c != mine {
		t.Errorf("HTTP is not used")
	}
}

func TestValidate(t *testing.T) {
	valid := Alert{Name: "ops", Severity: "warn", Provider: Provider{Type: "slack", Address: "https://hooks.slack.com/services/T0/B0/" + token}}
	if err := Validate(valid); err != nil {
		t.Errorf("valid alert: %v", err)
	}
	for _, typ := range Types {
		a := valid
		a.Severity, a.Provider.Type, a.Provider.Proxy = "", typ, "http://proxy:3128"
		if err := Validate(a); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
	}
	for _, tc := range []struct {
		change func(*Alert)
		want   string
	}{
		{func(a *Alert) { a.Name = "" }, `alert: name must not be empty`},
		{func(a *Alert) { a.Severity = "critical" }, `alert "ops": severity "critical" is not one of info, warn, error`},
		{func(a *Alert) { a.Severity = "Warn" }, `alert "ops": severity "Warn" is not one of info, warn, error`},
		{func(a *Alert) { a.Provider.Type = "teams" }, `alert "ops": provider.type "teams" is not one of slack, msteams, discord, rocket, gchat, generic`},
		{func(a *Alert) { a.Provider.Type = "" }, `alert "ops": provider.type "" is not one of slack, msteams, discord, rocket, gchat, generic`},
		{func(a *Alert) { a.Provider.Address = "" }, `alert "ops": provider.address must be set to an http:// or https:// URL`},
		{func(a *Alert) { a.Provider.Address = "hooks.slack.com/services/" + token }, `alert "ops": provider.address must be an http:// or https:// URL with a host`},
		{func(a *Alert) { a.Provider.Address = "ftp://hooks.slack.com/" + token }, `alert "ops": provider.address must be an http:// or https:// URL with a host`},
		{func(a *Alert) { a.Provider.Address = "https:///" + token }, `alert "ops": provider.address must be an http:// or https:// URL with a host`},
		{func(a *Alert) { a.Provider.Address = "https://h/%zz" + token }, `alert "ops": provider.address must be an http:// or https:// URL with a host`},
		{func(a *Alert) { a.Provider.Proxy = "socks5://u:" + token + "@proxy:1080" }, `alert "ops": provider.proxy must be an http:// or https:// URL with a host`},
		{func(a *Alert) { a.Provider.Proxy = "proxy:3128" }, `alert "ops": provider.proxy must be an http:// or https:// URL with a host`},
	} {
		a := valid
		tc.change(&a)
		err := Validate(a)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Validate(%+v) = %v, want %q", a, err, tc.want)
		}
		checkSecret(t, err, token)
	}
}

// TestAlertWithoutAddressIsLeftOut: an alert whose address is write-only has none in a destroy,
// which has no configuration; it is left out, not reported as a failed delivery, and the others
// are still sent.
func TestAlertWithoutAddressIsLeftOut(t *testing.T) {
	h := newHook(t, http.StatusOK)
	n := Notifier{Alerts: []Alert{
		{Name: "write-only", Provider: Provider{Type: "slack"}},
		{Name: "team", Provider: Provider{Type: "generic", Address: h.URL}},
	}}
	if errs := n.Notify(context.Background(), testEvent); errs != nil {
		t.Errorf("Notify = %v, want no failure for an alert without address", errs)
	}
	if got := len(h.received()); got != 1 {
		t.Errorf("the alert with an address received %d events, want 1", got)
	}
}
