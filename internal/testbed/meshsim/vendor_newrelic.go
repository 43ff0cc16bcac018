package meshsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// New Relic's NerdGraph NRQL query, after https://docs.newrelic.com/docs/apis/nerdgraph/examples/nerdgraph-nrql-tutorial/:
//
//	POST /graphql  (API-Key header) {"query":"query($query: Nrql!, $accountId: Int!) { actor { account(id: $accountId) { nrql(query: $query) { results … } } } }",
//	                                 "variables":{"accountId":N,"query":NRQL}}
//	  -> {"data":{"actor":{"account":{"nrql":{"results":[{...}]}}}}}, or {"errors":[{"message":…}]}
//
// The NRQL subset reads the CanaryRequest events of one workload:
//
//	SELECT <fn> FROM CanaryRequest WHERE namespace = 'NS' AND workload = 'W' SINCE N seconds ago
//
// where fn is percentage(count(*), WHERE error IS false) (column "percentage"),
// percentage(count(*), WHERE error IS true), average(duration) (column "average.duration", ms)
// or count(*) (column "count"). A percentage or average over no events is null. SELECT * FROM
// Metric … (Flagger's reachability check) returns no rows.
var (
	nrqlSelect = regexp.MustCompile(`(?is)^\s*SELECT\s+(.+?)\s+FROM\s+CanaryRequest\s+WHERE\s+(.+?)\s+SINCE\s+(\d+)\s+(seconds?|minutes?)\s+ago\s*$`)
	nrqlWhere  = regexp.MustCompile(`(?i)(\w+)\s*=\s*'([^']*)'`)
	nrqlSpaces = regexp.MustCompile(`\s+`)
)

func (s *Simulator) newRelicRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /graphql", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("API-Key") == "" {
			writeJSONError(w, http.StatusUnauthorized, `{"errors":[{"message":"Invalid credentials"}]}`)
			return
		}
		var req struct {
			Variables struct {
				AccountID int    `json:"accountId"`
				Query     string `json:"query"`
			} `json:"variables"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeJSONError(w, http.StatusBadRequest, `{"errors":[{"message":"the request is not GraphQL JSON"}]}`)
			return
		}
		row, err := s.nrql(req.Variables.Query)
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"message": err.Error()}}, "data": nil})
			return
		}
		results := []map[string]any{}
		if row != nil {
			results = append(results, row)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"actor": map[string]any{"account": map[string]any{
			"nrql": map[string]any{"results": results}}}}})
	})
}

// nrql answers one query of the subset: its one result row, or nil for no rows.
func (s *Simulator) nrql(q string) (map[string]any, error) {
	if strings.HasPrefix(strings.ToUpper(strings.TrimSpace(q)), "SELECT * FROM METRIC") {
		return nil, nil
	}
	m := nrqlSelect.FindStringSubmatch(q)
	if m == nil {
		return nil, fmt.Errorf("the simulator answers SELECT <fn> FROM CanaryRequest WHERE namespace = 'NS' AND workload = 'W' SINCE N seconds ago; got %q", q)
	}
	where := map[string]string{}
	for _, c := range nrqlWhere.FindAllStringSubmatch(m[2], -1) {
		where[strings.ToLower(c[1])] = c[2]
	}
	n, _ := strconv.Atoi(m[3])
	unit := time.Second
	if strings.HasPrefix(strings.ToLower(m[4]), "minute") {
		unit = time.Minute
	}
	now := time.Now()
	c := s.vendors.window(workloadKey{where["namespace"], where["workload"]}, now.Add(-time.Duration(n)*unit), now.Add(time.Second))
	value := func(measure string) any {
		if v, ok := c.measure(measure); ok {
			return v
		}
		return nil
	}
	switch fn := strings.ToLower(nrqlSpaces.ReplaceAllString(m[1], "")); fn {
	case "percentage(count(*),whereerrorisfalse)":
		return map[string]any{"percentage": value("success_rate")}, nil
	case "percentage(count(*),whereerroristrue)":
		return map[string]any{"percentage": value("error_rate")}, nil
	case "average(duration)":
		return map[string]any{"average.duration": value("duration")}, nil
	case "count(*)":
		return map[string]any{"count": c.requests}, nil
	default:
		return nil, fmt.Errorf("the simulator does not compute %s", m[1])
	}
}
