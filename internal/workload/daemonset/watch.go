package daemonset

import (
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// viewWatch passes a DaemonSet watch on as its views. It is not watch.Filter: that one's
// goroutine blocks for ever on an event its reader no longer takes once the watch is stopped,
// so every watch stopped with an event unread leaked a goroutine and the server's watch.
// Stop returns once the watch has ended: its result channel is closed, nothing more comes.
type viewWatch struct {
	incoming watch.Interface
	result   chan watch.Event
	stopped  chan struct{}
	ended    chan struct{}
	stopOnce sync.Once
}

func newViewWatch(incoming watch.Interface) *viewWatch {
	w := &viewWatch{incoming: incoming, result: make(chan watch.Event), stopped: make(chan struct{}), ended: make(chan struct{})}
	go w.loop()
	return w
}

func (w *viewWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *viewWatch) Stop() {
	w.stopOnce.Do(func() {
		close(w.stopped)
		w.incoming.Stop()
	})
	<-w.ended
}

func (w *viewWatch) loop() {
	defer close(w.ended)
	defer close(w.result)
	in := w.incoming.ResultChan()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-w.stopped:
			return
		case ev, ok = <-in:
			if !ok {
				return
			}
		}
		if ds, isDaemonSet := ev.Object.(*appsv1.DaemonSet); isDaemonSet {
			ev.Object = View(ds)
		}
		select {
		case <-w.stopped:
			return
		case w.result <- ev:
		}
	}
}
