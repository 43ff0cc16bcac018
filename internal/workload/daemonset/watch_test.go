package daemonset

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A watch stopped while the server has sent an event its reader never took has ended when
// Stop returns: its result channel is closed and the unread event is not delivered. (With
// watch.Filter the event stayed pending on a goroutine that nothing would ever end.)
func TestWatchStoppedWithAnEventUnreadEnds(t *testing.T) {
	server := watch.NewFakeWithChanSize(1, false)
	client := fake.NewClientset()
	client.PrependWatchReactor("daemonsets", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, server, nil
	})
	w, err := New(client.AppsV1().DaemonSets("ns")).Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: "ns"}}
	server.Add(ds)
	first, ok := <-w.ResultChan()
	if !ok {
		t.Fatal("the watch closed before its first event")
	}
	if _, isView := first.Object.(*appsv1.Deployment); !isView {
		t.Fatalf("event carries %T, want the Deployment-shaped view", first.Object)
	}

	server.Modify(ds) // sent, never read
	w.Stop()
	if ev, open := <-w.ResultChan(); open {
		t.Fatalf("the stopped watch still delivers a %s event: the goroutine passing events on is still running", ev.Type)
	}
}
