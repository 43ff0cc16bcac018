package meshsim

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// CloudWatch's GetMetricData, as the AWS SDK for Go v2 calls it (the Smithy RPC v2 CBOR
// protocol: POST /service/GraniteServiceVersion20100801/operation/GetMetricData).
//
// The subset it answers:
//   - MetricStat queries on namespace CloudWatchNamespace, dimensions Namespace and Workload
//     (each optional; a workload matches when every given dimension matches):
//     MetricName "Requests" with Stat "Sum" (requests answered), "Errors" with Stat "Sum"
//     (5xx answers), "Latency" (milliseconds) with Stat "Average", "Maximum", "Minimum" or
//     "pNN" / "pNN.N" (nearest-rank percentile). Period is any number of seconds >= 1.
//   - Expression queries: arithmetic (+ - * /, parentheses, numbers) over other queries' Ids,
//     computed per timestamp; a point whose divisor is 0 is left out.
//
// Datapoints sit at period boundaries (Unix time multiple of Period) within
// [StartTime, EndTime); a period without requests (or without latencies for "Latency") has
// no datapoint, as a metric nobody published. Results are those with ReturnData not false,
// newest first unless ScanBy is TimestampAscending. A request must be SigV4-signed; the
// signature itself is not checked.

// CloudWatchNamespace is the CloudWatch namespace of the simulated metrics.
const CloudWatchNamespace = "MeshSim"

const cloudWatchPath = "/service/GraniteServiceVersion20100801/operation/GetMetricData"

type cwDimension struct {
	Name  string `cbor:"Name"`
	Value string `cbor:"Value"`
}

type cwQuery struct {
	ID         string  `cbor:"Id"`
	Expression *string `cbor:"Expression"`
	MetricStat *struct {
		Metric struct {
			Namespace  string        `cbor:"Namespace"`
			MetricName string        `cbor:"MetricName"`
			Dimensions []cwDimension `cbor:"Dimensions"`
		} `cbor:"Metric"`
		Period int    `cbor:"Period"`
		Stat   string `cbor:"Stat"`
	} `cbor:"MetricStat"`
	Label      *string `cbor:"Label"`
	ReturnData *bool   `cbor:"ReturnData"`
	Period     *int    `cbor:"Period"`
}

type cwRequest struct {
	MetricDataQueries []cwQuery `cbor:"MetricDataQueries"`
	StartTime         time.Time `cbor:"StartTime"`
	EndTime           time.Time `cbor:"EndTime"`
	ScanBy            string    `cbor:"ScanBy"`
	MaxDatapoints     int       `cbor:"MaxDatapoints"`
}

type cwResult struct {
	ID         string      `cbor:"Id"`
	Label      string      `cbor:"Label"`
	StatusCode string      `cbor:"StatusCode"`
	Timestamps []time.Time `cbor:"Timestamps"`
	Values     []float64   `cbor:"Values"`
}

var cwEncoder, _ = cbor.EncOptions{Time: cbor.TimeUnixDynamic, TimeTag: cbor.EncTagRequired}.EncMode()

// cwSeries is a query's datapoints by period start (Unix seconds).
type cwSeries map[int64]float64

func (s *Simulator) serveCloudWatch(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=") {
		cwError(w, http.StatusForbidden, "MissingAuthenticationTokenException", "Request is missing Authentication Token")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		cwError(w, http.StatusBadRequest, "InvalidParameterValueException", err.Error())
		return
	}
	var req cwRequest
	if err := cbor.Unmarshal(body, &req); err != nil {
		cwError(w, http.StatusBadRequest, "InvalidParameterValueException", "the body is not a GetMetricData request: "+err.Error())
		return
	}
	results, err := s.samples.getMetricData(req)
	if err != nil {
		cwError(w, http.StatusBadRequest, "InvalidParameterValueException", err.Error())
		return
	}
	out, _ := cwEncoder.Marshal(map[string]any{"MetricDataResults": results, "Messages": []any{}})
	w.Header().Set("Content-Type", "application/cbor")
	w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
	_, _ = w.Write(out)
}

// cwError answers a Smithy RPC v2 CBOR error.
func cwError(w http.ResponseWriter, status int, code, message string) {
	out, _ := cwEncoder.Marshal(map[string]string{"__type": "com.amazonaws.cloudwatch#" + code, "message": message})
	w.Header().Set("Content-Type", "application/cbor")
	w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

var cwPercentile = regexp.MustCompile(`^p(\d{1,2}(\.\d+)?)$`)

func (v *vendorSamples) getMetricData(req cwRequest) ([]cwResult, error) {
	if len(req.MetricDataQueries) == 0 {
		return nil, fmt.Errorf("MetricDataQueries must hold at least one query")
	}
	if !req.EndTime.After(req.StartTime) {
		return nil, fmt.Errorf("EndTime must be after StartTime")
	}
	series := map[string]cwSeries{}
	exprs := map[string]arith{}
	for _, q := range req.MetricDataQueries {
		if q.ID == "" {
			return nil, fmt.Errorf("every query needs an Id")
		}
		switch {
		case q.MetricStat != nil:
			ms := q.MetricStat
			if ms.Metric.Namespace != CloudWatchNamespace {
				return nil, fmt.Errorf("query %s: the simulator has namespace %q only", q.ID, CloudWatchNamespace)
			}
			stat, pct, err := cwStatistic(ms.Metric.MetricName, ms.Stat)
			if err != nil {
				return nil, fmt.Errorf("query %s: %v", q.ID, err)
			}
			if ms.Period < 1 {
				return nil, fmt.Errorf("query %s: Period must be at least 1 second", q.ID)
			}
			ws := v.matchWorkloads(func(w workloadKey) bool {
				for _, d := range ms.Metric.Dimensions {
					if (d.Name == "Namespace" && d.Value != w.namespace) || (d.Name == "Workload" && d.Value != w.workload) ||
						(d.Name != "Namespace" && d.Name != "Workload") {
						return false
					}
				}
				return true
			})
			p := int64(ms.Period)
			s := cwSeries{}
			for t := req.StartTime.Unix() / p * p; t < req.EndTime.Unix(); t += p {
				from, to := time.Unix(max(t, req.StartTime.Unix()), 0), time.Unix(t+p, 0)
				if to.After(req.EndTime) {
					to = req.EndTime
				}
				sp := v.between(ws, from, to)
				if sp.requests == 0 {
					continue
				}
				if val, ok := sp.value(stat, pct); ok {
					s[t] = val
				}
			}
			series[q.ID] = s
		case q.Expression != nil:
			e, err := parseArith(*q.Expression, identOperand)
			if err != nil {
				return nil, fmt.Errorf("query %s: Expression %q: %v (the simulator knows + - * / over Ids)", q.ID, *q.Expression, err)
			}
			exprs[q.ID] = e
		default:
			return nil, fmt.Errorf("query %s: set MetricStat or Expression", q.ID)
		}
	}
	for id, e := range exprs {
		s, err := evalCWExpression(e, series, exprs, 0)
		if err != nil {
			return nil, fmt.Errorf("query %s: %v", id, err)
		}
		series[id] = s
	}
	var results []cwResult
	for _, q := range req.MetricDataQueries {
		if q.ReturnData != nil && !*q.ReturnData {
			continue
		}
		res := cwResult{ID: q.ID, Label: q.ID, StatusCode: "Complete", Timestamps: []time.Time{}, Values: []float64{}}
		if q.Label != nil {
			res.Label = *q.Label
		}
		s := series[q.ID]
		times := slices.Sorted(func(yield func(int64) bool) {
			for t := range s {
				if !yield(t) {
					return
				}
			}
		})
		if req.ScanBy != "TimestampAscending" {
			slices.Reverse(times)
		}
		for _, t := range times {
			res.Timestamps = append(res.Timestamps, time.Unix(t, 0).UTC())
			res.Values = append(res.Values, s[t])
		}
		results = append(results, res)
	}
	return results, nil
}

// evalCWExpression computes an expression per timestamp; expressions may refer to others.
func evalCWExpression(e arith, series map[string]cwSeries, exprs map[string]arith, depth int) (cwSeries, error) {
	if depth > 10 {
		return nil, fmt.Errorf("expressions refer to each other in a loop")
	}
	refs := map[string]cwSeries{}
	for _, name := range e.names() {
		s, ok := series[name]
		if !ok {
			sub, isExpr := exprs[name]
			if !isExpr {
				return nil, fmt.Errorf("no query has Id %q", name)
			}
			var err error
			if s, err = evalCWExpression(sub, series, exprs, depth+1); err != nil {
				return nil, err
			}
		}
		refs[name] = s
	}
	out := cwSeries{}
	var stamps []int64
	for _, s := range refs {
		for t := range s {
			stamps = append(stamps, t)
		}
	}
	for _, t := range stamps {
		if v, ok := e.eval(func(name string) (float64, bool) { x, ok := refs[name][t]; return x, ok }); ok {
			out[t] = v
		}
	}
	return out, nil
}

// cwStatistic maps a metric name and statistic to what the store computes.
func cwStatistic(metric, stat string) (statistic, float64, error) {
	switch metric {
	case "Requests", "Errors":
		if stat != "Sum" {
			return "", 0, fmt.Errorf("metric %s has Stat Sum only", metric)
		}
		if metric == "Requests" {
			return statRequests, 0, nil
		}
		return statErrors, 0, nil
	case "Latency":
		switch stat {
		case "Average":
			return statMean, 0, nil
		case "Maximum":
			return statMax, 0, nil
		case "Minimum":
			return statMin, 0, nil
		}
		if m := cwPercentile.FindStringSubmatch(stat); m != nil {
			p, _ := strconv.ParseFloat(m[1], 64)
			if p > 0 && p <= 100 {
				return statP, p, nil
			}
		}
		return "", 0, fmt.Errorf("metric Latency has Stat Average, Maximum, Minimum or pNN, not %q", stat)
	}
	return "", 0, fmt.Errorf("the simulator's metrics are Requests, Errors and Latency, not %q", metric)
}
