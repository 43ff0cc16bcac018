package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// phaseChange is a Canary's phase as the bench saw it change.
type phaseChange struct {
	at    time.Time
	phase string
}

// phaseWatcher timestamps the phase changes of every Canary in the cluster, keyed by
// namespace (the bench runs one Canary per namespace).
type phaseWatcher struct {
	mu      sync.Mutex
	changes map[string][]phaseChange
	stop    context.CancelFunc
}

func watchPhases(ctx context.Context, dyn dynamic.Interface) (*phaseWatcher, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &phaseWatcher{changes: map[string][]phaseChange{}, stop: cancel}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := factory.ForResource(canaryResource).Informer()
	on := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		w.add(u.GetNamespace(), canaryPhase(u), time.Now())
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, obj any) { on(obj) }}); err != nil {
		cancel()
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		return nil, fmt.Errorf("watching Canaries: the informer did not sync")
	}
	return w, nil
}

// add records phase unless it is the namespace's current one.
func (w *phaseWatcher) add(ns, phase string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	list := w.changes[ns]
	if n := len(list); n > 0 && list[n-1].phase == phase {
		return
	}
	w.changes[ns] = append(list, phaseChange{at: at, phase: phase})
}

// reached is the first time ns entered phase at or after since; failed tells whether it
// entered Failed first.
func (w *phaseWatcher) reached(ns, phase string, since time.Time) (at time.Time, failed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.changes[ns] {
		if c.at.Before(since) {
			continue
		}
		switch c.phase {
		case phase:
			return c.at, false
		case "Failed":
			return time.Time{}, true
		}
	}
	return time.Time{}, false
}

// waitAll waits until every namespace's Canary entered phase after since and returns the
// moment the last one did. A Canary that fails ends the wait with an error.
func (w *phaseWatcher) waitAll(ctx context.Context, namespaces []string, phase string, since time.Time, timeout time.Duration) (time.Time, error) {
	var last time.Time
	left := len(namespaces)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last, left = time.Time{}, 0
		for _, ns := range namespaces {
			at, failed := w.reached(ns, phase, since)
			if failed {
				return false, fmt.Errorf("the Canary in %s failed before %s", ns, phase)
			}
			if at.IsZero() {
				left++
			} else if at.After(last) {
				last = at
			}
		}
		return left == 0, nil
	})
	if err != nil {
		return last, fmt.Errorf("%d of %d Canaries did not reach %s: %w", left, len(namespaces), phase, err)
	}
	return last, nil
}

// history renders the phase changes of ns after since, in seconds, for the progress log.
func (w *phaseWatcher) history(ns string, since time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for _, c := range w.changes[ns] {
		if !c.at.Before(since) {
			parts = append(parts, fmt.Sprintf("%.1f %s", c.at.Sub(since).Seconds(), c.phase))
		}
	}
	return strings.Join(parts, ", ")
}

func (w *phaseWatcher) close() { w.stop() }
