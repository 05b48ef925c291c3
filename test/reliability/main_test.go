package reliability

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
)

func TestMain(m *testing.M) {
	if os.Getenv(loadURLEnv) != "" {
		// Started by TestRESTLoad: be the load generator.
		os.Exit(runLoadProcess())
	}
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if mantaBin.dir != "" {
		_ = os.RemoveAll(mantaBin.dir)
	}
	if shared.cluster != nil {
		if err := shared.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the dev cluster:", err)
		}
	}
	os.Exit(code)
}

// shared is the package's one dev cluster, started by the first test that asks for it. No operator runs in it
// until a test starts one as a process.
var shared struct {
	once    sync.Once
	cluster *devcluster.Cluster
	client  client.Client
	err     error
}

func devCluster(t *testing.T) (*devcluster.Cluster, client.Client) {
	t.Helper()
	shared.once.Do(func() {
		start := time.Now()
		// The operator binary builds while the control plane starts (both take tens of seconds), so that no test
		// spends its own time on the build.
		built := make(chan struct{})
		go func() {
			defer close(built)
			buildManta()
		}()
		defer func() { <-built }()
		var extra [][]byte
		if !strings.Contains(string(devcluster.DefaultStages()), "manta-puller-complete") {
			extra = append(extra, devcluster.PullerStages)
		}
		c, err := devcluster.Start(context.Background(), devcluster.Options{Nodes: 3, NodeCPU: "200", NodeMemory: "1000Gi", NodeMaxPods: 250,
			ExtraStages: extra, Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
		if err != nil {
			shared.err = fmt.Errorf("start dev cluster: %w", err)
			return
		}
		shared.cluster = c
		scheme, err := testutil.Scheme()
		if err != nil {
			shared.err = err
			return
		}
		cfg := c.RESTConfig()
		cfg.QPS, cfg.Burst = 200, 400
		shared.client, shared.err = client.New(cfg, client.Options{Scheme: scheme})
		fmt.Fprintf(os.Stderr, "reliability: dev cluster up in %s\n", time.Since(start).Round(time.Millisecond))
		<-built
		fmt.Fprintf(os.Stderr, "reliability: manta built in %s (beside the control plane)\n", mantaBin.took.Round(time.Millisecond))
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.cluster, shared.client
}

// namespace creates a namespace for one test.
func namespace(t *testing.T, cl client.Client, name string) string {
	t.Helper()
	// The dev cluster, and the namespaces in it, outlive a test: a run with -count=N takes name-2, name-3 … after
	// name.
	for i := 1; ; i++ {
		ns := name
		if i > 1 {
			ns = fmt.Sprintf("%s-%d", name, i)
		}
		err := testutil.CreateNamespace(t.Context(), cl, ns)
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
}
