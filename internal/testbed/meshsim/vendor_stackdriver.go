package meshsim

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/model"
)

// Google Cloud Monitoring's timeSeries:query (REST, MQL), POST /v3/projects/<p>/timeSeries:query
// with a bearer token from POST /oauth2/token (a service account key's token_uri; the JWT
// assertion is accepted unchecked, the token is then required).
//
// The MQL subset it answers, a table operation per `|`:
//
//	fetch k8s_container
//	| metric 'istio.io/service/server/request_count'        (requests; or .../response_latencies, ms)
//	| filter metric.destination_workload_namespace == 'ns' && metric.destination_workload_name == 'w'
//	| within 1m                                              (the window, ending now; required)
//	| every 1m                                               (accepted; one point is returned)
//	| group_by [], [value: sum(value.request_count)]         (sum or aggregate of request_count;
//	                                                         percentile(value.response_latencies, 99),
//	                                                         mean(...) or max(...) of response_latencies)
//
// and `{ <table> ; <table> } | ratio` (the first divided by the second; operations after the
// braces, such as `| within 1m`, apply to both). Filter conditions are joined by &&: label
// == / != 'string' and =~ 'regex' on destination_workload_namespace and
// destination_workload_name, and == != < <= > >= number on response_code (answers are 200
// or, for 5xx, 500). No requests in the window, or a ratio over 0, gives no time series.

const stackdriverTokenPath = "/oauth2/token"

// stackdriverTokens are the access tokens the token endpoint gave out.
type stackdriverTokens struct {
	mu     sync.Mutex
	issued map[string]bool
}

func (t *stackdriverTokens) issue() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	tok := "meshsim-" + hex.EncodeToString(b)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.issued == nil {
		t.issued = map[string]bool{}
	}
	t.issued[tok] = true
	return tok
}

func (t *stackdriverTokens) valid(tok string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.issued[tok]
}

var sdTokens stackdriverTokens

func serveStackdriverToken(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" || r.PostForm.Get("assertion") == "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"a JWT bearer assertion is required"}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": sdTokens.issue(), "token_type": "Bearer", "expires_in": 3600})
}

func sdError(w http.ResponseWriter, code int, status, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": message, "status": status}})
}

func (s *Simulator) serveStackdriver(w http.ResponseWriter, r *http.Request) {
	if !sdTokens.valid(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")) {
		sdError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
		return
	}
	var body struct {
		Query string `json:"query"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		sdError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "the body is not a QueryTimeSeriesRequest")
		return
	}
	now := time.Now()
	value, isInt, found, err := s.samples.mql(body.Query, now)
	if err != nil {
		sdError(w, http.StatusBadRequest, "INVALID_ARGUMENT", err.Error())
		return
	}
	valueType := "DOUBLE"
	if isInt {
		valueType = "INT64"
	}
	out := map[string]any{
		"timeSeriesDescriptor": map[string]any{
			"labelDescriptors": []any{},
			"pointDescriptors": []any{map[string]any{"key": "value", "valueType": valueType, "metricKind": "GAUGE"}},
		},
	}
	if found {
		tv := map[string]any{"doubleValue": value}
		if isInt {
			tv = map[string]any{"int64Value": strconv.FormatInt(int64(value), 10)}
		}
		out["timeSeriesData"] = []any{map[string]any{
			"labelValues": []any{},
			"pointData": []any{map[string]any{
				"values":       []any{tv},
				"timeInterval": map[string]any{"endTime": now.UTC().Format(time.RFC3339Nano)},
			}},
		}}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// splitTop splits s at sep outside quotes, braces, brackets and parentheses.
func splitTop(s string, sep byte) []string {
	var parts []string
	depth, quote, start := 0, byte(0), 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '{' || c == '[' || c == '(':
			depth++
		case c == '}' || c == ']' || c == ')':
			depth--
		case c == sep && depth == 0:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// mqlTable is one parsed table operation chain.
type mqlTable struct {
	metric    string
	keep      []func(w workloadKey, code int) bool
	within    time.Duration
	stat      statistic
	pct       float64
	aggregate bool
}

var (
	mqlMetric  = regexp.MustCompile(`^metric\s+'([^']+)'$`)
	mqlGroupBy = regexp.MustCompile(`^group_by\s*\[\s*\]\s*,\s*\[\s*(?:[A-Za-z_][\w]*\s*:\s*)?(\w+)\(\s*value\.(\w+)\s*(?:,\s*([\d.]+)\s*)?\)\s*\]$`)
	mqlCond    = regexp.MustCompile(`^(?:metric|resource)\.(\w+)\s*(==|!=|=~|<=|>=|<|>)\s*(?:'([^']*)'|(\d+))$`)
)

// mql runs a query of the subset at now: its value, whether it is an integer, whether there
// is a value at all.
func (v *vendorSamples) mql(q string, now time.Time) (float64, bool, bool, error) {
	q = strings.TrimSpace(q)
	if q == "" {
		return 0, false, false, fmt.Errorf("the query is empty")
	}
	if strings.HasPrefix(q, "{") {
		end := strings.LastIndex(q, "}")
		if end < 0 {
			return 0, false, false, fmt.Errorf("missing }")
		}
		inner, after := q[1:end], splitTop(q[end+1:], '|')
		tables := splitTop(inner, ';')
		if len(tables) != 2 || strings.TrimSpace(after[0]) != "" || len(after) < 2 || strings.TrimSpace(after[1]) != "ratio" {
			return 0, false, false, fmt.Errorf("the simulator knows `{ <table> ; <table> } | ratio` only")
		}
		var vals [2]float64
		for i, t := range tables {
			tab, err := parseMQLTable(t + "|" + strings.Join(after[2:], "|"))
			if err != nil {
				return 0, false, false, err
			}
			val, ok := v.mqlValue(tab, now)
			if !ok {
				return 0, false, false, nil
			}
			vals[i] = val
		}
		if vals[1] == 0 {
			return 0, false, false, nil
		}
		return vals[0] / vals[1], false, true, nil
	}
	tab, err := parseMQLTable(q)
	if err != nil {
		return 0, false, false, err
	}
	val, ok := v.mqlValue(tab, now)
	return val, tab.stat == statRequests, ok, nil
}

func parseMQLTable(q string) (*mqlTable, error) {
	t := &mqlTable{}
	for i, op := range splitTop(q, '|') {
		op = strings.Join(strings.Fields(op), " ")
		switch {
		case op == "":
			if i == 0 {
				return nil, fmt.Errorf("a table starts with fetch k8s_container")
			}
		case i == 0:
			if op != "fetch k8s_container" {
				return nil, fmt.Errorf("the simulator fetches k8s_container only, not %q", op)
			}
		case mqlMetric.MatchString(op):
			t.metric = mqlMetric.FindStringSubmatch(op)[1]
		case strings.HasPrefix(op, "filter "):
			for _, c := range strings.Split(strings.Trim(strings.TrimPrefix(op, "filter "), "() "), "&&") {
				keep, err := mqlCondition(strings.Trim(strings.TrimSpace(c), "()"))
				if err != nil {
					return nil, err
				}
				t.keep = append(t.keep, keep)
			}
		case strings.HasPrefix(op, "within "):
			d, err := model.ParseDuration(strings.TrimPrefix(op, "within "))
			if err != nil {
				return nil, fmt.Errorf("within: %v", err)
			}
			t.within = time.Duration(d)
		case strings.HasPrefix(op, "every "):
		case mqlGroupBy.MatchString(op):
			m := mqlGroupBy.FindStringSubmatch(op)
			if err := t.setAggregate(m[1], m[2], m[3]); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("the simulator's MQL subset has no operation %q", op)
		}
	}
	switch {
	case t.metric == "":
		return nil, fmt.Errorf("the table needs | metric '...'")
	case t.within <= 0:
		return nil, fmt.Errorf("the table needs | within <duration>")
	case !t.aggregate:
		return nil, fmt.Errorf("the table needs | group_by [], [...] to aggregate to one number")
	}
	return t, nil
}

func (t *mqlTable) setAggregate(fn, field, arg string) error {
	t.aggregate = true
	switch {
	case t.metric == "istio.io/service/server/request_count" && field == "request_count" && (fn == "sum" || fn == "aggregate"):
		t.stat = statRequests
	case t.metric == "istio.io/service/server/response_latencies" && field == "response_latencies":
		switch fn {
		case "percentile":
			p, err := strconv.ParseFloat(arg, 64)
			if err != nil || p <= 0 || p > 100 {
				return fmt.Errorf("percentile needs a number in (0, 100]")
			}
			t.stat, t.pct = statP, p
		case "mean":
			t.stat = statMean
		case "max":
			t.stat = statMax
		default:
			return fmt.Errorf("response_latencies aggregates with percentile, mean or max, not %s", fn)
		}
	default:
		return fmt.Errorf("the simulator's metrics are istio.io/service/server/request_count (sum) and istio.io/service/server/response_latencies; %s(value.%s) does not fit %q", fn, field, t.metric)
	}
	return nil
}

func mqlCondition(c string) (func(workloadKey, int) bool, error) {
	m := mqlCond.FindStringSubmatch(c)
	if m == nil {
		return nil, fmt.Errorf("the simulator cannot read the filter condition %q", c)
	}
	label, op, str, num := m[1], m[2], m[3], m[4]
	if label == "response_code" {
		n, err := strconv.Atoi(num)
		if err != nil || op == "=~" {
			return nil, fmt.Errorf("response_code compares with a number")
		}
		return func(_ workloadKey, code int) bool {
			switch op {
			case "==":
				return code == n
			case "!=":
				return code != n
			case "<":
				return code < n
			case "<=":
				return code <= n
			case ">":
				return code > n
			}
			return code >= n
		}, nil
	}
	get := map[string]func(workloadKey) string{
		"destination_workload_name":      func(w workloadKey) string { return w.workload },
		"destination_workload_namespace": func(w workloadKey) string { return w.namespace },
		"namespace_name":                 func(w workloadKey) string { return w.namespace },
	}[label]
	if get == nil || num != "" {
		return nil, fmt.Errorf("the simulator filters on destination_workload_name, destination_workload_namespace (strings) and response_code, not %q", c)
	}
	switch op {
	case "==":
		return func(w workloadKey, _ int) bool { return get(w) == str }, nil
	case "!=":
		return func(w workloadKey, _ int) bool { return get(w) != str }, nil
	case "=~":
		re, err := regexp.Compile("^(?:" + str + ")$")
		if err != nil {
			return nil, err
		}
		return func(w workloadKey, _ int) bool { return re.MatchString(get(w)) }, nil
	}
	return nil, fmt.Errorf("strings compare with ==, != or =~")
}

// mqlValue aggregates the table over its window ending at now.
func (v *vendorSamples) mqlValue(t *mqlTable, now time.Time) (float64, bool) {
	keep := func(w workloadKey, code int) bool {
		for _, k := range t.keep {
			if !k(w, code) {
				return false
			}
		}
		return true
	}
	// Answers are 200 or 5xx (counted as 500): each code's share is kept or not.
	ok200 := v.matchWorkloads(func(w workloadKey) bool { return keep(w, 200) })
	ok500 := v.matchWorkloads(func(w workloadKey) bool { return keep(w, 500) })
	from := now.Add(-t.within)
	if t.stat == statRequests {
		a, b := v.between(ok200, from, now), v.between(ok500, from, now)
		n := (a.requests - a.errors) + b.errors
		if a.requests == 0 && b.requests == 0 {
			return 0, false
		}
		return float64(n), true
	}
	sp := v.between(ok200, from, now) // latencies are not split by code in the store
	if sp.requests == 0 {
		return 0, false
	}
	return sp.value(t.stat, t.pct)
}
