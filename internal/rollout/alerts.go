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

// alert tells the release's alerts. A delivery that fails is a warning of the apply, never a
// changed verdict.
func (r *run) alert(ctx context.Context, severity, message string) {
	if len(r.rel.Analysis.Alerts) == 0 {
		return
	}
	errs := alert.Notifier{Alerts: r.rel.Analysis.Alerts}.Notify(ctx, alert.Event{
		Name: r.rel.Name, Namespace: r.rel.Namespace, Phase: string(r.st.Phase), Message: message, Severity: severity,
		Fields: []alert.Field{
			{Name: "Target", Value: fmt.Sprintf("Deployment/%s.%s", r.rel.Target, r.rel.Namespace)},
			{Name: "Canary weight", Value: fmt.Sprintf("%d%%", r.st.CanaryWeight)},
			{Name: "Failed checks", Value: fmt.Sprintf("%d of %d", r.st.FailedChecks, max(r.rel.Analysis.Threshold, 1))},
		},
		Time: r.e.now(),
	})
	if len(errs) == 0 {
		return
	}
	lines := make([]string, 0, len(errs))
	for _, err := range errs {
		lines = append(lines, err.Error())
	}
	r.e.logf("%s/%s: alerts not delivered: %s", r.rel.Namespace, r.rel.Name, strings.Join(lines, "; "))
	r.e.warn("canary_release alert not delivered", fmt.Sprintf("The release %s/%s could not alert of %q: %s. The verdict does not depend on it.",
		r.rel.Namespace, r.rel.Name, message, strings.Join(lines, "; ")))
}
