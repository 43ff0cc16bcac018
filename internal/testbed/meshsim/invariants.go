package meshsim

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// InvariantEntry records a moment where the routing broke an invariant.
type InvariantEntry struct {
	Time      time.Time `json:"time"`
	Namespace string    `json:"namespace"`
	Object    string    `json:"object"` // Kind/name of the router object
	Message   string    `json:"message"`
}

const (
	// invariantRepeat is how often one object may log the same message again.
	invariantRepeat = time.Second
	// maxInvariantEntries bounds the entries kept in memory; the file keeps everything.
	maxInvariantEntries = 10000
)

type invariantLog struct {
	mu      sync.Mutex
	out     io.Writer
	entries []InvariantEntry
	last    map[string]time.Time // last time each namespace/object/message was written
}

func newInvariantLog(out io.Writer) *invariantLog {
	return &invariantLog{out: out, last: map[string]time.Time{}}
}

func (l *invariantLog) report(now time.Time, obj objectRef, message string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := obj.Namespace + "/" + obj.String() + "\xff" + message
	if last, ok := l.last[key]; ok && now.Sub(last) < invariantRepeat {
		return
	}
	l.last[key] = now
	e := InvariantEntry{Time: now.UTC(), Namespace: obj.Namespace, Object: obj.String(), Message: message}
	l.entries = append(l.entries, e)
	if len(l.entries) > maxInvariantEntries {
		l.entries = append([]InvariantEntry(nil), l.entries[len(l.entries)-maxInvariantEntries:]...)
	}
	if l.out != nil {
		line, _ := json.Marshal(e)
		_, _ = l.out.Write(append(line, '\n'))
	}
	// Forget keys quiet for a while, so the map does not grow with every message ever seen.
	if len(l.last) > 1000 {
		for k, t := range l.last {
			if now.Sub(t) > time.Minute {
				delete(l.last, k)
			}
		}
	}
}

// Invariants returns the entries logged for a namespace (all namespaces when empty), oldest first.
func (s *Simulator) Invariants(namespace string) []InvariantEntry {
	s.inv.mu.Lock()
	defer s.inv.mu.Unlock()
	out := []InvariantEntry{}
	for _, e := range s.inv.entries {
		if namespace == "" || e.Namespace == namespace {
			out = append(out, e)
		}
	}
	return out
}
