package provider

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

// progressAnalysis has three short steps, so that the lines of each arrive well before the
// apply ends.
const progressAnalysis = `
    interval    = "3s"
    threshold   = 1
    max_weight  = 30
    step_weight = 10
    metrics = [
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },
    ]`

var (
	checkoutProviderOnce sync.Once
	checkoutProviderCLI  string
	checkoutProviderErr  error
)

// checkoutProvider builds the provider from this checkout into a folder of its own (under the
// user's cache), once per test binary, and returns a CLI configuration whose dev_overrides use it: the stack's
// provider is built from the checkout that started the stack, which may be another one.
func checkoutProvider(t *testing.T) string {
	t.Helper()
	checkoutProviderOnce.Do(func() {
		root, err := localstack.RepoRoot()
		if err != nil {
			checkoutProviderErr = err
			return
		}
		// One folder per checkout, reused (and rebuilt) by each run: shared by the tests of
		// this binary, so not a test's TempDir.
		cache, err := os.UserCacheDir()
		if err != nil {
			checkoutProviderErr = err
			return
		}
		sum := sha256.Sum256([]byte(root))
		dir := filepath.Join(cache, "terraform-provider-canary", "checkout-provider", hex.EncodeToString(sum[:8]))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			checkoutProviderErr = err
			return
		}
		build := exec.Command("go", "build", "-o", filepath.Join(dir, "terraform-provider-canary"), ".")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			checkoutProviderErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		checkoutProviderCLI = filepath.Join(dir, "terraformrc")
		checkoutProviderErr = os.WriteFile(checkoutProviderCLI, []byte(fmt.Sprintf(`provider_installation {
  dev_overrides {
    "registry.terraform.io/canary-release/canary" = %[1]q
    "registry.opentofu.org/canary-release/canary" = %[1]q
  }
  direct {}
}
`, dir)), 0o644)
	})
	if checkoutProviderErr != nil {
		t.Fatalf("building the provider: %v", checkoutProviderErr)
	}
	return checkoutProviderCLI
}

// ttyLine is one line of what a terminal showed, and when it arrived.
type ttyLine struct {
	at   time.Time
	text string
}

// applyIn runs `terraform apply` in a pseudo-terminal (script -qec, as a user at a terminal
// would) or, with tty false, with no controlling terminal at all (setsid), and returns each
// line of its output with the time it arrived, and the time the apply ended.
func (w *workdir) applyIn(tty bool, env ...string) (lines []ttyLine, ended time.Time, err error) {
	w.t.Helper()
	apply := w.c.env.TerraformPath + " apply -auto-approve -no-color"
	var cmd *exec.Cmd
	if tty {
		cmd = exec.Command("script", "-qec", apply, "/dev/null")
	} else {
		cmd = exec.Command("setsid", "-w", "sh", "-c", apply)
	}
	probe, _ := w.command()
	cmd.Dir, cmd.Env = w.dir, append(probe.Env, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, time.Time{}, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, time.Time{}, err
	}
	scanner := bufio.NewScanner(stdout)
	for scanner.Scan() {
		lines = append(lines, ttyLine{at: time.Now(), text: strings.TrimRight(scanner.Text(), "\r")})
	}
	err = cmd.Wait()
	return lines, time.Now(), err
}

func transcript(lines []ttyLine) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.text + "\n")
	}
	return b.String()
}

// progressLines are the lines of the release's progress in a transcript. Each must be a line
// of its own: one that starts with anything else was mixed into Terraform's output.
func progressLines(t *testing.T, lines []ttyLine, ns string) []ttyLine {
	t.Helper()
	prefix := "canary_release " + ns + "/podinfo: "
	var out []ttyLine
	for _, l := range lines {
		switch i := strings.Index(l.text, prefix); {
		case i == 0:
			out = append(out, l)
		case i > 0:
			t.Errorf("a progress line is mixed into another line: %q", l.text)
		}
	}
	return out
}

// expectLive checks that each pattern matches a progress line that arrived at least lead
// before the apply ended: it was shown as it happened, not at the end.
func expectLive(t *testing.T, progress []ttyLine, ended time.Time, lead time.Duration, patterns ...string) {
	t.Helper()
	for _, pattern := range patterns {
		re := regexp.MustCompile(pattern)
		found := false
		for _, l := range progress {
			if re.MatchString(l.text) {
				found = true
				if ended.Sub(l.at) < lead {
					t.Errorf("the line %q arrived %s before the apply ended, want at least %s: not live", l.text, ended.Sub(l.at), lead)
				}
				break
			}
		}
		if !found {
			t.Errorf("no progress line matches %q", pattern)
		}
	}
}

// A user running terraform apply in a terminal sees each step as it happens, without TF_LOG:
// the weight, each metric's value against its range, the failed check and the verdict, each
// on a line of its own. The same apply with no terminal, or with CANARY_TERMINAL_PROGRESS=false,
// prints none of it. The state ConfigMap's labels show the phase, the weight and the last check.
func TestAccRelease_terminalProgress(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	w := c.workdir(t)
	w.cliConfig = checkoutProvider(t)
	write := func(image, errorRate string) {
		t.Helper()
		config := `terraform {
  required_providers {
    canary = { source = "canary-release/canary" }
  }
}
` + releaseConfig(ns, manifestWorkload(image, errorRate), progressAnalysis, "")
		if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("podinfo:6.0.0", "0")
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = w.run("destroy", "-auto-approve") })
	liveView := func() (map[string]string, map[string]string) {
		t.Helper()
		cm, err := c.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), rollout.StateConfigMapName("podinfo"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Labels, cm.Annotations
	}

	// A promotion, in a terminal. (testAccStack turns the lines off for the other tests.)
	on := envTerminalProgress + "=true"
	write("podinfo:6.0.1", "0")
	lines, ended, err := w.applyIn(true, on)
	if err != nil {
		t.Fatalf("promotion in a terminal: %v\n%s", err, transcript(lines))
	}
	progress := progressLines(t, lines, ns)
	t.Logf("the promotion's terminal:\n%s", transcript(lines))
	expectLive(t, progress, ended, 3*time.Second,
		`: Progressing: New revision detected`,
		`: canary weight 10%`,
		`: canary weight 20%`,
		`: metric request-success-rate = \d+\.\d\d, within threshold_range \[min 99\]`)
	expectLive(t, progress, ended, 0, `: Succeeded: `)
	if !strings.Contains(transcript(lines), "Apply complete!") {
		t.Errorf("Terraform's own output is missing from the terminal:\n%s", transcript(lines))
	}
	labels, annotations := liveView()
	if labels[rollout.LabelPhase] != "Succeeded" || labels[rollout.LabelWeight] != "0" || labels[rollout.LabelLastCheck] != "passed" ||
		!strings.Contains(annotations[rollout.AnnotationLastCheck], "request-success-rate") {
		t.Errorf("state ConfigMap labels %v, annotations %v; want Succeeded, 0, passed and the last check", labels, annotations)
	}
	kubectl := exec.Command("kubectl", "get", "configmaps", "-n", ns, "-l", "app.kubernetes.io/managed-by=terraform-provider-canary",
		"-L", "canary-release.dev/phase,canary-release.dev/weight,canary-release.dev/last-check")
	kubectl.Env = append(os.Environ(), "KUBECONFIG="+c.env.Kubeconfig)
	if out, err := kubectl.CombinedOutput(); err != nil || !regexp.MustCompile(`podinfo-canary-release\s+\d+\s+\S+\s+Succeeded\s+0\s+passed`).Match(out) {
		t.Errorf("the documented kubectl line: %v\n%s", err, out)
	}

	// A rollback, in a terminal.
	write("podinfo:6.0.2", "0.5")
	lines, ended, err = w.applyIn(true, on)
	if err == nil {
		t.Fatalf("the failing revision went through:\n%s", transcript(lines))
	}
	progress = progressLines(t, lines, ns)
	t.Logf("the rollback's terminal:\n%s", transcript(lines))
	expectLive(t, progress, ended, 2*time.Second,
		`: Progressing: New revision detected`,
		`: canary weight 10%`,
		`: metric request-success-rate returned \d+\.\d\d, outside threshold_range \[min 99\] \(failed checks: 1 of threshold 1\)`)
	expectLive(t, progress, ended, 0, `: Failed: `)
	labels, annotations = liveView()
	if labels[rollout.LabelPhase] != "Failed" || labels[rollout.LabelWeight] != "0" || labels[rollout.LabelLastCheck] != "failed" ||
		!strings.Contains(annotations[rollout.AnnotationLastCheck], "outside threshold_range") {
		t.Errorf("state ConfigMap labels %v, annotations %v; want Failed, 0, failed and the failed check", labels, annotations)
	}

	// The same runs with no terminal, and in a terminal with the lines turned off, print none.
	for _, run := range []struct {
		name string
		tty  bool
		env  []string
	}{
		{name: "no terminal", env: []string{on}},
		{name: "CANARY_TERMINAL_PROGRESS=false", tty: true, env: []string{"CANARY_TERMINAL_PROGRESS=false"}},
	} {
		failing := map[string]string{"no terminal": "podinfo:6.0.4", "CANARY_TERMINAL_PROGRESS=false": "podinfo:6.0.5"}
		// The last run's failing revision was measured on the same canary: its series must be
		// out of the metric window before 6.0.1, a release again after the first loop, is.
		waitOutCanaryMetricWindow()
		write("podinfo:6.0.1", "0") // back to 6.0.1: nothing to release the first time
		if out, err := w.run("apply", "-auto-approve"); err != nil {
			t.Fatalf("back to the promoted revision: %v\n%s", err, out)
		}
		waitOutCanaryMetricWindow() // the failing revision before it was measured on the same canary
		write("podinfo:6.0.3", "0")
		lines, _, err := w.applyIn(run.tty, run.env...)
		if err != nil {
			t.Fatalf("%s: promotion: %v\n%s", run.name, err, transcript(lines))
		}
		if p := progressLines(t, lines, ns); len(p) > 0 || !strings.Contains(transcript(lines), "Apply complete!") {
			t.Errorf("%s: %d progress lines printed, want none, and Terraform's own output:\n%s", run.name, len(p), transcript(lines))
		}
		// A failing revision of its own: 6.0.2 was rejected above, and its apply would be
		// refused before any run (the plan's warning about it is no progress line either).
		write(failing[run.name], "0.5")
		lines, _, err = w.applyIn(run.tty, run.env...)
		if err == nil {
			t.Fatalf("%s: the failing revision went through", run.name)
		}
		if p := progressLines(t, lines, ns); len(p) > 0 || !strings.Contains(transcript(lines), "request-success-rate") {
			t.Errorf("%s: %d progress lines printed, want none, and Terraform's error:\n%s", run.name, len(p), transcript(lines))
		}
	}
	// Leave the promoted revision, which the destroy gives the traffic to.
	write("podinfo:6.0.3", "0")
	if out, err := w.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("back to the promoted revision: %v\n%s", err, out)
	}
}
