package meshsim

import (
	"sort"
	"strings"
	"time"
)

// Set-Cookie headers the routes add to their answers (Istio's headers.response on a route or a
// destination, a Gateway API ResponseHeaderModifier on a rule or a backendRef), recorded per
// flow as the client receives them, so that a test can judge session affinity from a client's
// point of view: which cookie a request got, from which Service, and whether it expires.

// CookieRecord counts the answers of one flow that carried one Set-Cookie value.
type CookieRecord struct {
	Namespace string `json:"namespace"`
	Apex      string `json:"apex"`
	Mesh      string `json:"mesh"`
	// Tagged requests carry the apex's ab-header and ab-query (abtest.go), a cookie say.
	Tagged bool `json:"tagged"`
	// Object is the router object (Kind/name) whose route answered.
	Object string `json:"object"`
	// Service is the backend Service whose pod answered.
	Service   string    `json:"service"`
	SetCookie string    `json:"setCookie"`
	Count     int64     `json:"count"`
	First     time.Time `json:"first"`
	Last      time.Time `json:"last"`
}

// maxCookieRecords bounds the records kept; the oldest-seen go first.
const maxCookieRecords = 5000

type cookieKey struct {
	flow            flowKey
	object, service string
	setCookie       string
}

// setCookies reads the Set-Cookie values of a header-operations map (Istio's
// headers.response, whose set and add are maps from name to value).
func setCookies(ops map[string]any) []string {
	var out []string
	for _, op := range []string{"set", "add"} {
		for name, v := range mapAt(ops, op) {
			if s, ok := v.(string); ok && strings.EqualFold(name, "Set-Cookie") {
				out = append(out, s)
			}
		}
	}
	return out
}

// gatewaySetCookies reads the Set-Cookie values of the ResponseHeaderModifier filters of a
// rule or a backendRef (set and add are lists of name/value pairs).
func gatewaySetCookies(filters []map[string]any) []string {
	var out []string
	for _, f := range filters {
		if str(f, "type") != "ResponseHeaderModifier" {
			continue
		}
		for _, op := range []string{"set", "add"} {
			for _, h := range maps(f, "responseHeaderModifier", op) {
				if strings.EqualFold(str(h, "name"), "Set-Cookie") {
					out = append(out, str(h, "value"))
				}
			}
		}
	}
	return out
}

// recordCookies notes the Set-Cookie headers of one answer of route r's backend b to flow key.
// Called under s.mu.
func (s *Simulator) recordCookies(now time.Time, key flowKey, r *route, b backend) {
	for _, value := range append(append([]string(nil), r.setCookies...), b.setCookies...) {
		k := cookieKey{flow: key, object: r.object.String(), service: b.service.String(), setCookie: value}
		rec := s.cookies[k]
		if rec == nil {
			if len(s.cookies) >= maxCookieRecords {
				s.forgetOldestCookie()
			}
			rec = &CookieRecord{Namespace: key.apex.Namespace, Apex: key.apex.Name, Mesh: string(key.mesh), Tagged: key.tagged,
				Object: k.object, Service: b.service.Name, SetCookie: value, First: now.UTC()}
			s.cookies[k] = rec
		}
		rec.Count++
		rec.Last = now.UTC()
	}
}

func (s *Simulator) forgetOldestCookie() {
	var oldest cookieKey
	var at time.Time
	for k, rec := range s.cookies {
		if at.IsZero() || rec.Last.Before(at) {
			oldest, at = k, rec.Last
		}
	}
	delete(s.cookies, oldest)
}

// Cookies returns the Set-Cookie records of a namespace (all namespaces when empty), first
// seen first.
func (s *Simulator) Cookies(namespace string) []CookieRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []CookieRecord{}
	for _, rec := range s.cookies {
		if namespace == "" || rec.Namespace == namespace {
			out = append(out, *rec)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].First.Equal(out[j].First) {
			return out[i].First.Before(out[j].First)
		}
		return out[i].SetCookie < out[j].SetCookie
	})
	return out
}
