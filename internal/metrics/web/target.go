package web

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// PathAndQueryHint says what a GET query may be, for error messages.
const PathAndQueryHint = "a path and query on the backend's url, such as /api/v1/x?y=z or ?y=z"

// CheckQuery says whether a rendered GET query stays on the backend's url: a relative path
// and query, never anything that names a scheme, a host, a port or user info. The headers,
// which may hold a credential, go wherever the query points, so the check is strict: a
// backslash in the path, or an encoded // at its start, is refused too, since some servers
// and proxies read two backslashes, or a slash and a backslash, as `//`: another host. Its
// error says what the query must be and why it is not, without the query: callers name it.
func CheckQuery(q string) error {
	q = strings.TrimSpace(q)
	ref, err := url.Parse(q)
	var why string
	switch {
	case err != nil:
		why = fmt.Sprintf("it does not parse: %v", unwrapURLError(err))
	case ref.Scheme != "":
		why = fmt.Sprintf("it is an absolute URL (scheme %q), which would send the request and its headers elsewhere", ref.Scheme)
	case ref.Host != "" || ref.User != nil || strings.HasPrefix(q, "//"):
		why = "it starts with //, which names another host"
	case strings.Contains(ref.Path, `\`):
		why = "its path has a backslash, which some servers read as / and so as another host"
	case strings.HasPrefix(ref.Path, "//"):
		why = "its path starts with an encoded //, which some servers read as another host"
	default:
		return nil
	}
	return fmt.Errorf("must be %s; %s", PathAndQueryHint, why)
}

// unwrapURLError drops the *url.Error's repetition of the query.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
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
		return "", fmt.Errorf("the query %q %w", q, err)
	}
	ref, _ := url.Parse(strings.TrimSpace(q)) // CheckQuery parsed it
	resolved := base.ResolveReference(ref)
	if resolved.Scheme != base.Scheme || resolved.Host != base.Host || resolved.User != nil || strings.HasPrefix(resolved.Path, "//") {
		return "", fmt.Errorf("the query %q must be %s; it resolves to another location", q, PathAndQueryHint)
	}
	return resolved.String(), nil
}
