// Command stackctl does the Kubernetes-side steps of internal/testbed/localstack/stack.sh, which
// has no kubectl: render kwok's stages, install the router CRDs, create the fake nodes.
//
//	stackctl stages -kwok-dir DIR -out FILE
//	stackctl crds   -kubeconfig FILE -root DIR
//	stackctl nodes  -kubeconfig FILE -count N
//	stackctl apply  -kubeconfig FILE [-dry-run] FILE...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: stackctl stages|crds|nodes|apply [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "stackctl %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func run(ctx context.Context, command string, args []string) error {
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the stack")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait")
	switch command {
	case "stages":
		kwokDir := fs.String("kwok-dir", "", "kwok module source")
		out := fs.String("out", "", "stage file to write")
		if err := fs.Parse(args); err != nil {
			return err
		}
		data, err := localstack.RenderStages(*kwokDir)
		if err != nil {
			return err
		}
		return writeFileAtomic(*out, data)
	case "crds":
		root := fs.String("root", "", "repository root")
		if err := fs.Parse(args); err != nil {
			return err
		}
		files, err := localstack.CRDFiles(*root)
		if err != nil {
			return err
		}
		cfg, err := restConfig(*kubeconfig)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		if err := localstack.InstallCRDs(ctx, cfg, files); err != nil {
			return err
		}
		fmt.Printf("CRDs established from %s\n", filepath.Dir(files[0]))
		return nil
	case "nodes":
		count := fs.Int("count", 3, "number of fake nodes")
		if err := fs.Parse(args); err != nil {
			return err
		}
		cfg, err := restConfig(*kubeconfig)
		if err != nil {
			return err
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		return localstack.EnsureFakeNodes(ctx, client, *count, *timeout)
	case "apply":
		dryRun := fs.Bool("dry-run", false, "validate on the server only")
		if err := fs.Parse(args); err != nil {
			return err
		}
		cfg, err := restConfig(*kubeconfig)
		if err != nil {
			return err
		}
		objs, err := localstack.ReadManifestFiles(fs.Args()...)
		if err != nil {
			return err
		}
		applier, err := localstack.NewApplier(cfg)
		if err != nil {
			return err
		}
		applier.DryRun = *dryRun
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		return applier.Apply(ctx, objs...)
	}
	return fmt.Errorf("unknown command %q", command)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// writeFileAtomic replaces path in one step so a reader never sees half a file.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
