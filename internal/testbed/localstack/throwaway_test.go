package localstack

import (
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Tests here run stack.sh against a throw-away CANARY_STACK_DIR on free ports, so the
// shared stack other packages use is never touched. They share its build cache, so
// they call ensure first to have the binaries.

// freePort returns a loopback port nobody listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	// Below the kernel's ephemeral range (32768 and up by default): a port the kernel hands
	// out may go to any process's outbound connection between this pick and the component's
	// start, as one went to a connection of the acceptance tests running beside it.
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no free port between 20000 and 32000")
	return 0
}

// throwawayEnv returns a fresh stack dir and variables giving every component a free port.
func throwawayEnv(t *testing.T, overrides map[string]string) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	vars := map[string]string{"CANARY_STACK_DIR": dir, "CANARY_NO_REBUILD": "1"}
	for _, name := range []string{"ETCD", "ETCD_PEER", "APISERVER", "CONTROLLER_MANAGER", "SCHEDULER", "PROMETHEUS", "PUSHGATEWAY", "SIMULATOR", "SIMULATOR_SOCKS", "TRAEFIK", "TRAEFIK_ADMIN"} {
		vars["CANARY_"+name+"_PORT"] = strconv.Itoa(freePort(t))
	}
	for k, v := range overrides {
		vars[k] = v
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	t.Cleanup(func() {
		if out, err := runStackWith(t, env, "down"); err != nil {
			t.Errorf("down: %v\n%s", err, out)
		}
		if left := processesMentioning(dir); len(left) > 0 {
			t.Errorf("processes left after down: %v", left)
		}
	})
	return dir, env
}

// processesMentioning lists the command lines that contain s.
func processesMentioning(s string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(data) == 0 {
			continue
		}
		cmdline := strings.ReplaceAll(string(data), "\x00", " ")
		if strings.Contains(cmdline, s) {
			found = append(found, e.Name()+": "+cmdline)
		}
	}
	return found
}

func TestUpFailsWhenPortIsTaken(t *testing.T) {
	ensure(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	dir, env := throwawayEnv(t, map[string]string{"CANARY_PROMETHEUS_PORT": port})
	out, err := runStackWith(t, env, "up")
	if err == nil {
		t.Fatalf("up succeeded with port %s taken:\n%s", port, out)
	}
	want := "prometheus: port " + port + " is already in use (see " + filepath.Join(dir, "log", "prometheus.log") + ")"
	if !strings.Contains(out, want) {
		t.Fatalf("output lacks %q:\n%s", want, out)
	}
	if strings.Contains(out, "started ") {
		t.Errorf("a component was started before the port check:\n%s", out)
	}
}

func TestUpFailsWhenPackageIsMissing(t *testing.T) {
	// A PATH on which etcd cannot be found: each folder holding etcd is replaced by a
	// folder of links to everything else in it.
	var path []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(dir, "etcd")); err != nil {
			path = append(path, dir)
			continue
		}
		links := t.TempDir()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != "etcd" {
				if err := os.Symlink(filepath.Join(dir, e.Name()), filepath.Join(links, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
		}
		path = append(path, links)
	}
	_, env := throwawayEnv(t, map[string]string{
		"PATH":              strings.Join(path, string(os.PathListSeparator)),
		"CANARY_NO_INSTALL": "1",
	})
	out, err := runStackWith(t, env, "up")
	if err == nil {
		t.Fatalf("up succeeded without etcd:\n%s", out)
	}
	if want := "etcd: Debian package etcd-server is missing and could not be installed"; !strings.Contains(out, want) {
		t.Fatalf("output lacks %q:\n%s", want, out)
	}
}

func TestUpReportsComponentExitingEarly(t *testing.T) {
	ensure(t)
	dir, env := throwawayEnv(t, map[string]string{"CANARY_PROMETHEUS_EXTRA_ARGS": "--no-such-flag"})
	out, err := runStackWith(t, env, "up")
	if err == nil {
		t.Fatalf("up succeeded with a bogus prometheus flag:\n%s", out)
	}
	want := "prometheus exited during start-up; last lines of " + filepath.Join(dir, "log", "prometheus.log") + ":"
	if !strings.Contains(out, want) {
		t.Fatalf("output lacks %q:\n%s", want, out)
	}
	// The log's tail follows, with prometheus's own complaint.
	if !strings.Contains(out, "no-such-flag") {
		t.Errorf("output lacks the log's tail:\n%s", out)
	}
}

func TestThrowawayStackUpAndDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second full stack")
	}
	ensure(t)
	// As on a fresh machine: no upstream CRDs beside the repository.
	dir, env := throwawayEnv(t, map[string]string{"CANARY_SHARED_CRDS": filepath.Join(t.TempDir(), "missing")})
	out, err := runStackWith(t, env, "up")
	if err != nil {
		t.Fatalf("up: %v\n%s", err, out)
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if want := "CRDs established from " + MinimalCRDDir(root); !strings.Contains(out, want) {
		t.Errorf("up output lacks %q:\n%s", want, out)
	}
	if len(processesMentioning(dir)) < 5 {
		t.Fatalf("expected the stack's processes, found %v", processesMentioning(dir))
	}
	loaded, err := Load("", filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	if err := loaded.Ready(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The minimal TrafficSplit CRD takes the object a router writes.
	_, dyn, err := loaded.Clients()
	if err != nil {
		t.Fatal(err)
	}
	split, err := DecodeManifests([]byte(`apiVersion: split.smi-spec.io/v1alpha2
kind: TrafficSplit
metadata: {name: podinfo, namespace: default}
spec:
  service: podinfo
  backends:
  - {service: podinfo-primary, weight: 90}
  - {service: podinfo-canary, weight: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "split.smi-spec.io", Version: "v1alpha2", Resource: "trafficsplits"}
	created, err := dyn.Resource(gvr).Namespace("default").Create(t.Context(), split[0], metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if backends, _, _ := unstructured.NestedSlice(created.Object, "spec", "backends"); len(backends) != 2 {
		t.Errorf("stored backends %v, want the two written", backends)
	}
	out, err = runStackWith(t, env, "down")
	if err != nil {
		t.Fatalf("down: %v\n%s", err, out)
	}
	if left := processesMentioning(dir); len(left) > 0 {
		t.Fatalf("processes left after down: %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "env")); !os.IsNotExist(err) {
		t.Errorf("env file still there after down: %v", err)
	}
}
