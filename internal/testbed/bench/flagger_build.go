package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"
)

// flaggerVersion is the Flagger release the bench compares against.
const flaggerVersion = "v1.44.0"

// cacheDir is where tools built from the Go module proxy are kept, as stack.sh and the
// GNUmakefile keep theirs: CANARY_CACHE_DIR, else ${XDG_CACHE_HOME:-~/.cache}/terraform-provider-canary.
func cacheDir() (string, error) {
	if dir := os.Getenv("CANARY_CACHE_DIR"); dir != "" {
		return dir, nil
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "terraform-provider-canary"), nil
}

// flaggerBinary returns Flagger's binary in the cache, building it with `go install` the first
// time (about 2 minutes on 2 cores). The stack's build lock keeps two builds from racing.
func flaggerBinary(ctx context.Context) (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "tools", "flagger-"+flaggerVersion)
	bin := filepath.Join(dir, "flagger")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock := flock.New(filepath.Join(cache, "build.lock"))
	if _, err := lock.TryLockContext(ctx, time.Second); err != nil {
		return "", fmt.Errorf("flagger: lock %s: %w", lock.Path(), err)
	}
	defer func() { _ = lock.Unlock() }()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // built by another process while this one waited
	}
	progress("building Flagger %s from the Go module proxy into %s (cold: ~2 min)", flaggerVersion, dir)
	// Outside the module, so the project's go.mod does not take part.
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/fluxcd/flagger/cmd/flagger@"+flaggerVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install flagger@%s: %v\n%s", flaggerVersion, err, out)
	}
	return bin, nil
}
