// Command meshsim runs the simulated mesh data plane of the local test stack: it watches the
// router objects in a cluster, sends load through them and serves Prometheus metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

func main() {
	if err := run(); err != nil {
		slog.Error("meshsim failed", "error", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "path to the kubeconfig (empty: in-cluster)")
	listen := flag.String("listen", "127.0.0.1:19095", "address serving /metrics, /invariants, /loadtest and /healthz")
	invariantLog := flag.String("invariant-log", "", "file the invariant entries are appended to, one JSON object a line")
	tick := flag.Duration("tick", 100*time.Millisecond, "how often load is sent")
	seed := flag.Uint64("seed", 0, "seed of the request durations: a run is the same for the same seed")
	socksListen := flag.String("socks-listen", "", "address of the SOCKS5 proxy through which a real proxy reaches the pods, which the simulator plays (empty: none)")
	proxyAddress := flag.String("proxy-address", "", "host:port of the real proxy's entry point the client sends real requests through (empty: no client)")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	slog.SetDefault(logger)

	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// The simulator plays Knative's controller every tick: with client-go's default limit (5
	// requests a second) its Knative Services' status lagged the users' applies by seconds.
	restConfig.QPS, restConfig.Burst = 100, 200
	kube, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return err
	}

	var invOut io.Writer
	if *invariantLog != "" {
		f, err := os.OpenFile(*invariantLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		invOut = f
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	sim := meshsim.New(meshsim.Config{Kube: kube, Dynamic: dyn, InvariantLog: invOut, Tick: *tick, Logger: logger, Seed: *seed, ProxyAddress: *proxyAddress})
	server := &http.Server{Addr: *listen, Handler: sim.Handler(), ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 2)
	go func() { serveErr <- server.ListenAndServe() }()
	logger.Info("meshsim listening", "address", *listen)

	simErr := make(chan error, 1)
	go func() { simErr <- sim.Run(ctx) }()
	if *socksListen != "" {
		l, err := net.Listen("tcp", *socksListen)
		if err != nil {
			return err
		}
		go func() { serveErr <- sim.ServeSOCKS(ctx, l) }()
		logger.Info("meshsim answering as the pods", "socks5", *socksListen)
	}

	select {
	case err = <-serveErr:
		stop()
	case err = <-simErr:
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = server.Shutdown(shutdownCtx)
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
