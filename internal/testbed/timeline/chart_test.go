package timeline

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"strings"
	"testing"
)

// loadDemo reads the record of a real `make demo` run: v1 initialised, v2 promoted, v3 rolled
// back.
func loadDemo(t *testing.T) Recording {
	t.Helper()
	b, err := os.ReadFile("testdata/rollout.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec Recording
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// svgTexts returns every text the chart prints, in document order.
func svgTexts(t *testing.T, svg []byte) []string {
	t.Helper()
	var texts []string
	dec := xml.NewDecoder(bytes.NewReader(svg))
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return texts
		}
		if err != nil {
			t.Fatalf("the chart is not well-formed SVG: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			inText = el.Name.Local == "text"
		case xml.EndElement:
			inText = false
		case xml.CharData:
			if s := strings.TrimSpace(string(el)); inText && s != "" {
				texts = append(texts, s)
			}
		}
	}
}

func count(texts []string, s string) int {
	n := 0
	for _, t := range texts {
		if t == s {
			n++
		}
	}
	return n
}

func TestDemoChartHoldsEveryRunSeriesAndMarker(t *testing.T) {
	rec := loadDemo(t)
	var svg bytes.Buffer
	if err := WriteSVG(&svg, rec); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, svg.Bytes())
	for _, run := range rec.Runs {
		if count(texts, run.Title) != 1 {
			t.Errorf("the chart titles %q %d times, want once", run.Title, count(texts, run.Title))
		}
	}
	// The legend names a series only in the panels that have it: the weight moved in the
	// promoted and the rolled-back run, and the metric was measured in both; checks passed in
	// the promoted run and failed in the rolled-back one.
	for _, want := range []struct {
		text string
		n    int
	}{
		{"canary weight (%)", 3},
		{rec.Metric, 2},
		{string(KindCheck), 1},
		{string(KindPromotion), 1},
		{string(KindRollback), 1},
		{string(KindFailedCheck), 1},
	} {
		if got := count(texts, want.text); got != want.n {
			t.Errorf("legend entry %q appears %d times, want %d", want.text, got, want.n)
		}
	}
	if n := strings.Count(svg.String(), "<path"); n < 20 {
		t.Errorf("the chart draws %d paths; the series and markers alone need more", n)
	}
}

func TestRecordedRunsAreWhatTheChartNeeds(t *testing.T) {
	rec := loadDemo(t)
	if len(rec.Runs) != 3 {
		t.Fatalf("%d runs recorded, want the demo's 3", len(rec.Runs))
	}
	promoted, rolledBack := rec.Runs[1], rec.Runs[2]
	if last := promoted.Weight[len(promoted.Weight)-1].Value; last != 0 {
		t.Errorf("the promoted run ends at canary weight %v, want 0", last)
	}
	maxWeight := 0.0
	for _, p := range promoted.Weight {
		maxWeight = max(maxWeight, p.Value)
	}
	if maxWeight < 30 {
		t.Errorf("the promoted run's weight peaks at %v, want the demo's steps", maxWeight)
	}
	low := 100.0
	for _, p := range rolledBack.Metric {
		low = min(low, p.Value)
	}
	if low > 90 {
		t.Errorf("the rolled-back run's success rate never drops below %v, want the 50%% errors of v3 to show", low)
	}
}

func TestEmptyRecordingIsAnError(t *testing.T) {
	if err := WriteSVG(io.Discard, Recording{}); err == nil {
		t.Fatal("an empty recording drew a chart")
	}
}
