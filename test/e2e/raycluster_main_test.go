// Package e2e holds end-to-end tests on the dev cluster (internal/devcluster): real etcd, kube-apiserver,
// scheduler, controller-manager and kwok fake nodes, with Manta's operator running in-process.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

// shared is the one dev cluster of the package, started by the first test that asks for it and stopped by
// TestMain, so every e2e test pays the start-up once.
var shared struct {
	once    sync.Once
	cluster *devcluster.Cluster
	client  client.Client
	cancel  context.CancelFunc
	err     error
}

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if shared.cancel != nil {
		shared.cancel()
	}
	if shared.cluster != nil {
		if code != 0 || os.Getenv("E2E_KEEP_LOGS") != "" {
			reportControlPlane(shared.cluster)
		}
		if err := shared.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the dev cluster:", err)
		}
	}
	os.Exit(code)
}

// reportControlPlane prints what the control plane logged about slow requests and keeps its logs in
// test-artifacts/e2e-logs: a test that failed on an API timeout has only its client's error to show otherwise (the
// cluster's directory goes when it stops). E2E_KEEP_LOGS does it for a run that passed too.
func reportControlPlane(c *devcluster.Cluster) {
	slow := c.SlowRequests(time.Second, 200)
	fmt.Fprintf(os.Stderr, "e2e: %d lines of the control plane's log on requests slower than 1s:\n", len(slow))
	for _, l := range slow {
		fmt.Fprintln(os.Stderr, "  "+l)
	}
	root, err := devcluster.RepoRoot()
	if err == nil {
		dst := filepath.Join(root, "test-artifacts", "e2e-logs")
		if err = c.KeepLogs(dst); err == nil {
			fmt.Fprintln(os.Stderr, "e2e: the dev cluster's logs are in", dst)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: keeping the dev cluster's logs:", err)
	}
}

// devCluster returns the package's dev cluster, with the operator running in-process. Its fake nodes are shaped
// for the KubeRay samples (see samplePools) plus a general pool.
func devCluster(t *testing.T) (*devcluster.Cluster, client.Client) {
	t.Helper()
	shared.once.Do(func() {
		pools, err := samplePools()
		if err != nil {
			shared.err = err
			return
		}
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		shared.cancel = cancel
		c, err := devcluster.Start(ctx, devcluster.Options{Pools: pools, LogSlowRequests: true, Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
		if err != nil {
			shared.err = fmt.Errorf("start dev cluster: %w", err)
			return
		}
		shared.cluster = c
		// TestGeneratedRBACIsSufficient runs an operator of its own in this process too.
		opts := operator.Options{ReconcileConcurrency: 8, SkipNameValidation: true}
		mgr, err := operator.NewManager(c.RESTConfig(), opts)
		if err != nil {
			shared.err = fmt.Errorf("operator manager: %w", err)
			return
		}
		if err := operator.Setup(mgr, opts); err != nil {
			shared.err = fmt.Errorf("operator setup: %w", err)
			return
		}
		go func() {
			if err := mgr.Start(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "operator stopped:", err)
			}
		}()
		scheme, err := testutil.Scheme()
		if err != nil {
			shared.err = err
			return
		}
		cfg := c.RESTConfig()
		cfg.QPS, cfg.Burst = 200, 400
		shared.client, shared.err = client.New(cfg, client.Options{Scheme: scheme})
		fmt.Fprintf(os.Stderr, "e2e: dev cluster and operator up in %s\n", time.Since(start).Round(time.Millisecond))
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.cluster, shared.client
}
