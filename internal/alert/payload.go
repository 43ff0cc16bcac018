package alert

import (
	"encoding/json"
	"errors"
	"html"
	"net/url"
	"strconv"
	"strings"
)

// Flagger's defaults for the Slack-style providers' channel and username.
const (
	defaultChannel  = "general"
	defaultUsername = "flagger"
)

// request returns where to post ev for p and the JSON to post.
func request(p Provider, ev Event) (target string, body []byte, err error) {
	target = p.Address
	var payload any
	switch p.Type {
	case "slack":
		payload = slack(p, ev, slackColors, slackEscape)
	case "discord":
		// Discord takes Slack payloads at its webhook URL + "/slack".
		if target, err = discordURL(p.Address); err != nil {
			return "", nil, err
		}
		payload = slack(p, ev, slackColors, nil)
	case "rocket":
		// Rocket.Chat takes Slack payloads but CSS colors, not Slack's color names.
		payload = slack(p, ev, hexColors, nil)
	case "msteams":
		payload = teams(ev)
	case "gchat":
		payload = gchat(ev)
	case "generic":
		payload = generic(ev)
	default:
		return "", nil, errors.New("unknown provider type") // Validate rejects it first
	}
	body, err = json.Marshal(payload)
	return target, body, err
}

func discordURL(address string) (string, error) {
	u, err := url.Parse(address)
	if err != nil {
		return "", errors.New("invalid address") // err quotes it
	}
	if !strings.HasSuffix(u.Path, "/slack") {
		u = u.JoinPath("slack")
	}
	return u.String(), nil
}

// colors maps a severity (by rank) to a color.
type colors [3]string

var (
	slackColors = colors{"good", "warning", "danger"}
	hexColors   = colors{"#0076D7", "#FFA500", "#FF0000"}
)

func (c colors) of(severity string) string { return c[rank(severity)] }

func release(ev Event) string { return ev.Name + "." + ev.Namespace }

// Slack's incoming-webhook message with one attachment, as Flagger sends it.
type slackMessage struct {
	Channel     string            `json:"channel"`
	Username    string            `json:"username"`
	IconEmoji   string            `json:"icon_emoji,omitempty"`
	Attachments []slackAttachment `json:"attachments"`
}

type slackAttachment struct {
	Color      string       `json:"color"`
	AuthorName string       `json:"author_name"`
	Text       string       `json:"text"`
	MrkdwnIn   []string     `json:"mrkdwn_in"`
	Fields     []slackField `json:"fields"`
}

type slackField struct {
	Title string `json:"title"`
	Value string `json:"value"`
	Short bool   `json:"short"`
}

// slackEscape escapes the three characters Slack's mrkdwn reserves for links and mentions,
// so that a message like "rate 95 < 99" is shown as written. Discord and Rocket.Chat do not
// unescape them, so only Slack gets it.
var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace

func slack(p Provider, ev Event, c colors, escape func(string) string) slackMessage {
	if escape == nil {
		escape = func(s string) string { return s }
	}
	m := slackMessage{Channel: p.Channel, Username: p.Username, IconEmoji: ":rocket:"}
	if m.Channel == "" {
		m.Channel = defaultChannel
	}
	if m.Username == "" {
		m.Username = defaultUsername
	}
	fields := make([]slackField, 0, len(ev.Fields))
	for _, f := range ev.Fields {
		fields = append(fields, slackField{Title: f.Name, Value: escape(f.Value)})
	}
	m.Attachments = []slackAttachment{{
		Color:      c.of(ev.Severity),
		AuthorName: release(ev),
		Text:       escape(ev.Message),
		MrkdwnIn:   []string{"text"},
		Fields:     fields,
	}}
	return m
}

// An Office 365 connector MessageCard, as Flagger sends it to Teams.
type teamsCard struct {
	Type       string         `json:"@type"`
	Context    string         `json:"@context"`
	ThemeColor string         `json:"themeColor"`
	Summary    string         `json:"summary"`
	Sections   []teamsSection `json:"sections"`
}

type teamsSection struct {
	ActivityTitle    string      `json:"activityTitle"`
	ActivitySubtitle string      `json:"activitySubtitle"`
	Facts            []teamsFact `json:"facts"`
}

type teamsFact struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

func teams(ev Event) teamsCard {
	facts := make([]teamsFact, 0, len(ev.Fields))
	for _, f := range ev.Fields {
		facts = append(facts, teamsFact(f))
	}
	return teamsCard{
		Type:       "MessageCard",
		Context:    "http://schema.org/extensions",
		ThemeColor: strings.TrimPrefix(hexColors.of(ev.Severity), "#"),
		Summary:    release(ev),
		Sections:   []teamsSection{{ActivityTitle: ev.Message, ActivitySubtitle: release(ev), Facts: facts}},
	}
}

// A Google Chat message with one (v1) card, as Flagger sends it: the message, then one
// section per field.
type gchatMessage struct {
	Cards []gchatCard `json:"cards"`
}

type gchatCard struct {
	Header   gchatHeader    `json:"header"`
	Sections []gchatSection `json:"sections"`
}

type gchatHeader struct {
	Title    string `json:"title"`
	Subtitle string `json:"subtitle"`
}

type gchatSection struct {
	Widgets []gchatWidget `json:"widgets"`
}

type gchatWidget struct {
	TextParagraph gchatText `json:"textParagraph"`
}

type gchatText struct {
	Text string `json:"text"`
}

func gchat(ev Event) gchatMessage {
	// textParagraph takes a little HTML, so the text is escaped.
	paragraph := func(s string) gchatSection {
		return gchatSection{Widgets: []gchatWidget{{TextParagraph: gchatText{Text: s}}}}
	}
	sections := []gchatSection{paragraph("<b>" + html.EscapeString(ev.Message) + "</b>")}
	for _, f := range ev.Fields {
		sections = append(sections, paragraph(html.EscapeString(f.Name)+"<br><b>"+html.EscapeString(f.Value)+"</b>"))
	}
	return gchatMessage{Cards: []gchatCard{{
		Header:   gchatHeader{Title: "Canary release", Subtitle: release(ev)},
		Sections: sections,
	}}}
}

// Flagger's event webhook payload. Flagger hashes the canary's spec into checksum; there is
// no such hash here, so it is empty.
type genericEvent struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Phase     string            `json:"phase"`
	Checksum  string            `json:"checksum"`
	Metadata  map[string]string `json:"metadata"`
}

func generic(ev Event) genericEvent {
	eventType := "Normal" // the Kubernetes event type Flagger records with the message
	if rank(ev.Severity) > 0 {
		eventType = "Warning"
	}
	md := map[string]string{
		"eventMessage": ev.Message,
		"eventType":    eventType,
		"timestamp":    strconv.FormatInt(ev.Time.UnixMilli(), 10),
	}
	// Fields go in too, as Flagger adds a webhook's own metadata, never replacing its keys.
	for _, f := range ev.Fields {
		if _, taken := md[f.Name]; !taken {
			md[f.Name] = f.Value
		}
	}
	return genericEvent{Name: ev.Name, Namespace: ev.Namespace, Phase: ev.Phase, Metadata: md}
}
