package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// parseProcessCPU reads process_cpu_seconds_total from a Prometheus text exposition.
func parseProcessCPU(text []byte) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && name == "process_cpu_seconds_total" {
			return strconv.ParseFloat(strings.TrimSpace(value), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no process_cpu_seconds_total sample")
}

// apiServerCPU is the API server's own CPU time so far, from its /metrics.
func (c *cluster) apiServerCPU(ctx context.Context) (float64, error) {
	body, err := c.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	return parseProcessCPU(body)
}

// cpuWindow measures the CPU time the API server spends over a window, from two readings of
// its /metrics. The stack is shared (controllers, kwok, the simulator, other tests), so the
// figure includes their load over the window too: an upper bound for the releases' own cost.
// Subtracting an idle rate measured just before proved too noisy on a shared machine.
type cpuWindow struct {
	c     *cluster
	start float64
}

func (c *cluster) startCPUWindow(ctx context.Context) (*cpuWindow, error) {
	start, err := c.apiServerCPU(ctx)
	if err != nil {
		return nil, err
	}
	return &cpuWindow{c: c, start: start}, nil
}

// end returns the CPU seconds the API server spent since the window started.
func (w *cpuWindow) end(ctx context.Context) (float64, error) {
	now, err := w.c.apiServerCPU(ctx)
	if err != nil {
		return 0, err
	}
	return now - w.start, nil
}

// processCPU is the CPU time of process pid so far.
func processCPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	st, err := parseStat(stat)
	if err != nil {
		return 0, err
	}
	return time.Duration(st.cpuTicks) * clockTick, nil
}
