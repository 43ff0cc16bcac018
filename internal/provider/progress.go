package provider

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/terminal"
)

// The subsystems of the provider's logs. TF_LOG_PROVIDER sets their level, and
// TF_LOG_PROVIDER_CANARY_ROLLOUT or TF_LOG_PROVIDER_CANARY_KUBERNETES one of them alone.
const (
	// logRollout has the progress lines, with fields (see progressFields), and each
	// Prometheus query at DEBUG.
	logRollout = "rollout"
	// logKubernetes has each API request: writes at DEBUG, reads at TRACE.
	logKubernetes = "kubernetes"
)

// envTerminalProgress turns the terminal's progress lines off ("false") when the provider
// block does not set terminal_progress.
const envTerminalProgress = "CANARY_TERMINAL_PROGRESS"

// terminalProgress is the setting: the attribute when set, else the environment variable,
// else on.
func terminalProgress(attribute *bool) (bool, error) {
	if attribute != nil {
		return *attribute, nil
	}
	v := strings.TrimSpace(os.Getenv(envTerminalProgress))
	if v == "" {
		return true, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, &settingError{setting: envTerminalProgress, value: v, allowed: "true or false (1 or 0)"}
	}
	return on, nil
}

type settingError struct{ setting, value, allowed string }

func (e *settingError) Error() string {
	return e.setting + " is " + strconv.Quote(e.value) + ": it must be " + e.allowed
}

// The process's terminal is opened once, by the first run that prints to it; nil when the
// process has no controlling terminal.
var (
	terminalOnce  sync.Once
	terminalLines *terminal.Lines
)

func sharedTerminal() *terminal.Lines {
	terminalOnce.Do(func() {
		if l, err := terminal.Open(); err == nil {
			terminalLines = l
		}
	})
	return terminalLines
}

// runContextKey marks a context that runContext prepared, so that the API requests made with
// it are logged in the kubernetes subsystem (see loggingTransport).
type runContextKey struct{}

// runContext prepares ctx for the logs of a run: the rollout and kubernetes subsystems, and the
// configured credentials masked in every line, as field values and inside messages (an error
// may quote a URL or a header).
func (c *clients) runContext(ctx context.Context) context.Context {
	if ctx.Value(runContextKey{}) != nil {
		return ctx
	}
	ctx = tflog.MaskFieldValuesWithFieldKeys(ctx, "token", "bearer_token", "password", "client_key")
	if len(c.secrets) > 0 {
		ctx = tflog.MaskAllFieldValuesStrings(ctx, c.secrets...)
		ctx = tflog.MaskMessageStrings(ctx, c.secrets...)
	}
	for _, subsystem := range []string{logRollout, logKubernetes} {
		ctx = tflog.NewSubsystem(ctx, subsystem, tflog.WithLevelFromEnv("TF_LOG_PROVIDER_CANARY", subsystem))
		ctx = tflog.SubsystemMaskFieldValuesWithFieldKeys(ctx, subsystem, "token", "bearer_token", "password", "client_key")
		if len(c.secrets) > 0 {
			ctx = tflog.SubsystemMaskAllFieldValuesStrings(ctx, subsystem, c.secrets...)
			ctx = tflog.SubsystemMaskMessageStrings(ctx, subsystem, c.secrets...)
		}
	}
	return context.WithValue(ctx, runContextKey{}, true)
}

// progressReporter sends a run's progress lines to the rollout subsystem's log, with their
// fields, and, when terminal_progress is on and Terraform runs in a terminal, to it. Details
// (each query) go to the DEBUG log only. ctx must come from runContext.
func (c *clients) progressReporter(ctx context.Context) func(rollout.Progress) {
	var tty *terminal.Lines
	if c.terminalProgress {
		tty = sharedTerminal()
	}
	secrets := c.secrets
	return func(p rollout.Progress) {
		fields := progressFields(p)
		switch {
		case p.Detail():
			tflog.SubsystemDebug(ctx, logRollout, p.Message, fields)
			return
		case p.Kind == rollout.ProgressWarning:
			tflog.SubsystemWarn(ctx, logRollout, p.Message, fields)
		default:
			tflog.SubsystemInfo(ctx, logRollout, p.Message, fields)
		}
		if tty != nil {
			tty.Line(masked(p.Text(), secrets))
		}
	}
}

// progressFields are a progress line's fields in the log.
func progressFields(p rollout.Progress) map[string]any {
	fields := map[string]any{
		"namespace": p.Namespace, "name": p.Name, "kind": string(p.Kind), "phase": string(p.Phase), "weight": p.Weight,
	}
	if p.Metric != "" {
		fields["metric"] = p.Metric
	}
	if p.Range != "" {
		fields["range"] = p.Range
	}
	if p.Value != nil {
		fields["value"] = *p.Value
	}
	if p.Query != "" {
		fields["query"] = p.Query
	}
	return fields
}

// masked replaces the configured credentials in a line the terminal shows, as tflog's masks
// do in the logs.
func masked(line string, secrets []string) string {
	for _, s := range secrets {
		if s != "" {
			line = strings.ReplaceAll(line, s, "***")
		}
	}
	return line
}

// loggingTransport logs each API request a run makes, in the kubernetes subsystem: the
// writes at DEBUG, the reads at TRACE, with the method, the path, the status and the time
// taken. Neither headers nor bodies are logged (credentials, Secrets).
type loggingTransport struct{ next http.RoundTripper }

func (t loggingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if ctx.Value(runContextKey{}) == nil {
		return t.next.RoundTrip(req)
	}
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	fields := map[string]any{"method": req.Method, "path": req.URL.Path, "duration_ms": time.Since(start).Milliseconds()}
	if q := req.URL.Query(); q.Get("watch") != "" {
		fields["watch"] = true
	}
	if resp != nil {
		fields["status"] = resp.StatusCode
	}
	if err != nil {
		fields["error"] = err.Error()
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		tflog.SubsystemTrace(ctx, logKubernetes, "API read", fields)
	default:
		tflog.SubsystemDebug(ctx, logKubernetes, "API write", fields)
	}
	return resp, err
}
