package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

// releaseSpec is the canary_release configuration of a scenario.
type releaseSpec struct {
	// Namespace is the namespace of a single release; with Count > 0 the releases go to
	// NamespacePrefix-000, -001, …
	Namespace       string
	Count           int
	NamespacePrefix string
	Replicas        int
	Interval        string
	Threshold       int
	MaxWeight       int
	StepWeight      int
	// WebhookURL adds a rollout webhook.
	WebhookURL string
	// Metrics adds the two built-in checks (two Prometheus queries per step).
	Metrics bool
	// SuccessQuery and DurationQuery are those checks' queries, for a router without
	// built-in metrics; empty keeps the built-in ones.
	SuccessQuery, DurationQuery string
	// QPS sets the provider's kubernetes.qps (burst twice that); 0 keeps its default.
	QPS int
	// Router is the mesh_provider ("" is osm); ServiceExtra and ResourceExtra are the HCL
	// lines that router needs in the service block and in the resource.
	Router, ServiceExtra, ResourceExtra string
	// TargetRef, when set, is the release's target_ref (a driver-owned target the bench
	// changes itself, released on the image_tag trigger) instead of its manifest.
	TargetRef string
}

// The scenario of Flagger's measurement: podinfo, osm, maxWeight 50, stepWeight 10.
var releaseTemplate = template.Must(template.New("main.tf").Parse(`terraform {
  required_providers {
    canary = { source = "canary-release/canary" }
  }
}

variable "image_tag" { type = string }
{{- if .Count }}
variable "releases" { type = number }
{{- end }}

{{- if .QPS }}
provider "canary" {
  kubernetes = { qps = {{ .QPS }}, burst = {{ .Burst }} }
}
{{- else }}
provider "canary" {}
{{- end }}

resource "canary_release" "podinfo" {
{{- if .Count }}
  count         = var.releases
  namespace     = format("{{ .NamespacePrefix }}-%03d", count.index)
{{- else }}
  namespace     = "{{ .Namespace }}"
{{- end }}
  name          = "podinfo"
  mesh_provider = "{{ .MeshProvider }}"
{{- if .ResourceExtra }}
  {{ .ResourceExtra }}
{{- end }}

{{- if .TargetRef }}
  target_ref = {{ .TargetRef }}
  triggers   = { image = var.image_tag }
{{- else }}
  manifest = yamlencode({
    apiVersion = "apps/v1"
    kind       = "Deployment"
    metadata   = { name = "podinfo" }
    spec = {
      replicas = {{ .Replicas }}
      selector = { matchLabels = { app = "podinfo" } }
      template = {
        metadata = { labels = { app = "podinfo" } }
        spec = {
          containers = [{
            name  = "podinfo"
            image = "ghcr.io/stefanprodan/podinfo:${var.image_tag}"
            ports = [{ name = "http", containerPort = 9898 }]
          }]
        }
      }
    }
  })
{{- end }}

{{- if .ServiceExtra }}
  service = {
    port = 9898
    {{ .ServiceExtra }}
  }
{{- else }}
  service = { port = 9898 }
{{- end }}

  analysis = {
    interval    = "{{ .Interval }}"
    threshold   = {{ .Threshold }}
    max_weight  = {{ .MaxWeight }}
    step_weight = {{ .StepWeight }}
{{- if .Metrics }}
    metrics = [
      { name = "request-success-rate", interval = "30s", threshold_range = { min = 99 }{{ if .SuccessQuery }}, query = {{ printf "%q" .SuccessQuery }}{{ end }} },
      { name = "request-duration", interval = "30s", threshold_range = { max = 500 }{{ if .DurationQuery }}, query = {{ printf "%q" .DurationQuery }}{{ end }} },
    ]
{{- end }}
{{- if .WebhookURL }}
    webhooks = [{ name = "load-test", type = "rollout", url = "{{ .WebhookURL }}", timeout = "5s" }]
{{- end }}
  }
}
`))

// MeshProvider is the release's mesh_provider.
func (s releaseSpec) MeshProvider() string {
	if s.Router == "" {
		return "osm"
	}
	return s.Router
}

// Burst is the provider's kubernetes.burst when QPS is set.
func (s releaseSpec) Burst() int { return 2 * s.QPS }

func (s releaseSpec) render() (string, error) {
	var b bytes.Buffer
	err := releaseTemplate.Execute(&b, s)
	return b.String(), err
}

// steps is the number of analysis steps, N = ⌈max_weight / step_weight⌉.
func (s releaseSpec) steps() int {
	return (s.MaxWeight + s.StepWeight - 1) / s.StepWeight
}

func (s releaseSpec) interval() time.Duration {
	d, _ := time.ParseDuration(s.Interval)
	return d
}

// workspace is one Terraform working directory.
type workspace struct {
	env *localstack.Env
	dir string
	// extraEnv overrides the stack's variables (later entries win in os/exec).
	extraEnv []string
	logs     int
	// tflog writes the provider's log lines (TF_LOG_PROVIDER) next to each run's output.
	tflog string
	// coreLog is Terraform core's level in that log (TF_LOG_CORE); empty is WARN.
	coreLog string
}

func newWorkspace(env *localstack.Env, dir string, spec releaseSpec, extraEnv []string, tflog string) (*workspace, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tf, err := spec.render()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(tf), 0o644); err != nil {
		return nil, err
	}
	return &workspace{env: env, dir: dir, extraEnv: extraEnv, tflog: tflog}, nil
}

// tfRun is a terraform process the bench started.
type tfRun struct {
	cmd        *exec.Cmd
	log        string
	start, end time.Time
	err        error
	done       chan struct{}
}

// start launches terraform with args; its output goes to a numbered log file in the workspace.
func (w *workspace) start(ctx context.Context, env []string, args ...string) (*tfRun, error) {
	w.logs++
	logPath := filepath.Join(w.dir, fmt.Sprintf("%02d-%s.log", w.logs, args[0]))
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, w.env.TerraformPath, append(args, "-no-color")...)
	cmd.Dir = w.dir
	cmd.Env = append(append(append(os.Environ(), w.env.TerraformEnv()...), w.extraEnv...), env...)
	if w.tflog != "" {
		// The provider's stderr (client-go's klog lines among them) reaches Terraform as
		// "unexpected data" on the plugin's stderr, which Terraform logs at WARN in its core log.
		core := w.coreLog
		if core == "" {
			core = "WARN"
		}
		cmd.Env = append(cmd.Env, "TF_LOG_PROVIDER="+w.tflog, "TF_LOG_CORE="+core, "TF_LOG_PATH="+strings.TrimSuffix(logPath, ".log")+".tflog")
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Let terraform roll back on its own when the bench is interrupted.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 2 * time.Minute
	r := &tfRun{cmd: cmd, log: logPath, done: make(chan struct{})}
	r.start = time.Now()
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, err
	}
	go func() {
		r.err = cmd.Wait()
		r.end = time.Now()
		out.Close()
		close(r.done)
	}()
	return r, nil
}

// wait returns the wall time of the process and its error, with the log's tail on failure.
func (r *tfRun) wait() (time.Duration, error) {
	<-r.done
	wall := r.end.Sub(r.start)
	if r.err != nil {
		return wall, fmt.Errorf("terraform %s: %v\n%s", strings.Join(r.cmd.Args[1:], " "), r.err, tail(r.log, 25))
	}
	return wall, nil
}

// run is start + wait.
func (w *workspace) run(ctx context.Context, env []string, args ...string) (time.Duration, error) {
	r, err := w.start(ctx, env, args...)
	if err != nil {
		return 0, err
	}
	return r.wait()
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// lastTFLog is the provider log file of the workspace's latest run (with tflog set).
func (w *workspace) lastTFLog() string {
	matches, _ := filepath.Glob(filepath.Join(w.dir, fmt.Sprintf("%02d-*.tflog", w.logs)))
	if len(matches) == 0 {
		return ""
	}
	return matches[0]
}
