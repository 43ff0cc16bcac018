package meshsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Splunk Observability's SignalFlow over HTTP, POST /v2/signalflow/execute?start=&stop=
// (milliseconds) with the program as the body and an X-SF-Token header, answering the
// computation's messages as Server-Sent Events; and GET /v2/metric?limit=1, the health
// check.
//
// The data, one datapoint per workload per second that had requests, dimensions namespace
// and workload: http.requests (requests answered), http.errors (5xx answers),
// http.latency.mean and http.latency.p99 (ms). The SignalFlow subset it runs:
//
//	A = data('http.errors', filter=filter('namespace', 'ns') and filter('workload', 'w')).sum(over='30s')
//	B = data('http.requests', filter=filter('namespace', 'ns') and filter('workload', 'w')).sum(over='30s')
//	(A / B * 100).publish()
//
// Statements are separated by newlines or `;`; `NAME = stream` assigns; one statement ends in
// .publish(...). Streams: data('<metric>'[, filter=filter('<dim>', '<value>'[, ...]) [and ...]]),
// then .sum() .mean() .max() .min() (across time series) or the same with over='<duration>'
// (over time, per series), and arithmetic (+ - * /, numbers, parentheses) on single-series
// streams. The computation's resolution is one second; a second without data has no value.

var (
	sfAssign = regexp.MustCompile(`^([A-Za-z_]\w*)\s*=\s*(.+)$`)
	sfMethod = regexp.MustCompile(`^\.(sum|mean|max|min|publish)\(\s*(?:(?:over|label)\s*=\s*'([^']*)'\s*)?\)`)
	sfFilter = regexp.MustCompile(`^filter\(\s*'([^']+)'\s*((?:,\s*'[^']*'\s*)+)\)$`)
	sfMetric = regexp.MustCompile(`^data\(\s*'([^']+)'\s*(?:,\s*filter\s*=\s*(.+))?\)$`)
)

// sfStream is a stream's time series: per tsId, the values per second.
type sfStream map[string]map[int64]float64

func (s *Simulator) serveSignalFlow(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-SF-Token") == "" {
		http.Error(w, `{"message":"unauthorized"}`, http.StatusUnauthorized)
		return
	}
	start, err1 := strconv.ParseInt(r.URL.Query().Get("start"), 10, 64)
	stop, err2 := strconv.ParseInt(r.URL.Query().Get("stop"), 10, 64)
	if err1 != nil || err2 != nil || stop <= start {
		http.Error(w, `{"message":"start and stop must be milliseconds, start before stop"}`, http.StatusBadRequest)
		return
	}
	program := new(strings.Builder)
	if _, err := fmt.Fprint(program, readAll(r)); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(event string, msg map[string]any) {
		b, _ := json.Marshal(msg)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	}
	send("control-message", map[string]any{"type": "control-message", "event": "STREAM_START"})
	out, err := s.samples.signalflow(program.String(), time.UnixMilli(start), time.UnixMilli(stop))
	if err != nil {
		send("error", map[string]any{"type": "error", "error": 400, "message": err.Error()})
		send("control-message", map[string]any{"type": "control-message", "event": "END_OF_CHANNEL"})
		return
	}
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range out {
			if !yield(id) {
				return
			}
		}
	})
	for _, id := range ids {
		send("metadata", map[string]any{"type": "metadata", "tsId": id, "properties": map[string]any{"sf_streamLabel": "published"}})
	}
	for t := time.UnixMilli(start).Unix(); t < time.UnixMilli(stop).Unix(); t++ {
		var data []map[string]any
		for _, id := range ids {
			if v, ok := out[id][t]; ok {
				data = append(data, map[string]any{"tsId": id, "value": v})
			}
		}
		if len(data) > 0 {
			send("data", map[string]any{"type": "data", "logicalTimestampMs": t * 1000, "data": data})
		}
	}
	send("control-message", map[string]any{"type": "control-message", "event": "END_OF_CHANNEL"})
}

func readAll(r *http.Request) string {
	b := new(strings.Builder)
	buf := make([]byte, 4096)
	for b.Len() < 1<<20 {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

func serveSignalFxMetric(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-SF-Token") == "" {
		http.Error(w, `{"message":"unauthorized"}`, http.StatusUnauthorized)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"count":4,"results":[{"name":"http.requests","type":"COUNTER"}]}`))
}

// signalflow runs a program over the seconds [start, stop) and returns what it publishes.
func (v *vendorSamples) signalflow(program string, start, stop time.Time) (sfStream, error) {
	vars := map[string]sfStream{}
	var published sfStream
	for _, line := range strings.FieldsFunc(program, func(r rune) bool { return r == '\n' || r == ';' }) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := ""
		if m := sfAssign.FindStringSubmatch(line); m != nil && !strings.HasPrefix(line, "data(") {
			name, line = m[1], m[2]
		}
		publish := false
		if i := strings.LastIndex(line, ".publish("); i >= 0 && strings.HasSuffix(line, ")") {
			publish, line = true, line[:i]
		}
		s, err := v.sfExpression(line, vars, start, stop)
		if err != nil {
			return nil, err
		}
		if name != "" {
			vars[name] = s
		}
		if publish {
			if published != nil {
				return nil, fmt.Errorf("the simulator runs programs that publish once")
			}
			published = s
		}
	}
	if published == nil {
		return nil, fmt.Errorf("the program publishes nothing: end a stream with .publish()")
	}
	return published, nil
}

// sfExpression evaluates stream arithmetic.
func (v *vendorSamples) sfExpression(text string, vars map[string]sfStream, start, stop time.Time) (sfStream, error) {
	operands := map[string]sfStream{}
	e, err := parseArith(text, func(s string) (arith, string, error) {
		st, rest, err := v.sfOperand(s, vars, start, stop)
		if err != nil {
			return nil, s, err
		}
		name := "$" + strconv.Itoa(len(operands))
		operands[name] = st
		return arithRef(name), rest, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%q: %v", text, err)
	}
	if ref, ok := e.(arithRef); ok {
		return operands[string(ref)], nil
	}
	single := map[string]map[int64]float64{}
	for name, st := range operands {
		if len(st) > 1 {
			return nil, fmt.Errorf("%q: arithmetic needs single-series streams; aggregate with sum() first", text)
		}
		single[name] = map[int64]float64{}
		for _, vals := range st {
			single[name] = vals
		}
	}
	out := map[int64]float64{}
	for t := start.Unix(); t < stop.Unix(); t++ {
		if val, ok := e.eval(func(n string) (float64, bool) { x, ok := single[n][t]; return x, ok }); ok {
			out[t] = val
		}
	}
	return sfStream{"AAAAAAAAAAA": out}, nil
}

// sfOperand reads data(...) or a variable, with its method chain, and returns the rest.
func (v *vendorSamples) sfOperand(s string, vars map[string]sfStream, start, stop time.Time) (sfStream, string, error) {
	var st sfStream
	switch {
	case strings.HasPrefix(s, "data("):
		end := closingParen(s, len("data"))
		if end < 0 {
			return nil, s, fmt.Errorf("data( is not closed")
		}
		var err error
		if st, err = v.sfData(s[:end+1], start, stop); err != nil {
			return nil, s, err
		}
		s = s[end+1:]
	default:
		ref, rest, err := identOperand(s)
		if err != nil {
			return nil, s, err
		}
		var ok bool
		if st, ok = vars[string(ref.(arithRef))]; !ok {
			return nil, s, fmt.Errorf("%s is not assigned", ref)
		}
		s = rest
	}
	for {
		m := sfMethod.FindStringSubmatch(s)
		if m == nil || m[1] == "publish" {
			return st, s, nil
		}
		var err error
		if st, err = sfAggregate(st, m[1], m[2], start, stop); err != nil {
			return nil, s, err
		}
		s = s[len(m[0]):]
	}
}

// closingParen is the index of the parenthesis closing the one at open.
func closingParen(s string, open int) int {
	depth, quote := 0, false
	for i := open; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'':
			quote = !quote
		case quote:
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// sfData is the time series of a metric, one per matching workload.
func (v *vendorSamples) sfData(call string, start, stop time.Time) (sfStream, error) {
	m := sfMetric.FindStringSubmatch(call)
	if m == nil {
		return nil, fmt.Errorf("the simulator cannot read %q", call)
	}
	metric := m[1]
	stat, pct := map[string]statistic{
		"http.requests": statRequests, "http.errors": statErrors, "http.latency.mean": statMean, "http.latency.p99": statP,
	}[metric], 99.0
	if stat == "" {
		return nil, fmt.Errorf("the simulator's metrics are http.requests, http.errors, http.latency.mean and http.latency.p99, not %q", metric)
	}
	dims := map[string][]string{}
	if m[2] != "" {
		for _, f := range strings.Split(m[2], " and ") {
			fm := sfFilter.FindStringSubmatch(strings.TrimSpace(f))
			if fm == nil {
				return nil, fmt.Errorf("the simulator cannot read the filter %q", f)
			}
			for _, val := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(fm[2], -1) {
				dims[fm[1]] = append(dims[fm[1]], val[1])
			}
		}
	}
	for d := range dims {
		if d != "namespace" && d != "workload" {
			return nil, fmt.Errorf("the simulator's dimensions are namespace and workload, not %q", d)
		}
	}
	ws := v.matchWorkloads(func(w workloadKey) bool {
		return (dims["namespace"] == nil || slices.Contains(dims["namespace"], w.namespace)) &&
			(dims["workload"] == nil || slices.Contains(dims["workload"], w.workload))
	})
	out := sfStream{}
	for _, w := range ws {
		vals := map[int64]float64{}
		for t := start.Unix(); t < stop.Unix(); t++ {
			sp := v.between([]workloadKey{w}, time.Unix(t, 0), time.Unix(t+1, 0))
			if sp.requests == 0 {
				continue
			}
			if val, ok := sp.value(stat, pct); ok {
				vals[t] = val
			}
		}
		out[w.namespace+"/"+w.workload] = vals
	}
	return out, nil
}

// sfAggregate applies sum/mean/max/min across series, or over a duration per series.
func sfAggregate(st sfStream, fn, over string, start, stop time.Time) (sfStream, error) {
	reduce := func(vals []float64) float64 {
		switch fn {
		case "sum":
			s := 0.0
			for _, v := range vals {
				s += v
			}
			return s
		case "mean":
			s := 0.0
			for _, v := range vals {
				s += v
			}
			return s / float64(len(vals))
		case "max":
			return slices.Max(vals)
		}
		return slices.Min(vals)
	}
	if over == "" {
		out := map[int64]float64{}
		for t := start.Unix(); t < stop.Unix(); t++ {
			var vals []float64
			for _, s := range st {
				if v, ok := s[t]; ok {
					vals = append(vals, v)
				}
			}
			if len(vals) > 0 {
				out[t] = reduce(vals)
			}
		}
		return sfStream{"AAAAAAAAAAA": out}, nil
	}
	d, err := model.ParseDuration(over)
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("over=%q is not a duration such as '30s'", over)
	}
	n := int64(time.Duration(d) / time.Second)
	out := sfStream{}
	for id, s := range st {
		vals := map[int64]float64{}
		for t := start.Unix(); t < stop.Unix(); t++ {
			var in []float64
			for u := t - n + 1; u <= t; u++ {
				if v, ok := s[u]; ok {
					in = append(in, v)
				}
			}
			if len(in) > 0 {
				vals[t] = reduce(in)
			}
		}
		out[id] = vals
	}
	return out, nil
}
