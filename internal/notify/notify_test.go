package notify

import (
	"context"
	"slices"
	"testing"
	"time"
)

// Events batched together come back, reason and message each, from the one Event written.
func TestBatchedEventsTellTheirStory(t *testing.T) {
	var b Batch
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	b.Add(at, "Progressing", "canary weight 20%")
	if b.Full(at.Add(time.Second), "Progressing", "canary weight 40%", 30*time.Second, 1024) {
		t.Fatal("a second Event within the window and the length is refused")
	}
	b.Add(at.Add(time.Second), "Progressing", "canary weight 40%")
	if !b.Full(at.Add(30*time.Second), "Succeeded", "promoted", 30*time.Second, 1024) {
		t.Error("an Event a window after the first joins the batch")
	}
	if !b.Full(at.Add(2*time.Second), "Succeeded", "promoted", 30*time.Second, 40) {
		t.Error("an Event that makes the message too long joins the batch")
	}
	reason, message, ok := b.Take()
	want := [][2]string{{"Progressing", "canary weight 20%"}, {"Progressing", "canary weight 40%"}}
	if !ok || reason != "Progressing" || !slices.Equal(EventStory(reason, message), want) {
		t.Errorf("Take = %q, %q, %v; its story %v, want %v", reason, message, ok, EventStory(reason, message), want)
	}
	if _, _, ok := b.Take(); ok {
		t.Error("the batch is not empty after Take")
	}
	if got := EventStory("Synced", "a; b"); !slices.Equal(got, [][2]string{{"Synced", "a; b"}}) {
		t.Errorf("an Event that no batch joined tells %v", got)
	}
}

// The queue delivers in order, off the caller's path, and a cancelled context does not stop
// it: the warnings of every notification come back from Drain.
func TestQueueDeliversInOrderAfterCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	q := Start(ctx)
	cancel()
	for _, n := range []string{"one", "two", "three"} {
		q.Push(func(ctx context.Context) [][2]string {
			if ctx.Err() != nil {
				return [][2]string{{"cancelled", n}}
			}
			return [][2]string{{"delivered", n}}
		})
	}
	warnings, dropped := q.Drain(10 * time.Second)
	want := [][2]string{{"delivered", "one"}, {"delivered", "two"}, {"delivered", "three"}}
	if dropped || !slices.Equal(warnings, want) {
		t.Errorf("Drain = %v, dropped %v; want %v", warnings, dropped, want)
	}
}

// Drain gives up at its timeout and says so.
func TestDrainIsBounded(t *testing.T) {
	q := Start(context.Background())
	release := make(chan struct{})
	defer close(release)
	q.Push(func(ctx context.Context) [][2]string {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	if _, dropped := q.Drain(10 * time.Millisecond); !dropped {
		t.Error("Drain returned before the stuck notification and did not say it dropped it")
	}
}
