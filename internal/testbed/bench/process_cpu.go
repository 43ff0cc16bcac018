package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The per-process CPU account of an apply (issue 35: "attribute every second"): the CPU
// seconds each of the stack's processes, Terraform and the provider spent over the apply,
// beside the machine's total, so a reader sees who was busy and how much of the two cores
// was left idle.

// stackComponents are the stack's processes in the order the report lists them, by the name
// of their pid file in the stack's run folder (stack.sh writes one per component).
var stackComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "etcd", "prometheus", "meshsim", "traefik", "pushgateway"}

// cpuAccount is the CPU time each process spent over one apply.
type cpuAccount struct {
	wall time.Duration
	// byProcess: the stack's components, then "terraform", "provider" and "bench" (this
	// process: its watches and proxies).
	byProcess map[string]time.Duration
	order     []string
	// machine is the CPU time of every process on the machine over the window (from
	// /proc/stat): what the named ones leave out is other work (other tests, builds).
	machine time.Duration
}

// stackCPUSnapshot is the CPU time so far of each stack component, of this process and of
// the machine.
type stackCPUSnapshot struct {
	at      time.Time
	pids    map[string]int
	ticks   map[string]int64
	self    time.Duration
	machine time.Duration
}

// snapshotStackCPU reads the stack's pid files in runDir and each process's CPU time. A
// component without a pid file or a live process is left out (it is then missing from the
// account, not zero).
func snapshotStackCPU(runDir string) stackCPUSnapshot {
	s := stackCPUSnapshot{at: time.Now(), pids: map[string]int{}, ticks: map[string]int64{}}
	for _, name := range stackComponents {
		b, err := os.ReadFile(filepath.Join(runDir, name+".pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		ticks, err := processTicks(pid)
		if err != nil {
			continue
		}
		s.pids[name], s.ticks[name] = pid, ticks
	}
	s.self = selfCPU()
	s.machine = machineCPU()
	return s
}

// processTicks is the CPU time of pid itself (utime + stime), in clock ticks.
func processTicks(pid int) (int64, error) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	st, err := parseStat(stat)
	if err != nil {
		return 0, err
	}
	return st.cpuTicks, nil
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU is the busy CPU time of the whole machine so far: the first line of /proc/stat
// (user, nice, system, irq, softirq, steal; idle and iowait left out), in clock ticks.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	return parseMachineCPU(string(b))
}

func parseMachineCPU(stat string) time.Duration {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * clockTick
}

// accountCPU builds the account from the snapshots around an apply and the apply's own
// figures (Terraform's CPU with its waited-for children, and the provider processes'). A
// component whose pid changed between the snapshots restarted: it is left out.
func accountCPU(before, after stackCPUSnapshot, f processFigures) cpuAccount {
	a := cpuAccount{wall: after.at.Sub(before.at), byProcess: map[string]time.Duration{}}
	for _, name := range stackComponents {
		pid, ok := before.pids[name]
		if !ok || after.pids[name] != pid {
			continue
		}
		a.byProcess[name] = time.Duration(after.ticks[name]-before.ticks[name]) * clockTick
		a.order = append(a.order, name)
	}
	a.byProcess["terraform"] = max(0, f.totalCPU-f.providerCPU)
	a.byProcess["provider"] = f.providerCPU
	a.byProcess["bench"] = after.self - before.self
	a.order = append(a.order, "terraform", "provider", "bench")
	a.machine = after.machine - before.machine
	return a
}

// named is the CPU time of the named processes together.
func (a cpuAccount) named() time.Duration {
	var sum time.Duration
	for _, d := range a.byProcess {
		sum += d
	}
	return sum
}

// cpuRow is one process's CPU seconds over the apply, over each of its samples.
type cpuRow struct {
	process string
	seconds []float64
	share   []float64 // of the machine's capacity over the apply (nproc × wall), percent
}

// cpuTable lays out the accounts of one scenario's runs: a row per process (the median over
// the runs), then the named processes together, the whole machine and its capacity.
func cpuTable(accounts []cpuAccount, nproc int) string {
	if len(accounts) == 0 {
		return ""
	}
	var names []string
	for _, a := range accounts {
		for _, n := range a.order {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	capacity := func(a cpuAccount) float64 { return float64(nproc) * a.wall.Seconds() }
	var rows []cpuRow
	add := func(name string, of func(cpuAccount) (time.Duration, bool)) {
		r := cpuRow{process: name}
		for _, a := range accounts {
			d, ok := of(a)
			if !ok {
				continue
			}
			r.seconds = append(r.seconds, d.Seconds())
			r.share = append(r.share, 100*d.Seconds()/capacity(a))
		}
		rows = append(rows, r)
	}
	for _, n := range names {
		add(n, func(a cpuAccount) (time.Duration, bool) { d, ok := a.byProcess[n]; return d, ok })
	}
	add("named processes", func(a cpuAccount) (time.Duration, bool) { return a.named(), true })
	add("other processes", func(a cpuAccount) (time.Duration, bool) { return max(0, a.machine-a.named()), true })
	add("machine (all processes)", func(a cpuAccount) (time.Duration, bool) { return a.machine, true })
	add(fmt.Sprintf("capacity (%d cores x wall)", nproc), func(a cpuAccount) (time.Duration, bool) {
		return time.Duration(capacity(a) * float64(time.Second)), true
	})
	lines := [][]string{{"process", "cpu_s", "of capacity", "n"}}
	for _, r := range rows {
		lines = append(lines, []string{r.process, formatNumber(median(r.seconds)), formatNumber(median(r.share)) + "%", strconv.Itoa(len(r.seconds))})
	}
	return alignColumns(lines)
}

// alignColumns renders rows of cells as left-aligned columns, with a rule under the first.
func alignColumns(lines [][]string) string {
	widths := map[int]int{}
	for _, l := range lines {
		for i, c := range l {
			widths[i] = max(widths[i], len(c))
		}
	}
	var b strings.Builder
	for n, l := range lines {
		var line strings.Builder
		for i, c := range l {
			fmt.Fprintf(&line, "%-*s  ", widths[i], c)
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
		if n == 0 {
			total := -2
			for i := range l {
				total += widths[i] + 2
			}
			b.WriteString(strings.Repeat("-", total) + "\n")
		}
	}
	return b.String()
}
