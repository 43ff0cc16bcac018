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
	"sync"
	"time"
)

// providerComm is the provider binary's name as /proc/<pid>/stat shows it (15 bytes at most).
const providerComm = "terraform-provider-canary"

// parseVmHWM returns the peak resident set size in KiB from the text of /proc/<pid>/status.
func parseVmHWM(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != "VmHWM" {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmHWM line %q", sc.Text())
		}
		return strconv.ParseInt(fields[0], 10, 64)
	}
	return 0, errors.New("no VmHWM line")
}

// parseStat returns the command name and parent pid from the text of /proc/<pid>/stat. The
// name sits in parentheses and may itself hold spaces or parentheses.
func parseStat(stat []byte) (comm string, ppid int, err error) {
	open, closing := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || closing < open {
		return "", 0, fmt.Errorf("malformed stat %q", stat)
	}
	rest := strings.Fields(string(stat[closing+1:]))
	if len(rest) < 2 {
		return "", 0, fmt.Errorf("malformed stat %q", stat)
	}
	ppid, err = strconv.Atoi(rest[1])
	return string(stat[open+1 : closing]), ppid, err
}

// isProvider matches the (possibly truncated) command name of the provider binary.
func isProvider(comm string) bool {
	return len(comm) >= 15 && strings.HasPrefix(providerComm, comm)
}

// rssWatcher polls the provider processes that a terraform process starts (one per plan or
// apply walk) and keeps their peak RSS.
type rssWatcher struct {
	mu     sync.Mutex
	peakKB map[int]int64
	onNew  func(pid int)
}

// watchProviderRSS polls every interval until ctx ends.
func watchProviderRSS(ctx context.Context, parent int, interval time.Duration, onNew func(pid int)) *rssWatcher {
	w := &rssWatcher{peakKB: map[int]int64{}, onNew: onNew}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			w.poll(parent)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *rssWatcher) poll(parent int) {
	for _, pid := range childProviders(parent) {
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			continue
		}
		kb, err := parseVmHWM(status)
		if err != nil {
			continue
		}
		w.mu.Lock()
		_, seen := w.peakKB[pid]
		w.peakKB[pid] = max(w.peakKB[pid], kb)
		w.mu.Unlock()
		if !seen && w.onNew != nil {
			w.onNew(pid)
		}
	}
}

// peakMB is the highest peak RSS of any provider process seen, in MiB.
func (w *rssWatcher) peakMB() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var peak int64
	for _, kb := range w.peakKB {
		peak = max(peak, kb)
	}
	return float64(peak) / 1024
}

// childProviders lists the provider processes whose parent is pid.
func childProviders(parent int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		comm, ppid, err := parseStat(stat)
		if err == nil && ppid == parent && isProvider(comm) {
			out = append(out, pid)
		}
	}
	return out
}
