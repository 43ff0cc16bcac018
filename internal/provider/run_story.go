package provider

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// A run's story is what a runner without a terminal (HCP Terraform, Atlantis, a CI log) can
// show of it: every phase, weight, check with its value and verdict, gate and note, each with
// the time since the run began. It is the computed attribute last_run after a run, and the
// end of the error when the run fails.

// storyMaxLines bounds the story kept in state: a long blue/green or a gate held for hours
// writes a line per interval. The first lines (how it started) and the last ones (how it
// ended) are kept, and the story says how many lines were left out between them.
const (
	storyHeadLines = 60
	storyTailLines = 40
)

// runStory collects a run's progress lines; safe for the engine's goroutines.
type runStory struct {
	mu      sync.Mutex
	start   time.Time
	secrets []string
	head    []string
	tail    []string // a ring of the latest lines once head is full
	next    int      // where the ring writes next
	dropped int
}

func newRunStory(secrets []string) *runStory {
	return &runStory{start: time.Now(), secrets: secrets}
}

// record keeps one progress line, unless it is a DEBUG detail (a query's text).
func (s *runStory) record(p rollout.Progress) {
	if p.Detail() {
		return
	}
	line := fmt.Sprintf("+%s %s", time.Since(s.start).Round(time.Second), masked(p.Message, s.secrets))
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case len(s.head) < storyHeadLines:
		s.head = append(s.head, line)
	case len(s.tail) < storyTailLines:
		s.tail = append(s.tail, line)
	default:
		s.tail[s.next] = line
		s.next = (s.next + 1) % storyTailLines
		s.dropped++
	}
}

// wrap makes report also record into the story.
func (s *runStory) wrap(report func(rollout.Progress)) func(rollout.Progress) {
	return func(p rollout.Progress) {
		s.record(p)
		if report != nil {
			report(p)
		}
	}
}

// String is the story, one line per event, with the lines left out counted where they were.
func (s *runStory) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := append([]string{}, s.head...)
	if s.dropped > 0 {
		lines = append(lines, fmt.Sprintf("… %d lines left out …", s.dropped))
	}
	lines = append(lines, s.tail[s.next:]...)
	lines = append(lines, s.tail[:s.next]...)
	return strings.Join(lines, "\n")
}

// withStory appends the story to a failed run's error text.
func (s *runStory) withStory(reason string) string {
	story := s.String()
	if story == "" {
		return reason
	}
	return reason + "\n\nThe run:\n" + story
}
