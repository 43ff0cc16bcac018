// Package timeline records what releases did over time (the canary weight, an analysed
// metric, and the checks, promotions and rollbacks) and draws the record as an SVG chart.
package timeline

import (
	"sync"
	"time"
)

// Kind is what a marker on the chart stands for.
type Kind string

const (
	KindCheck       Kind = "check"
	KindFailedCheck Kind = "failed check"
	KindPromotion   Kind = "promotion"
	KindRollback    Kind = "rollback"
)

// Point is a value at an offset, in seconds, from the start of its run.
type Point struct {
	At    float64 `json:"at"`
	Value float64 `json:"value"`
}

// Marker is an event at an offset, in seconds, from the start of its run.
type Marker struct {
	At   float64 `json:"at"`
	Kind Kind    `json:"kind"`
}

// Run is one release: one panel of the chart.
type Run struct {
	Title   string   `json:"title"`
	Weight  []Point  `json:"weight"`
	Metric  []Point  `json:"metric"`
	Markers []Marker `json:"markers"`
}

// Recording is every run of a session, and the name of the metric it followed.
type Recording struct {
	Metric string `json:"metric"`
	Runs   []Run  `json:"runs"`
}

// Recorder builds a Recording from concurrent observers.
type Recorder struct {
	mu    sync.Mutex
	rec   Recording
	start time.Time
}

// NewRecorder records a metric of the given name (for example "success rate (%)").
func NewRecorder(metric string) *Recorder { return &Recorder{rec: Recording{Metric: metric}} }

// StartRun opens a new run; what is observed next belongs to it.
func (r *Recorder) StartRun(title string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.start = time.Now()
	r.rec.Runs = append(r.rec.Runs, Run{Title: title})
}

// EndRun closes the current run: the weight line holds its last value up to now.
func (r *Recorder) EndRun() {
	r.with(func(run *Run, at float64) {
		if n := len(run.Weight); n > 0 {
			run.Weight = append(run.Weight, Point{At: at, Value: run.Weight[n-1].Value})
		}
	})
}

// Weight records the canary weight now.
func (r *Recorder) Weight(v float64) {
	r.with(func(run *Run, at float64) { run.Weight = append(run.Weight, Point{At: at, Value: v}) })
}

// Metric records the metric's value now.
func (r *Recorder) Metric(v float64) {
	r.with(func(run *Run, at float64) { run.Metric = append(run.Metric, Point{At: at, Value: v}) })
}

// Mark records an event now.
func (r *Recorder) Mark(k Kind) {
	r.with(func(run *Run, at float64) { run.Markers = append(run.Markers, Marker{At: at, Kind: k}) })
}

func (r *Recorder) with(fn func(run *Run, at float64)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.rec.Runs); n > 0 {
		fn(&r.rec.Runs[n-1], time.Since(r.start).Seconds())
	}
}

// Recording returns a copy of what was recorded so far.
func (r *Recorder) Recording() Recording {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := Recording{Metric: r.rec.Metric}
	for _, run := range r.rec.Runs {
		run.Weight = append([]Point(nil), run.Weight...)
		run.Metric = append([]Point(nil), run.Metric...)
		run.Markers = append([]Marker(nil), run.Markers...)
		out.Runs = append(out.Runs, run)
	}
	return out
}
