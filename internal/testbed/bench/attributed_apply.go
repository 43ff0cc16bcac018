package main

import (
	"context"
	"path/filepath"
	"runtime"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

// attributed is one measured apply with what the breakdown and the CPU account tell of it.
type attributed struct {
	processFigures
	breakdown []releaseBreakdown
	cpu       cpuAccount
}

// attributedApply runs one measured apply of the releases in namespaces (resource index i in
// namespaces[i]) that releases newImage, and attributes it: the provider's log and Terraform
// core's at INFO at least (-tflog may ask for more), the releases' objects watched, and the
// stack's processes' CPU read before and after. The breakdown and the account come back even
// when the apply failed, with its error.
func (b *bench) attributedApply(ctx context.Context, ws *workspace, label string, namespaces []string, interval time.Duration, newImage string, profile bool, args ...string) (attributed, error) {
	level, core := ws.tflog, ws.coreLog
	defer func() { ws.tflog, ws.coreLog = level, core }()
	ws.tflog, ws.coreLog = "INFO", "INFO"
	if b.opts.tflog == "DEBUG" || b.opts.tflog == "TRACE" {
		ws.tflog = b.opts.tflog
	}
	watch, err := watchApply(ctx, b.cl.kube, b.cl.dyn, namespaces, "podinfo", newImage)
	if err != nil {
		return attributed{}, err
	}
	runDir := filepath.Join(localstack.StackDir(b.env.Root), "run")
	before := snapshotStackCPU(runDir)
	o, err := b.observed(ctx, ws, profile, label, args...)
	after := snapshotStackCPU(runDir)
	watched := watch.done()
	a := attributed{processFigures: o}
	if o.start.IsZero() {
		return a, err
	}
	a.cpu = accountCPU(before, after, o)
	logged := map[string]*moments{}
	namespaceOf := func(i int) string { return namespaces[min(max(i, 0), len(namespaces)-1)] }
	if perr := parseApplyLog(ws.lastTFLog(), namespaceOf, logged); perr != nil {
		progress("%s: reading the apply's log for the breakdown: %v", label, perr)
	}
	a.breakdown = breakdownOf(watched, logged, namespaces, o.start, o.start.Add(o.wall), interval)
	if len(namespaces) > 1 {
		progress("%s: where each release's time went (%d releases):\n%s", label, len(namespaces), breakdownTable(a.breakdown))
		progress("%s: CPU seconds by process over the apply:\n%s", label, cpuTable([]cpuAccount{a.cpu}, runtime.NumCPU()))
	}
	return a, err
}
