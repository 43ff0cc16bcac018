package main

import (
	"fmt"
	"math"
)

// speedup is Flagger's median over ours, as a single derived sample (none when either side
// has no samples).
func speedup(flagger, ours []float64) []float64 {
	f, o := median(flagger), median(ours)
	if math.IsNaN(f) || math.IsNaN(o) || o <= 0 {
		return nil
	}
	return []float64{f / o}
}

// newRows are the figures of the side-by-side with Flagger, the API server's CPU, the large
// apply and the routers, after the original ones so the key=value line keeps its order.
func (r results) newRows() []row {
	n := r.parallelN
	rows := []row{
		{fig: figure{"flagger_apply_s", r.flaggerApplyS}, unit: "s", note: "Flagger " + flaggerVersion + ", this run: image change to Succeeded, same scenario and checks"},
		{fig: figure{"flagger_ratio", r.flaggerRatio}, note: "flagger_apply_s / 50s"},
		{fig: figure{"flagger_first_shift_s", r.flaggerFirstShiftS}, unit: "s", note: "Flagger: image change -> first weight change"},
		{fig: figure{"speedup_vs_flagger", speedup(r.flaggerApplyS, r.applyS)}, note: "flagger_apply_s / apply_s (medians)"},
		{fig: figure{fmt.Sprintf("parallel_%d_10s_s", n), r.parallel10S}, unit: "s", note: fmt.Sprintf("%d releases in one apply, interval 10s, 1 replica, 2 checks: apply start -> exit", n)},
		{fig: figure{fmt.Sprintf("flagger_parallel_%d_s", n), r.flaggerParallelS}, unit: "s", note: fmt.Sprintf("%d Canaries under one Flagger, same spec: image changes -> last Succeeded", n)},
		{fig: figure{fmt.Sprintf("speedup_parallel_%d_vs_flagger", n), speedup(r.flaggerParallelS, r.parallel10S)}, note: "flagger_parallel / parallel_10s (medians)"},
		{fig: figure{"apiserver_cpu_s_per_release_step", r.apiCPUPerStep}, note: "kube-apiserver process_cpu_seconds_total after - before / releases / steps, parallel 10s apply (shared stack: an upper bound)"},
		{fig: figure{"provider_cpu_s_per_release_step", r.providerCPUPerStep}, note: "provider processes' CPU / releases / steps, same apply"},
		{fig: figure{"flagger_apiserver_cpu_s_per_release_step", r.flaggerAPICPU}, note: "the same for Flagger's parallel run"},
		{fig: figure{"flagger_cpu_s_per_release_step", r.flaggerCPU}, note: "Flagger's own CPU / Canaries / steps"},
		{fig: figure{fmt.Sprintf("scale_%d_s", r.largeN), r.largeS}, unit: "s", note: fmt.Sprintf("%d releases in one apply, -parallelism=%d, interval 10s", r.largeN, r.largeN)},
		{fig: figure{fmt.Sprintf("provider_peak_rss_mb_%d", r.largeN), r.largePeakRSSMB}, unit: "MiB", goal: goal{250, "<= 250"}, note: "VmHWM of the provider processes, same apply"},
		{fig: figure{"throttle_waits_over_1s", r.throttleWaits}, goal: goal{0, "0"}, note: "client-go throttling waits > 1s in the provider's log (logged at most every 10s)"},
	}
	for _, name := range weightedRouters() {
		rows = append(rows, row{fig: figure{"overhead_ratio_" + name, r.routerRatio[name]}, goal: goal{1.05, "<= 1.05"},
			note: "overhead_ratio of the rollout scenario on mesh_provider " + name},
			row{fig: figure{"overhead_ratio_no_drain_" + name, r.routerRatioNoDrain[name]}, goal: goal{1.03, "<= 1.03"},
				note: "the same without the drain (weight 0 line -> verdict line in the provider's log)"})
	}
	// The simulator scenario's, last, so that the key=value line keeps the order it had.
	rows = append(rows,
		row{fig: figure{"simulator_idle_rss_mb", r.simIdleRSSMB}, unit: "MiB", note: "meshsim's VmRSS before the simulator scenario's pods (the shared stack's own objects only)"},
		row{fig: figure{fmt.Sprintf("simulator_rss_mb_%d_pods", r.simPods), r.simRSSMB}, unit: "MiB", note: "meshsim's VmRSS with the scenario's pods Ready, answering real requests through Traefik"},
		row{fig: figure{fmt.Sprintf("simulator_peak_rss_mb_%d_pods", r.simPods), r.simPeakRSSMB}, unit: "MiB", note: "meshsim's VmHWM at the end of the window (since it started)"},
		row{fig: figure{fmt.Sprintf("simulator_cpu_cores_%d_pods", r.simPods), r.simCPUCores}, note: "meshsim's CPU seconds per second over 60 s"},
		row{fig: figure{fmt.Sprintf("simulator_listeners_%d_pods", r.simPods), r.simListeners}, note: "meshsim's TCP sockets in LISTEN (one SOCKS5 listener serves every pod; plus its HTTP API)"},
		row{fig: figure{fmt.Sprintf("simulator_connections_%d_pods", r.simPods), r.simConnections}, note: "meshsim's established TCP connections (Traefik's to the pods through SOCKS, the client's to Traefik, the API server's)"},
	)
	return rows
}
