package oracle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// A batch scheduler is set for the whole operator (--batch-scheduler), so each one the pinned KubeRay accepts runs
// as a pair of its own, after the main pair's samples: KubeRay's binary and Manta's (`manta operator` as its own
// process, so its /metrics count its work alone), both with the scheduler, over the pinned module's samples
// written for it. No scheduler runs in the dev cluster: the oracle binds the pods that name one (bindPods), and
// compares what the operators wrote (the pods' schedulerName, labels and annotations, and the PodGroups).
type schedulerRun struct {
	name    string
	samples []string
}

var schedulerRuns = []schedulerRun{
	{"volcano", []string{"ray-cluster.volcano-scheduler-queue", "ray-job.volcano-scheduler-queue"}},
	{"yunikorn", []string{"ray-cluster.yunikorn-scheduler", "ray-job.yunikorn-scheduler"}},
	{"scheduler-plugins", []string{"ray-cluster.scheduler-plugins"}},
	{"kai-scheduler", []string{"ray-cluster.kai-scheduler"}},
}

// The PodGroup kinds the operators create under --batch-scheduler volcano and scheduler-plugins (their CRDs come
// with the dev cluster).
var podGroupGVKs = []schema.GroupVersionKind{
	{Group: "scheduling.volcano.sh", Version: "v1beta1", Kind: "PodGroup"},
	{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Kind: "PodGroup"},
}

// buildManta builds `manta` for the scheduler pairs while the dev cluster starts.
func buildManta(t *testing.T) func() string {
	dir := t.TempDir()
	var (
		bin  string
		err  error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		bin, err = testutil.BuildMantaTo(dir)
	}()
	return func() string {
		<-done
		if err != nil {
			t.Fatal(err)
		}
		return bin
	}
}

// runBatchSchedulers runs every scheduler pair at once over its samples and returns the differences by name
// (batch-scheduler/<scheduler>/<sample>); ran counts the pairs -run lets through.
func runBatchSchedulers(t *testing.T, mantaBin string, samples []sample, cl client.Client, record func(string, []diff) []string, ran *atomic.Int32) {
	byName := map[string]sample{}
	for _, s := range samples {
		byName[s.name] = s
	}
	var wg sync.WaitGroup
	for i, run := range schedulerRuns {
		wg.Go(func() {
			t.Run(run.name, func(t *testing.T) {
				ran.Add(1)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				ports, err := devcluster.FreePorts(2)
				if err != nil {
					t.Fatal(err)
				}
				prefix := fmt.Sprintf("b%d", i)
				kuberay := side{name: "kuberay", prefix: "k-" + prefix, cl: cl, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0])}
				manta := side{name: "manta", prefix: "m-" + prefix, cl: cl, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1])}
				var nss []string
				for j := range run.samples {
					nss = append(nss, fmt.Sprintf("-%02d", j))
				}
				kns, mns := createNamespacePairs(t, ctx, kuberay, manta, append(nss, "-probe"))
				kuberay.exited = startKubeRay(t, ctx, env.root, env.cluster, kns, kuberay.metrics, "kuberay-operator-"+run.name, "--batch-scheduler="+run.name)
				manta.exited = startMantaBinary(t, ctx, mantaBin, mns, manta.metrics, run.name)
				// The probe's pods wait for a scheduler no one plays here: its status is enough.
				waitForProbes(t, ctx, "-probe", false, kuberay, manta)
				for j, name := range run.samples {
					s, ok := byName[name]
					if !ok {
						t.Fatalf("no sample %s in the pinned module", name)
					}
					full := "batch-scheduler/" + run.name + "/" + name
					if unlisted := record(full, runSample(t, nss[j], full, s, kuberay, manta)); len(unlisted) > 0 {
						t.Errorf("%s: %d differences from KubeRay not in differences.yaml:\n%s", name, len(unlisted), strings.Join(unlisted, "\n"))
					}
				}
			})
		})
	}
	wg.Wait()
}

// startMantaBinary runs `manta operator` with the batch scheduler, watching namespaces, as startKubeRay runs
// KubeRay's (the same reconcile concurrency and API server proxy to Ray heads as the in-process operator).
func startMantaBinary(t *testing.T, ctx context.Context, bin string, namespaces []string, metricsURL, scheduler string) (exited func() error) {
	logPath := filepath.Join(env.cluster.Dir(), "logs", "manta-operator-"+scheduler+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, bin, "operator", "--enable-leader-election=false",
		"--metrics-addr="+metricsAddr(metricsURL), "--metrics-secure=false", "--health-probe-bind-address=0",
		"--use-kubernetes-proxy", "--reconcile-concurrency=4", "--watch-namespace="+strings.Join(namespaces, ","),
		"--batch-scheduler="+scheduler)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.cluster.Kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting manta operator: %v", err)
	}
	x := newExit()
	go func() { x.stopped(cmd.Wait(), logPath) }()
	t.Cleanup(func() {
		cancel()
		<-x.done
		logFile.Close()
		if t.Failed() {
			t.Logf("manta operator (%s) log tail:\n%s", scheduler, tail(logPath, 40))
		}
	})
	return x.exited
}

// bindPods plays the batch scheduler the pods name (no such scheduler runs in the dev cluster): each pending pod
// that no node was chosen for is bound to a general node, where kwok runs it.
func bindPods(t *testing.T, sd side, ns string) {
	ctx := context.Background()
	pods := &corev1.PodList{}
	if err := sd.cl.List(ctx, pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending ||
			slices.Contains([]string{"", corev1.DefaultSchedulerName}, p.Spec.SchedulerName) {
			continue
		}
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
			Target: corev1.ObjectReference{Kind: "Node", Name: "general-0"}}
		// The cache may not show a binding made at the last poll yet: the API server refuses it again.
		if err := sd.cl.SubResource("binding").Create(ctx, p, b); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			t.Logf("%s: binding pod %s: %v", sd.name, p.Name, err)
		}
	}
}

// snapshotPodGroups adds the namespace's PodGroups of both kinds to a snapshot, as podgroup/<name>; the status
// is a scheduler's (none runs here).
func snapshotPodGroups(t *testing.T, sd side, ns string, saw func(string, metav1.Object), add func(string, map[string]any), toMap func(any) map[string]any) {
	for _, gvk := range podGroupGVKs {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := sd.cl.List(context.Background(), l, client.InNamespace(ns)); err != nil {
			t.Fatalf("%s: list %s: %v", sd.name, gvk, err)
		}
		for i := range l.Items {
			pg := &l.Items[i]
			saw("podgroup", pg)
			m := toMap(pg.Object)
			deleteFields(m, "status")
			add(pg.GetName(), m)
		}
	}
}
