package promotion

import (
	"strings"
	"testing"
)

// An operator's promote-now admits only the revision it was recorded for, and only while no
// check had failed.
func TestOperatorPromoteNow(t *testing.T) {
	p, err := OperatorPromoteNow("rev2", 0, "rev2")
	if err != nil || !p.Admits("rev2") || p.Route() != RouteOperatorPromoteNow {
		t.Fatalf("OperatorPromoteNow(rev2, 0, rev2) = %+v, %v", p, err)
	}
	if p.Admits("rev3") {
		t.Error("the proof for rev2 admits rev3")
	}
	if _, err := OperatorPromoteNow("rev2", 1, "rev2"); err == nil || !strings.Contains(err.Error(), "refused after a failed check") {
		t.Errorf("after a failed check: %v, want a refusal", err)
	}
	for _, recorded := range []string{"", "rev1"} {
		if _, err := OperatorPromoteNow(recorded, 0, "rev2"); err == nil {
			t.Errorf("recorded %q admitted rev2", recorded)
		}
	}
}
