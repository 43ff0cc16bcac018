package rollout

import (
	"context"
	"fmt"
	"strings"

	"github.com/canary-release/terraform-provider-canary/internal/alert"
)

// alertedPhases are the phase changes that alerts hear of, with their severity: Flagger's,
// plus every failure (Flagger sends none for a progress-deadline failure, #1663). A gate's
// waiting is alerted by the gate itself, which knows whether it is muted.
var alertedPhases = map[Phase]string{
	PhaseInitialized: "info",
	PhaseProgressing: "info",
	PhaseSucceeded:   "info",
	PhaseFailed:      "error",
}

// alert queues an alert for the release's alerts (package notify). A delivery that fails is
// a warning of the apply, never a changed verdict.
func (r *run) alert(ctx context.Context, severity, message string) {
	if len(r.rel.Analysis.Alerts) == 0 {
		return
	}
	rel, note := r.rel, r.noteLater()
	event := alert.Event{
		Name: rel.Name, Namespace: rel.Namespace, Phase: string(r.st.Phase), Message: message, Severity: severity,
		Fields: []alert.Field{
			{Name: "Target", Value: fmt.Sprintf("%s/%s.%s", rel.WorkloadKind(), rel.Target, rel.Namespace)},
			{Name: "Canary weight", Value: fmt.Sprintf("%d%%", r.st.CanaryWeight)},
			{Name: "Failed checks", Value: fmt.Sprintf("%d of %d", r.st.FailedChecks, max(rel.Analysis.Threshold, 1))},
		},
		Time: r.e.now(),
	}
	r.notifyLater(ctx, func(ctx context.Context) [][2]string {
		errs := alert.Notifier{Alerts: rel.Analysis.Alerts}.Notify(ctx, event)
		if len(errs) == 0 {
			return nil
		}
		lines := make([]string, 0, len(errs))
		for _, err := range errs {
			lines = append(lines, err.Error())
		}
		note("alerts not delivered: %s", strings.Join(lines, "; "))
		return [][2]string{{"canary_release alert not delivered", fmt.Sprintf("The release %s/%s could not alert of %q: %s. The verdict does not depend on it.",
			rel.Namespace, rel.Name, message, strings.Join(lines, "; "))}}
	})
}
