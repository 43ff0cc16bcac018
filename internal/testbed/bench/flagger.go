package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

// canaryResource is Flagger's Canary.
var canaryResource = schema.GroupVersionResource{Group: "flagger.app", Version: "v1beta1", Resource: "canaries"}

// flaggerController is one Flagger process run out of cluster against the stack: every
// namespace, the OSM router, the stack's Prometheus, no leader election.
type flaggerController struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// ensureFlaggerCRDs installs Flagger's CRDs from ../shared/crds unless the API server serves
// Canaries already.
func (b *bench) ensureFlaggerCRDs(ctx context.Context) error {
	crds, err := b.cl.dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		Get(ctx, "canaries.flagger.app", metav1.GetOptions{})
	if err == nil && crds != nil {
		return nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	file := filepath.Join(localstack.SharedCRDDir(b.env.Root), "flagger.app_crds.yaml")
	progress("installing Flagger's CRDs from %s", file)
	return localstack.InstallCRDs(ctx, b.cl.rest, []string{file})
}

// startFlagger builds Flagger if needed and runs it until stop; its log goes to the bench's
// work folder.
func (b *bench) startFlagger(ctx context.Context, label string) (*flaggerController, error) {
	bin, err := flaggerBinary(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.ensureFlaggerCRDs(ctx); err != nil {
		return nil, err
	}
	logPath := filepath.Join(b.work, "flagger-"+label+".log")
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	// Flagger serves its own metrics; a free port keeps it clear of anything else on 8080.
	addr, err := freeAddr()
	if err != nil {
		out.Close()
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(bin, flaggerArgs(b.env.Kubeconfig, b.env.PrometheusURL, port)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, err
	}
	f := &flaggerController{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(f.done)
	}()
	// A Flagger that cannot start (a missing CRD, a bad flag) exits within a second or two.
	select {
	case <-f.done:
		return nil, fmt.Errorf("flagger exited at start-up:\n%s", tail(logPath, 20))
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		f.stop()
		return nil, ctx.Err()
	}
	progress("flagger %s running (pid %d, log %s)", flaggerVersion, cmd.Process.Pid, logPath)
	return f, nil
}

// flaggerArgs are Flagger's flags for the stack: the flags of its OSM install, out of cluster.
func flaggerArgs(kubeconfig, prometheus, port string) []string {
	return []string{
		"-port=" + port,
		"-kubeconfig=" + kubeconfig,
		"-mesh-provider=osm",
		"-metrics-server=" + prometheus,
		"-log-level=info",
		"-enable-leader-election=false",
	}
}

// stop ends the Flagger process (SIGTERM, then SIGKILL after 10 s).
func (f *flaggerController) stop() {
	if f == nil {
		return
	}
	_ = f.cmd.Process.Signal(os.Interrupt)
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		_ = f.cmd.Process.Kill()
		<-f.done
	}
}
