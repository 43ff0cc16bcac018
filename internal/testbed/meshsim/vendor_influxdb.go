package meshsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// InfluxDB 2.x's query API, POST /api/v2/query?org=<org> with `Authorization: Token <t>`,
// answering annotated CSV, as influxdb-client-go reads it.
//
// The data: bucket InfluxBucket, measurement "requests", one point per answered request,
// tags namespace, workload and code ("200", or "500" for every 5xx), field duration_ms.
// The Flux subset it answers, one pipe per line or not:
//
//	from(bucket: "meshsim")
//	  |> range(start: -30s)                     (relative start; stop is now)
//	  |> filter(fn: (r) => r._measurement == "requests" and r.workload == "w" and r.code =~ /^5/)
//	  |> count()                                (or sum(), mean(), max(), min(), quantile(q: 0.99))
//
// Filter predicates are joined by `and`: == and != with a string, =~ and !~ with a /regex/, on
// _measurement, _field, namespace, workload and code. count() counts requests; the others read
// duration_ms (and so do not take a code filter). No matching request gives no table at all,
// as Flux does. `buckets() |> limit(n: 1)` (the client's health check) answers no table.

// InfluxBucket is the simulator's bucket.
const InfluxBucket = "meshsim"

var (
	fluxFrom   = regexp.MustCompile(`^from\(\s*bucket\s*:\s*"([^"]*)"\s*\)$`)
	fluxRange  = regexp.MustCompile(`^range\(\s*start\s*:\s*-([0-9a-z]+)\s*(?:,\s*stop\s*:\s*now\(\)\s*)?\)$`)
	fluxFilter = regexp.MustCompile(`^filter\(\s*fn\s*:\s*\(\s*r\s*\)\s*=>\s*(.*)\)$`)
	fluxPred   = regexp.MustCompile(`^r\.(\w+)\s*(==|!=|=~|!~)\s*(?:"([^"]*)"|/((?:[^/\\]|\\.)*)/)$`)
	fluxQuant  = regexp.MustCompile(`^quantile\(\s*q\s*:\s*([0-9.]+)\s*(?:,\s*method\s*:\s*"[a-z_]+"\s*)?\)$`)
	fluxPipe   = regexp.MustCompile(`\|>`)
)

func fluxError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": message})
}

func (s *Simulator) serveInfluxQuery(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Token ") || len(r.Header.Get("Authorization")) == len("Token ") {
		fluxError(w, http.StatusUnauthorized, "unauthorized", "unauthorized access")
		return
	}
	if r.URL.Query().Get("org") == "" {
		fluxError(w, http.StatusBadRequest, "invalid", "Please provide either orgID or org")
		return
	}
	var body struct {
		Query string `json:"query"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		fluxError(w, http.StatusBadRequest, "invalid", "the body is not a query request")
		return
	}
	now := time.Now()
	value, isInt, found, err := s.samples.flux(body.Query, now)
	if err != nil {
		fluxError(w, http.StatusBadRequest, "invalid", "error in query specification: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	if !found {
		_, _ = w.Write([]byte("\r\n"))
		return
	}
	typ, text := "double", strconv.FormatFloat(value, 'f', -1, 64)
	if isInt {
		typ, text = "long", strconv.FormatInt(int64(value), 10)
	}
	fmt.Fprintf(w, "#datatype,string,long,dateTime:RFC3339,dateTime:RFC3339,%s\r\n#group,false,false,true,true,false\r\n#default,_result,,,,\r\n"+
		",result,table,_start,_stop,_value\r\n,,0,%s,%s,%s\r\n\r\n", typ, now.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano), text)
}

// flux runs a query of the subset at now.
func (v *vendorSamples) flux(q string, now time.Time) (value float64, isInt, found bool, err error) {
	steps := fluxPipe.Split(q, -1)
	for i := range steps {
		steps[i] = strings.Join(strings.Fields(steps[i]), " ")
	}
	if steps[0] == "buckets()" {
		return 0, false, false, nil
	}
	m := fluxFrom.FindStringSubmatch(steps[0])
	if m == nil {
		return 0, false, false, fmt.Errorf("a query starts with from(bucket: %q)", InfluxBucket)
	}
	if m[1] != InfluxBucket {
		return 0, false, false, fmt.Errorf("could not find bucket %q", m[1])
	}
	var window time.Duration
	var keeps []func(w workloadKey, code, field, measurement string) bool
	stat, pct, codeFilter := statistic(""), 0.0, false
	for _, step := range steps[1:] {
		switch {
		case fluxRange.MatchString(step):
			d, err := model.ParseDuration(fluxRange.FindStringSubmatch(step)[1])
			if err != nil {
				return 0, false, false, fmt.Errorf("range: %v", err)
			}
			window = time.Duration(d)
		case fluxFilter.MatchString(step):
			for _, p := range strings.Split(fluxFilter.FindStringSubmatch(step)[1], " and ") {
				keep, code, err := fluxPredicate(strings.Trim(strings.TrimSpace(p), "()"))
				if err != nil {
					return 0, false, false, err
				}
				codeFilter = codeFilter || code
				keeps = append(keeps, keep)
			}
		case step == "count()":
			stat = statRequests
		case step == "mean()":
			stat = statMean
		case step == "max()":
			stat = statMax
		case step == "min()":
			stat = statMin
		case step == "sum()":
			stat = "sum"
		case fluxQuant.MatchString(step):
			p, _ := strconv.ParseFloat(fluxQuant.FindStringSubmatch(step)[1], 64)
			if p <= 0 || p > 1 {
				return 0, false, false, fmt.Errorf("quantile q must be in (0, 1]")
			}
			stat, pct = statP, p*100
		case step == "group()" || strings.HasPrefix(step, "yield("):
		default:
			return 0, false, false, fmt.Errorf("the simulator's Flux subset has no %q", step)
		}
	}
	if window <= 0 {
		return 0, false, false, fmt.Errorf("the query needs |> range(start: -<duration>)")
	}
	if stat == "" {
		return 0, false, false, fmt.Errorf("the query must end in count(), sum(), mean(), max(), min() or quantile(q: ...)")
	}
	if stat != statRequests && codeFilter {
		return 0, false, false, fmt.Errorf("the simulator filters by code for count() only")
	}
	keep := func(w workloadKey, code string) bool {
		for _, k := range keeps {
			if !k(w, code, "duration_ms", "requests") {
				return false
			}
		}
		return true
	}
	from := now.Add(-window)
	ok := v.between(v.matchWorkloads(func(w workloadKey) bool { return keep(w, "200") }), from, now)
	bad := v.between(v.matchWorkloads(func(w workloadKey) bool { return keep(w, "500") }), from, now)
	if stat == statRequests {
		n := (ok.requests - ok.errors) + bad.errors
		return float64(n), true, n > 0, nil
	}
	if stat == "sum" {
		sum := 0.0
		for _, l := range ok.latencies {
			sum += l
		}
		return sum, false, len(ok.latencies) > 0, nil
	}
	val, has := ok.value(stat, pct)
	return val, false, has, nil
}

// fluxPredicate reads one r.<column> comparison; code says whether it reads the code tag.
func fluxPredicate(p string) (func(workloadKey, string, string, string) bool, bool, error) {
	m := fluxPred.FindStringSubmatch(p)
	if m == nil {
		return nil, false, fmt.Errorf("the simulator cannot read the predicate %q", p)
	}
	column, op, str, pattern := m[1], m[2], m[3], m[4]
	get := map[string]func(w workloadKey, code, field, measurement string) string{
		"namespace":    func(w workloadKey, _, _, _ string) string { return w.namespace },
		"workload":     func(w workloadKey, _, _, _ string) string { return w.workload },
		"code":         func(_ workloadKey, code, _, _ string) string { return code },
		"_field":       func(_ workloadKey, _, field, _ string) string { return field },
		"_measurement": func(_ workloadKey, _, _, m string) string { return m },
	}[column]
	if get == nil {
		return nil, false, fmt.Errorf("the simulator's columns are _measurement, _field, namespace, workload and code, not %q", column)
	}
	var test func(string) bool
	switch op {
	case "==", "!=":
		if pattern != "" {
			return nil, false, fmt.Errorf("%s compares with a string", op)
		}
		test = func(s string) bool { return (s == str) == (op == "==") }
	default:
		re, err := regexp.Compile(pattern)
		if err != nil {
			return nil, false, err
		}
		test = func(s string) bool { return re.MatchString(s) == (op == "=~") }
	}
	return func(w workloadKey, code, field, measurement string) bool {
		return test(get(w, code, field, measurement))
	}, column == "code", nil
}
