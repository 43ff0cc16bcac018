package main

import (
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"
)

// rows lays the results out in the order of the issue, with Flagger's figures and the goals.
func (r results) rows() []row {
	bound := median(r.rollbackBoundS)
	parallelKey := fmt.Sprintf("parallel_%d_s", r.scaleReleases)
	refreshKey := fmt.Sprintf("refresh_%d_s", r.refreshReleases)
	rows := []row{
		{fig: figure{"apply_s", r.applyS}, unit: "s", flagger: measuredOr(r.flaggerApplyS, "137"), note: "image change to Succeeded, N=5 steps of 10s, 2 checks"},
		{fig: figure{"raw_ratio", r.rawRatio}, flagger: measuredOr(r.flaggerRatio, "2.7"), goal: goal{1.2, "<= 1.2"}, note: "apply_s / 50s"},
		{fig: figure{"overhead_ratio", r.overheadRatio}, goal: goal{1.05, "<= 1.05"}, note: "(apply_s - canary_wait_s - primary_wait_s) / 50s"},
		{fig: figure{"canary_wait_s", r.canaryWaitS}, unit: "s", note: "canary scaled up -> Ready (Deployment watch)"},
		{fig: figure{"primary_wait_s", r.primaryWaitS}, unit: "s", note: "primary template copied -> Ready (Deployment watch)"},
		{fig: figure{"before_update_s", r.beforeUpdateS}, unit: "s", note: "terraform start -> Update's first write (plan, provider start)"},
		{fig: figure{"analysis_extra_s", r.analysisExtraS}, unit: "s", note: "first shift -> 100% primary, beyond N x interval and primary_wait_s"},
		{fig: figure{"after_traffic_back_s", r.afterTrafficBackS}, unit: "s", note: "100% primary -> terraform exit (finalise, state)"},
		{fig: figure{"first_shift_s", r.firstShiftS}, unit: "s", flagger: measuredOr(r.flaggerFirstShiftS, "37"), note: "Update's first write -> first weight change (TrafficSplit watch)"},
		{fig: figure{"promotion_s", r.promotionS}, unit: "s", flagger: "40 (quoted)", note: "primary template copied -> 100% primary (Flagger: Promoting -> Finalising)"},
		{fig: figure{"rollback_s", r.rollbackS}, unit: "s", flagger: "30 (quoted)", goal: goal{bound + 1, fmt.Sprintf("<= %s", formatNumber(bound+1))},
			note: "first shift -> 100% primary, threshold 2, webhook 500"},
		{fig: figure{"rollback_bound_s", r.rollbackBoundS}, unit: "s", note: "threshold x interval"},
		{fig: figure{"init_s", r.initS}, unit: "s", note: "create of one release, primary Ready included"},
		{fig: figure{parallelKey, r.parallelS}, unit: "s", note: fmt.Sprintf("%d releases, -parallelism=100, N=5 steps", r.scaleReleases)},
		{fig: figure{"provider_peak_rss_mb", r.peakRSSMB}, unit: "MiB", goal: goal{200, "<= 200"}, note: "VmHWM of the provider processes"},
		{fig: figure{"api_requests_per_release_step", r.apiPerStep}, goal: goal{6, "<= 6"}, note: "provider's API requests (counting proxy) / releases / steps"},
		{fig: figure{"prom_queries_per_release_step", r.promPerStep}, note: "provider's /api/v1/query calls (counting proxy), 2 metrics"},
		{fig: figure{refreshKey, r.refreshS}, unit: "s", goal: goal{10, "<= 10"}, note: fmt.Sprintf("terraform plan -refresh-only, %d releases", r.refreshReleases)},
	}
	return append(rows, r.newRows()...)
}

// measuredOr is the median of Flagger's samples measured in this run, else the quoted figure.
func measuredOr(samples []float64, quoted string) string {
	if len(samples) == 0 {
		return quoted + " (quoted)"
	}
	return formatNumber(median(samples))
}

func (b *bench) report(w io.Writer) {
	rows := b.res.rows()
	fmt.Fprintf(w, "\ncanary_release benchmark on the local stack: nproc=%d, %d run(s) per scenario (%d of the scale scenarios), each figure the median of its n samples\n\n", runtime.NumCPU(), b.opts.runs, b.opts.scaleRuns)
	fmt.Fprint(w, table(rows))
	if len(b.res.apiBreakdown) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(b.res.apiBreakdown)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, b.res.apiBreakdown[k]))
		}
		fmt.Fprintf(w, "\nAPI requests of the last parallel apply, by kind: %s\n", strings.Join(parts, ", "))
	}
	b.reportBreakdowns(w)
	var figs []figure
	for _, r := range rows {
		figs = append(figs, r.fig)
	}
	if b.chartPath != "" {
		fmt.Fprintf(w, "\nSide-by-side chart (canary weight over time, Flagger and canary_release): %s\n", b.chartPath)
	}
	fmt.Fprintf(w, "\nruns=%d scale_runs=%d %s\n", b.opts.runs, b.opts.scaleRuns, keyValueLine(figs))
}

// reportBreakdowns prints, for each many-release apply, where its releases' time went (over
// every release of every run) and the CPU seconds of each process, with the stacked chart.
func (b *bench) reportBreakdowns(w io.Writer) {
	for _, label := range slices.Sorted(maps.Keys(b.res.breakdowns)) {
		var all []releaseBreakdown
		for _, run := range b.res.breakdowns[label] {
			all = append(all, run...)
		}
		fmt.Fprintf(w, "\nWhere each release's time went, %s (%d release applies over %d run(s)):\n%s", label, len(all), len(b.res.breakdowns[label]), breakdownTable(all))
		if path := b.breakdownCharts[label]; path != "" {
			fmt.Fprintf(w, "Stacked chart of the last run: %s\n", path)
		}
		var tails []float64
		for _, run := range b.res.breakdowns[label] {
			tails = append(tails, terraformTail(run).Seconds())
		}
		fmt.Fprintf(w, "Terraform's tail, the last verdict -> terraform exit: %ss (median over the runs)\n", formatNumber(median(tails)))
		fmt.Fprintf(w, "breakdown_%s %s tail_s=%s\n", label, breakdownKeyValues(all), formatNumber(median(tails)))
	}
	for _, label := range slices.Sorted(maps.Keys(b.res.cpuAccounts)) {
		accounts := b.res.cpuAccounts[label]
		fmt.Fprintf(w, "\nCPU seconds by process over the apply, %s (median of %d run(s); the stack is shared, so \"other processes\" is everything else on the machine):\n%s",
			label, len(accounts), cpuTable(accounts, runtime.NumCPU()))
		fmt.Fprintf(w, "cpu_%s %s\n", label, cpuKeyValues(accounts))
	}
	if len(b.res.routerBreakdowns) > 0 {
		fmt.Fprintf(w, "\nWhere each router's rollout went (one release; median seconds over the runs):\n%s", routerBreakdownTable(b.res.routerBreakdowns))
	}
}

// terraformTail is the time from the last release's verdict to Terraform's exit: the least
// "after" of one apply's releases.
func terraformTail(run []releaseBreakdown) time.Duration {
	tail := time.Duration(-1)
	for _, b := range run {
		if a, ok := b.by[waitAfter]; ok && (tail < 0 || a < tail) {
			tail = a
		}
	}
	return max(tail, 0)
}

// breakdownKeyValues is the median seconds of each category, as key=value pairs.
func breakdownKeyValues(bs []releaseBreakdown) string {
	var parts []string
	for _, s := range summarise(bs) {
		parts = append(parts, fmt.Sprintf("%s_s=%s", s.category, formatNumber(s.median)))
	}
	var totals []float64
	for _, b := range bs {
		totals = append(totals, b.total.Seconds())
	}
	return strings.Join(append(parts, "total_s="+formatNumber(median(totals))), " ")
}

// cpuKeyValues is the median CPU seconds of each process, as key=value pairs.
func cpuKeyValues(accounts []cpuAccount) string {
	var names []string
	for _, a := range accounts {
		for _, n := range a.order {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	var parts []string
	for _, n := range names {
		var xs []float64
		for _, a := range accounts {
			if d, ok := a.byProcess[n]; ok {
				xs = append(xs, d.Seconds())
			}
		}
		parts = append(parts, fmt.Sprintf("%s_s=%s", n, formatNumber(median(xs))))
	}
	var machine, wall []float64
	for _, a := range accounts {
		machine, wall = append(machine, a.machine.Seconds()), append(wall, a.wall.Seconds())
	}
	return strings.Join(append(parts, "machine_s="+formatNumber(median(machine)), "wall_s="+formatNumber(median(wall))), " ")
}

// routerBreakdownTable is a row per router: the median seconds of each category over its runs.
func routerBreakdownTable(byRouter map[string][]releaseBreakdown) string {
	header := []string{"router"}
	for _, c := range waitCategories {
		header = append(header, string(c))
	}
	lines := [][]string{append(header, "total")}
	for _, name := range weightedRouters() {
		bs := byRouter[name]
		if len(bs) == 0 {
			continue
		}
		line := []string{name}
		for _, s := range summarise(bs) {
			line = append(line, formatNumber(s.median))
		}
		var totals []float64
		for _, b := range bs {
			totals = append(totals, b.total.Seconds())
		}
		lines = append(lines, append(line, formatNumber(median(totals))))
	}
	return alignColumns(lines)
}
