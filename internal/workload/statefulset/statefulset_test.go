package statefulset

import "testing"

func TestPodsForWeight(t *testing.T) {
	for _, c := range []struct {
		weight   int
		replicas int32
		want     int32
	}{{10, 5, 1}, {20, 5, 1}, {50, 5, 2}, {100, 5, 5}, {60, 3, 1}, {70, 3, 2}, {5, 1, 1}} {
		if got := PodsForWeight(c.weight, c.replicas); got != c.want {
			t.Errorf("PodsForWeight(%d, %d) = %d, want %d", c.weight, c.replicas, got, c.want)
		}
	}
}
