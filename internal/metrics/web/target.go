package web

import (
	"fmt"
	"net/url"
	"strings"
)

// PathAndQueryHint says what a GET query may be, for error messages.
const PathAndQueryHint = "a path and query on the backend's url, such as /api/v1/x?y=z or ?y=z"

// CheckQuery says whether a rendered GET query stays on the backend's url: a relative path
// and query, never anything that names a scheme, a host, a port or user info. The headers,
// which may hold a credential, go wherever the query points, so the check is strict: a
// backslash or an empty segment at the start of the path is refused too, since some servers
// and proxies read `\\other` or `/\other` as `//other`, another host.
func CheckQuery(q string) error {
	q = strings.TrimSpace(q)
	ref, err := url.Parse(q)
	switch {
	case err != nil:
		return fmt.Errorf("the query %q must be %s; it does not parse: %v", q, PathAndQueryHint, unwrapURLError(err))
	case ref.Scheme != "":
		return fmt.Errorf("the query %q must be %s; it is an absolute URL (scheme %q), which would send the request and its headers elsewhere", q, PathAndQueryHint, ref.Scheme)
	case ref.Host != "" || ref.User != nil || strings.HasPrefix(q, "//"):
		return fmt.Errorf("the query %q must be %s; it starts with //, which names another host", q, PathAndQueryHint)
	case strings.Contains(ref.Path, `\`):
		return fmt.Errorf("the query %q must be %s; its path has a backslash, which some servers read as / and so as another host", q, PathAndQueryHint)
	case strings.HasPrefix(ref.Path, "//"):
		return fmt.Errorf("the query %q must be %s; its path starts with an encoded //, which some servers read as another host", q, PathAndQueryHint)
	}
	return nil
}

// unwrapURLError drops the *url.Error's repetition of the query.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// target is the URL a GET query asks: q resolved against base, after CheckQuery. The result
// is compared with base again, so that no resolution rule can move the request elsewhere.
func target(base *url.URL, q string) (string, error) {
	if strings.TrimSpace(q) == "" {
		return base.String(), nil
	}
	if err := CheckQuery(q); err != nil {
		return "", err
	}
	ref, _ := url.Parse(strings.TrimSpace(q)) // CheckQuery parsed it
	resolved := base.ResolveReference(ref)
	if resolved.Scheme != base.Scheme || resolved.Host != base.Host || resolved.User != nil || strings.HasPrefix(resolved.Path, "//") {
		return "", fmt.Errorf("the query %q must be %s; it resolves to another location", q, PathAndQueryHint)
	}
	return resolved.String(), nil
}
