package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/timeline"
)

func TestSideBySideChart(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	split := func(s float64, w int) observation {
		return observation{at: t0.Add(time.Duration(s * float64(time.Second))), kind: "TrafficSplit", name: "podinfo", canaryWeight: w}
	}
	obs := []observation{
		split(-1, 0), split(2, 0), split(3, 10), split(13, 20), split(13.5, 20),
		{at: t0.Add(14 * time.Second), kind: "Deployment", name: "podinfo"},
		split(53, 0),
	}
	pts := splitWeights(obs, "podinfo", t0)
	want := []timeline.Point{{At: 0, Value: 0}, {At: 3, Value: 10}, {At: 13, Value: 20}, {At: 53, Value: 0}}
	if len(pts) != len(want) {
		t.Fatalf("splitWeights = %v, want %v", pts, want)
	}
	for i := range want {
		if pts[i] != want[i] {
			t.Errorf("point %d = %v, want %v", i, pts[i], want[i])
		}
	}
	s := sideBySide{ours: chartRun{weights: pts, end: 55 * time.Second}, flagger: chartRun{weights: pts, end: 90 * time.Second}}
	if got := nearestMedian([]chartRun{{end: 99 * time.Second}, {end: 90 * time.Second}, {end: 89 * time.Second}}); got.end != 90*time.Second {
		t.Errorf("nearestMedian picked the run of %v, want the median's (90s)", got.end)
	}
	var svg bytes.Buffer
	if err := s.writeSVG(&svg); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "Flagger v1.44.0: Succeeded after 90.0 s", "canary_release: terraform apply done after 55.0 s", "seconds since the image change"} {
		if !strings.Contains(svg.String(), want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
}
