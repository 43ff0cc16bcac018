package meshsim

// The load tester: Flagger's blue/green and A/B analyses get their metrics from test traffic
// that a rollout webhook starts (flagger-loadtester running `hey` against the <apex>-canary
// Service). This file plays that load tester: POST /loadtest takes the webhook payload and
// sends the traffic straight to the named Service's pods, past every router, for the duration.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The load tester, as the OSM source labels of its requests name it: apart from the load
// generator, so that a query can tell test traffic from user traffic.
const (
	LoadTesterNamespace = "meshsim"
	LoadTesterKind      = "Deployment"
	LoadTesterName      = "flagger-loadtester"
	LoadTesterPod       = "flagger-loadtester-0"
)

// maxLoadTest caps a load test's duration, as the load tester's task timeout (1h) does.
const maxLoadTest = time.Hour

// heyValueFlags are hey's flags that take a value; every other flag is a boolean.
var heyValueFlags = map[string]bool{
	"n": true, "c": true, "q": true, "z": true, "o": true, "m": true, "H": true, "t": true, "A": true,
	"d": true, "D": true, "T": true, "a": true, "x": true, "host": true, "cpus": true,
}

// heyDefaultWorkers is hey's -c default.
const heyDefaultWorkers = 50

// webhookPayload is the body Flagger posts to a webhook.
type webhookPayload struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Phase     string            `json:"phase"`
	Checksum  string            `json:"checksum"`
	Metadata  map[string]string `json:"metadata"`
}

// LoadTest is one running load test, as GET /loadtest lists it.
type LoadTest struct {
	ID        string        `json:"id"` // hash of name, namespace and command: the de-duplication key
	Name      string        `json:"name"`
	Namespace string        `json:"namespace"`
	Command   string        `json:"cmd"`
	Target    string        `json:"target"` // namespace/name of the Service
	RPS       float64       `json:"rps"`
	Duration  time.Duration `json:"-"`
	Lasts     string        `json:"duration"` // Duration, as text
	// Started is the simulator tick the test counts from (zero until the simulator ticks); Until
	// is when it ends.
	Started time.Time `json:"started,omitzero"`
	Until   time.Time `json:"until,omitzero"`
	// Answered counts the requests a pod answered (OK: below 500); Unavailable those no Ready
	// pod could take.
	Answered    int `json:"answered"`
	OK          int `json:"ok"`
	Unavailable int `json:"unavailable"`

	target types.NamespacedName
	last   time.Time // the time up to which load was sent
	carry  float64   // fraction of a request owed from earlier ticks
}

// parseLoadTest reads a webhook payload into a load test, or says why it cannot.
func parseLoadTest(p webhookPayload) (*LoadTest, error) {
	if typ := p.Metadata["type"]; typ != "" && typ != "cmd" {
		return nil, fmt.Errorf("metadata.type %q: only cmd (background load) is simulated", typ)
	}
	lt := &LoadTest{Name: p.Name, Namespace: p.Namespace}
	var host string
	var err error
	switch {
	case p.Metadata["cmd"] != "":
		lt.Command = p.Metadata["cmd"]
		host, lt.Duration, lt.RPS, err = parseHey(lt.Command)
	case p.Metadata["target"] != "":
		// The short form names what hey would do: a canonical command is its identity.
		host = p.Metadata["target"]
		lt.Command = fmt.Sprintf("target=%s duration=%s rps=%s", host, p.Metadata["duration"], p.Metadata["rps"])
		lt.Duration, lt.RPS, err = parseRate(p.Metadata["duration"], p.Metadata["rps"])
	default:
		return nil, errors.New("metadata needs cmd (a hey command) or target, duration and rps")
	}
	if err != nil {
		return nil, err
	}
	if lt.target, err = serviceOf(host, p.Namespace); err != nil {
		return nil, err
	}
	lt.Target = lt.target.String()
	lt.Duration = min(lt.Duration, maxLoadTest)
	lt.Lasts = lt.Duration.String()
	sum := sha256.Sum256([]byte(p.Name + "\xff" + p.Namespace + "\xff" + lt.Command))
	lt.ID = hex.EncodeToString(sum[:8])
	return lt, nil
}

// parseHey reads the URL's host, the duration (-z, or -n requests at the rate) and the rate
// (-q per worker times -c workers) of a hey command line.
func parseHey(cmd string) (host string, d time.Duration, rps float64, err error) {
	args, err := splitWords(cmd)
	if err != nil {
		return "", 0, 0, err
	}
	if len(args) == 0 || (args[0] != "hey" && !strings.HasSuffix(args[0], "/hey")) {
		return "", 0, 0, fmt.Errorf("cmd %q: only hey commands are simulated", cmd)
	}
	flags, target := map[string]string{}, ""
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			target = a // hey takes one URL, after the flags
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if heyValueFlags[name] && !hasValue {
			if i+1 >= len(args) {
				return "", 0, 0, fmt.Errorf("cmd %q: flag -%s needs a value", cmd, name)
			}
			i++
			value = args[i]
		}
		flags[name] = value
	}
	if target == "" {
		return "", 0, 0, fmt.Errorf("cmd %q has no URL", cmd)
	}
	u, err := url.Parse(target)
	if err != nil || u.Hostname() == "" {
		return "", 0, 0, fmt.Errorf("cmd %q: %q is not a URL with a host", cmd, target)
	}
	if flags["q"] == "" {
		return "", 0, 0, fmt.Errorf("cmd %q: set -q: the simulator sends load at a steady rate", cmd)
	}
	workers := heyDefaultWorkers
	if c := flags["c"]; c != "" {
		if workers, err = strconv.Atoi(c); err != nil || workers <= 0 {
			return "", 0, 0, fmt.Errorf("cmd %q: -c %q is not a positive number", cmd, c)
		}
	}
	perWorker, err := strconv.ParseFloat(flags["q"], 64)
	if err != nil || perWorker <= 0 {
		return "", 0, 0, fmt.Errorf("cmd %q: -q %q is not a positive number", cmd, flags["q"])
	}
	rps = perWorker * float64(workers)
	switch {
	case flags["z"] != "":
		if d, err = time.ParseDuration(flags["z"]); err != nil || d <= 0 {
			return "", 0, 0, fmt.Errorf("cmd %q: -z %q is not a positive duration", cmd, flags["z"])
		}
	default:
		// Without -z hey sends -n requests (200 by default), at the rate limit here.
		n := 200
		if s := flags["n"]; s != "" {
			if n, err = strconv.Atoi(s); err != nil || n <= 0 {
				return "", 0, 0, fmt.Errorf("cmd %q: -n %q is not a positive number", cmd, s)
			}
		}
		d = time.Duration(float64(n) / rps * float64(time.Second))
	}
	return u.Hostname(), d, rps, nil
}

// parseRate reads the short form's duration and requests per second.
func parseRate(duration, rps string) (time.Duration, float64, error) {
	d, err := time.ParseDuration(duration)
	if err != nil || d <= 0 {
		return 0, 0, fmt.Errorf("metadata.duration %q is not a positive duration", duration)
	}
	r, err := strconv.ParseFloat(rps, 64)
	if err != nil || r <= 0 || math.IsInf(r, 0) {
		return 0, 0, fmt.Errorf("metadata.rps %q is not a positive number", rps)
	}
	return d, r, nil
}

// serviceOf resolves a host the way cluster DNS would: <svc>.<ns>[.svc[.<cluster domain>]],
// or a bare <svc> in the caller's namespace.
func serviceOf(host, namespace string) (types.NamespacedName, error) {
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	if len(labels) > 2 && labels[2] != "svc" {
		return types.NamespacedName{}, fmt.Errorf("host %q is not a cluster Service name (<service>.<namespace>[.svc…])", host)
	}
	if len(labels) > 1 {
		namespace = labels[1]
	}
	if labels[0] == "" || namespace == "" {
		return types.NamespacedName{}, fmt.Errorf("host %q names no Service in a namespace", host)
	}
	return types.NamespacedName{Namespace: namespace, Name: labels[0]}, nil
}

// splitWords splits a command line like sh does for plain words, single and double quotes
// (hey commands quote their -H headers).
func splitWords(s string) ([]string, error) {
	var out []string
	var word strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			word.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				out = append(out, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("cmd %q has an unclosed quote", s)
	}
	if inWord {
		out = append(out, word.String())
	}
	return out, nil
}

// startLoadTest registers a load test unless the same one runs; started tells which, and
// running is a copy of the test that runs.
func (s *Simulator) startLoadTest(lt *LoadTest) (running LoadTest, started bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.loadTests[lt.ID]; ok {
		return *cur, false
	}
	// The simulator's clock is its ticks: a test posted between two ticks starts at the
	// earlier one, so the next tick owes its requests since then.
	if !s.lastTick.IsZero() {
		lt.start(s.lastTick)
	}
	s.loadTests[lt.ID] = lt
	return *lt, true
}

// LoadTests returns copies of the running load tests, by namespace, name and id.
func (s *Simulator) LoadTests() []LoadTest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]LoadTest, 0, len(s.loadTests))
	for _, lt := range s.loadTests {
		out = append(out, *lt)
	}
	sort.Slice(out, func(i, j int) bool { return loadTestLess(&out[i], &out[j]) })
	return out
}

func loadTestLess(a, b *LoadTest) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.ID < b.ID
}

func (lt *LoadTest) start(at time.Time) {
	lt.Started, lt.Until, lt.last = at, at.Add(lt.Duration), at
}

// sendLoadTests sends the test traffic owed since the last tick; visit declares the target's
// series for this tick. A test ends on the first tick at or past its end.
func (s *Simulator) sendLoadTests(now time.Time, podsFor func(backend) *backendPods, visit func(*route, backend), sidecars map[string]sidecar) {
	tests := make([]*LoadTest, 0, len(s.loadTests))
	for _, lt := range s.loadTests {
		tests = append(tests, lt)
	}
	sort.Slice(tests, func(i, j int) bool { return loadTestLess(tests[i], tests[j]) })
	for _, lt := range tests {
		if lt.Started.IsZero() { // posted before the first tick
			lt.start(now)
		}
		// Test traffic is seen by the destination pods' own exporters (direct.go), not by a router.
		r := &route{
			mesh:     meshLoadTest,
			object:   objectRef{Kind: "LoadTest", Namespace: lt.target.Namespace, Name: lt.Name},
			tester:   true,
			backends: []backend{{service: lt.target, weight: 100}},
			sidecars: sidecars,
		}
		b := r.backends[0]
		visit(r, b)
		end := now
		if end.After(lt.Until) {
			end = lt.Until
		}
		lt.carry += lt.RPS * min(max(end.Sub(lt.last), 0), maxTickGap).Seconds()
		lt.last = end
		n := math.Floor(lt.carry + 1e-9)
		lt.carry -= n
		for range int(n) {
			if code := s.deliver(now, r, b, podsFor(b)); code == http.StatusServiceUnavailable {
				lt.Unavailable++
			} else {
				lt.Answered++
				if code < 500 {
					lt.OK++
				}
			}
		}
		if !now.Before(lt.Until) {
			delete(s.loadTests, lt.ID)
		}
	}
}

// serveLoadTest is POST /loadtest: Flagger's load tester `cmd` task. It answers 202 at once,
// whether it started the test or the same one already runs; 400 when the payload asks for
// something the simulator cannot do.
func (s *Simulator) serveLoadTest(w http.ResponseWriter, r *http.Request) {
	var p webhookPayload
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&p); err != nil {
		http.Error(w, "payload: "+err.Error(), http.StatusBadRequest)
		return
	}
	lt, err := parseLoadTest(p)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	running, started := s.startLoadTest(lt)
	if started {
		s.log.Info("load test started", "id", lt.ID, "namespace", lt.Namespace, "name", lt.Name, "target", lt.Target, "rps", lt.RPS, "duration", lt.Duration)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(struct {
		Started bool `json:"started"`
		LoadTest
	}{started, running})
}
