package oracle

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
	"github.com/manta-dev/manta/internal/testutil/podnet"
)

// harness is what every sample and scenario of a run shares besides the sides: the dev cluster, the fake Ray
// heads and the played submitters.
type harness struct {
	cluster    *devcluster.Cluster
	root       string
	heads      *rayHeads
	submitters *submitters
	// upgrades records the incremental upgrades' states (incremental_test.go).
	upgrades *upgradeWatch
	// direct reads straight from the API server, not the informer cache (see eventsInCache).
	direct client.Client
	// diffs is differences.yaml: settle compares until every difference found is listed there (see settle).
	diffs *differences
}

// env is the run's harness, set by startSides.
var env *harness

// side is one operator and the namespaces it watches: <prefix><name>.
type side struct {
	name   string
	prefix string
	cl     client.Client
	// metrics is the operator's /metrics URL.
	metrics string
	// exited says why the operator has stopped, or nil while it runs (set once it is started).
	exited func() error
}

func (s side) ns(name string) string { return s.prefix + name }

// startSides starts the dev cluster (Manta's CRDs; fake nodes shaped for objs), creates both namespaces of each name
// in nss, and starts KubeRay's operator watching the k- ones and Manta's watching the m- ones.
func startSides(t *testing.T, root string, objs []*unstructured.Unstructured, nss []string) (kuberay, manta side) {
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	podNet := podnet.NewForTest(t)
	// The oracle plays every submitter pod (submitters): kwok must not end them.
	c, err := devcluster.Start(ctx, devcluster.Options{Pools: nodePools(objs), Logf: t.Logf, HoldJobPods: true, LogSlowRequests: true})
	if err != nil {
		cancel()
		t.Fatalf("start dev cluster: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if t.Failed() || os.Getenv("ORACLE_KEEP_LOGS") != "" {
			keepLogs(t, root, c)
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the dev cluster: %v", err)
		}
	})
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = 200, 400
	// Reads come from one informer cache of the whole cluster: every sample polls its namespaces at once, and a
	// list per object kind per poll would load the API server more than both operators together.
	reader, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := reader.Start(ctx); err != nil {
			t.Errorf("cache: %v", err)
		}
	}()
	cl, err := client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: reader, Unstructured: true}})
	if err != nil {
		t.Fatal(err)
	}
	ports, err := devcluster.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	kuberay = side{name: "kuberay", prefix: "k-", cl: cl, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0])}
	manta = side{name: "manta", prefix: "m-", cl: cl, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1])}
	// Before any pod, and straight to the API server: the cache may not have started yet.
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := podnet.SetNodeCIDRs(ctx, direct); err != nil {
		t.Fatal(err)
	}
	heads := serveRayHeads(t, podNet, cl, objs)
	heads.direct = direct
	env = &harness{cluster: c, root: root, heads: heads, submitters: newSubmitters(heads, t.Logf), upgrades: watchUpgrades(t, ctx, reader), direct: direct}
	env.submitters.submitPromptly(t, ctx, reader, cl)

	// Every namespace exists, with its default ServiceAccount (pods cannot be created before it), before either
	// operator starts, so neither sees a failure the other does not.
	kns, mns := createNamespacePairs(t, ctx, kuberay, manta, nss)
	kns, mns = append(kns, kuberay.ns("probe")), append(mns, manta.ns("probe"))
	for _, n := range []string{kuberay.ns("probe"), manta.ns("probe")} {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	kuberay.exited = startKubeRay(t, ctx, root, c, kns, kuberay.metrics, "kuberay-operator")
	manta.exited = startManta(t, ctx, c, mns, manta.metrics)
	waitForProbes(t, ctx, "probe", true, kuberay, manta)
	t.Logf("oracle: dev cluster and both operators up in %s (%d namespace pairs)", time.Since(start).Round(time.Millisecond), len(nss))
	return kuberay, manta
}

// createNamespacePairs creates both namespaces of each name in nss and waits for their default ServiceAccounts;
// it returns KubeRay's and Manta's.
func createNamespacePairs(t *testing.T, ctx context.Context, kuberay, manta side, nss []string) (kns, mns []string) {
	cl := kuberay.cl
	for _, n := range nss {
		kns, mns = append(kns, kuberay.ns(n)), append(mns, manta.ns(n))
	}
	all := append(append([]string(nil), kns...), mns...)
	for _, n := range all {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 2*time.Minute, "default ServiceAccounts", func() (bool, string) {
		sas := &corev1.ServiceAccountList{}
		if err := cl.List(ctx, sas); err != nil {
			return false, err.Error()
		}
		have := map[string]bool{}
		for _, sa := range sas.Items {
			have[sa.Namespace] = have[sa.Namespace] || sa.Name == "default"
		}
		for _, n := range all {
			if !have[n] {
				return false, "no default ServiceAccount in " + n
			}
		}
		return true, ""
	})
	return kns, mns
}

// waitForProbes creates a probe cluster in each side's namespace probe and waits until each operator has written
// its status (and, with headIP, the head's IP from the fake nodes' pod CIDRs): an operator watching many
// namespaces starts its controllers only once every informer has synced, so the samples start after this.
func waitForProbes(t *testing.T, ctx context.Context, probe string, headIP bool, sides ...side) {
	for _, sd := range sides {
		u := toUnstructured(t, testutil.MakeRayCluster(sd.ns(probe), "probe").Obj())
		if err := sd.cl.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 5*time.Minute, "the operators to write the status of a probe cluster", func() (bool, string) {
		for _, sd := range sides {
			// An operator that could not start (a port taken, a bad flag) fails the test now, not at the deadline.
			if sd.exited != nil {
				if err := sd.exited(); err != nil {
					t.Fatalf("%s's operator stopped before it reconciled the probe cluster: %v", sd.name, err)
				}
			}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(rayClusterGVK)
			if err := sd.cl.Get(ctx, client.ObjectKey{Namespace: sd.ns(probe), Name: "probe"}, u); err != nil {
				return false, err.Error()
			}
			if g, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); g != u.GetGeneration() {
				return false, sd.name + " has not reconciled the probe cluster"
			}
			// The head's IP comes from the node's pod CIDR, where the fake Ray heads answer.
			if ip, _, _ := unstructured.NestedString(u.Object, "status", "head", "podIP"); headIP && !podnet.InRange(ip) {
				return false, fmt.Sprintf("%s's probe head has IP %q, not in %s", sd.name, ip, podnet.Range)
			}
		}
		return true, ""
	})
}

// nodePools shapes fake nodes for the objects: a general pool, and a node for each distinct nodeSelector in them,
// each with room for every pod and every extended resource the objects ask for.
func nodePools(objs []*unstructured.Unstructured) []devcluster.NodePool {
	const plenty = "100000"
	extra := map[string]string{"ephemeral-storage": "100Ti", "nvidia.com/gpu": plenty, "google.com/tpu": plenty, "aws.amazon.com/neuroncore": plenty}
	selectors := map[string]map[string]string{}
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch t := v.(type) {
		case map[string]any:
			if key == "nodeSelector" && len(t) > 0 {
				sel := map[string]string{}
				var keys []string
				for k, v := range t {
					sel[k] = fmt.Sprint(v)
					keys = append(keys, k+"="+sel[k])
				}
				sort.Strings(keys)
				selectors[strings.Join(keys, ",")] = sel
			}
			if key == "limits" || key == "requests" {
				for k := range t {
					if k != "cpu" && k != "memory" && extra[k] == "" {
						extra[k] = plenty
					}
				}
			}
			for k, e := range t {
				walk(k, e)
			}
		case []any:
			for _, e := range t {
				walk(key, e)
			}
		}
	}
	for _, o := range objs {
		walk("", o.Object)
	}
	node := func(name string, count int, labels map[string]string) devcluster.NodePool {
		return devcluster.NodePool{Name: name, Count: count, CPU: plenty, Memory: "1000Ti", Pods: 2000, Extra: extra, Labels: labels}
	}
	pools := []devcluster.NodePool{node("general", 2, nil)}
	keys := make([]string, 0, len(selectors))
	for k := range selectors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		pools = append(pools, node(fmt.Sprintf("sel%d", i), 1, selectors[k]))
	}
	return pools
}

// startKubeRay runs bin/kuberay-operator watching namespaces, at its defaults but for what the oracle needs: no
// leader election, the namespaces, its metrics on loopback, the API server's proxy to reach Ray heads (as Manta
// does here: the test process has no cluster DNS), 4 reconciles at once (as Manta here, so neither side lags for
// want of workers), and the feature gates below.
func startKubeRay(t *testing.T, ctx context.Context, root string, c *devcluster.Cluster, namespaces []string, metricsURL, logName string, extra ...string) (exited func() error) {
	logPath := filepath.Join(c.Dir(), "logs", logName+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "kuberay-operator"),
		"--kubeconfig="+c.Kubeconfig, "--enable-leader-election=false", "--metrics-addr="+metricsAddr(metricsURL),
		"--health-probe-bind-address=0", "--use-kubernetes-proxy",
		"--reconcile-concurrency=4", "--watch-namespace="+strings.Join(namespaces, ","),
		// On by default in KubeRay after v1.5.0, and what Manta implements: the replica labels of workers, and
		// RayJob deletionStrategy rules. RayServiceIncrementalUpgrade (alpha, off by default in v1.5.0, on by
		// default from v1.7): without it v1.5.0 rejects a RayService with upgradeStrategy
		// NewClusterWithIncrementalUpgrade as invalid, and the incremental-upgrade scenario would compare nothing
		// of the upgrade; it changes nothing for a RayService of another strategy.
		"--feature-gates=RayMultiHostIndexing=true,RayJobDeletionPolicy=true,RayServiceIncrementalUpgrade=true")
	cmd.Args = append(cmd.Args, extra...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A killed test takes the operator with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting bin/kuberay-operator (run make tools): %v", err)
	}
	x := newExit()
	go func() { x.stopped(cmd.Wait(), logPath) }()
	t.Cleanup(func() {
		cancel()
		<-x.done
		logFile.Close()
		if t.Failed() {
			t.Logf("kuberay-operator log tail:\n%s", tail(logPath, 40))
		}
	})
	return x.exited
}

// exit is an operator's end: done is closed once it has stopped, and err says how.
type exit struct {
	done chan struct{}
	err  error
}

func newExit() *exit { return &exit{done: make(chan struct{})} }

// stopped records err (nil: the operator returned without one) and closes done.
func (x *exit) stopped(err error, logPath string) {
	if err == nil {
		err = errors.New("returned")
	}
	x.err = fmt.Errorf("%w; log tail:\n%s", err, tail(logPath, 10))
	close(x.done)
}

// exited is nil while the operator runs, then how it stopped.
func (x *exit) exited() error {
	select {
	case <-x.done:
		return x.err
	default:
		return nil
	}
}

// startManta runs Manta's operator, every controller, in this process (operator.Run, what `manta operator` runs)
// watching namespaces; its log goes to the dev cluster's log directory.
func startManta(t *testing.T, ctx context.Context, c *devcluster.Cluster, namespaces []string, metricsURL string) (exited func() error) {
	logPath := filepath.Join(c.Dir(), "logs", "manta-operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ctrllog.SetLogger(zap.New(zap.WriteTo(logFile)))
	ctx, cancel := context.WithCancel(ctx)
	x := newExit()
	go func() {
		err := operator.Run(ctx, c.RESTConfig(), operator.Options{
			WatchNamespaces: namespaces, ReconcileConcurrency: 4, ClusterDomain: "cluster.local", UseKubernetesProxy: true,
			MetricsAddr: metricsAddr(metricsURL), MetricsInsecure: true,
			// With -count, TestOracle starts the operator again in this process.
			SkipNameValidation: true,
		})
		if err != nil && ctx.Err() == nil {
			t.Errorf("manta operator: %v", err)
		}
		x.stopped(err, logPath)
	}()
	t.Cleanup(func() {
		cancel()
		<-x.done
		ctrllog.SetLogger(logr.Discard())
		logFile.Close()
		if t.Failed() {
			t.Logf("manta operator log tail:\n%s", tail(logPath, 40))
		}
	})
	return x.exited
}

// keepLogs copies the dev cluster's component logs (both operators', the API server's, the controller manager's)
// gzipped to test-artifacts/oracle-logs: a failed comparison is often a timing, and the log tails printed say little
// about one sample among ninety (ORACLE_KEEP_LOGS keeps them from a run that passed too). The cluster's directory
// goes when it stops.
func keepLogs(t *testing.T, root string, c *devcluster.Cluster) {
	dst := filepath.Join(root, "test-artifacts", "oracle-logs")
	if err := c.KeepLogs(dst); err != nil {
		t.Logf("keeping the dev cluster's logs: %v", err)
		return
	}
	t.Logf("the dev cluster's logs are in %s", dst)
}

// metricsAddr is the host:port of a /metrics URL.
func metricsAddr(u string) string {
	return strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/metrics")
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
