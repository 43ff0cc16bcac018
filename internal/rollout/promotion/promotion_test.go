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

// rollback_window admits a template among the last N promoted before the current one, and
// nothing further back, nothing never promoted, and nothing when the window is off.
func TestRollbackWindow(t *testing.T) {
	history := []string{"rev4", "rev3", "rev2", "rev1"} // rev4 is the current primary's
	p, err := RollbackWindow(history, 2, "rev2")
	if err != nil || !p.Admits("rev2") || p.Route() != RouteRollbackWindow {
		t.Fatalf("RollbackWindow(.., 2, rev2) = %+v, %v", p, err)
	}
	for _, c := range []struct {
		revisions int
		candidate string
	}{{2, "rev1"}, {0, "rev3"}, {3, "rev9"}, {3, ""}} {
		if p, err := RollbackWindow(history, c.revisions, c.candidate); err == nil || p.Admits(c.candidate) {
			t.Errorf("RollbackWindow(%v, %d, %q) admitted it", history, c.revisions, c.candidate)
		}
	}
	if _, err := RollbackWindow(nil, 5, "rev2"); err == nil {
		t.Error("an empty history admitted rev2")
	}
}
