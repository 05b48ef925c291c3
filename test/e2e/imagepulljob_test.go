package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	"github.com/manta-dev/manta/internal/controller/imagepulljob"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// apiWrites counts the requests of one client that are not reads.
type apiWrites struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (w *apiWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		w.n.Add(1)
	}
	return w.next.RoundTrip(req)
}

// TestImagePullJobOnDevCluster runs the ImagePullJob controller against the dev cluster with 1,000 kwok nodes and
// the puller stages (devcluster.PullerStages): puller pods are scheduled, run and exit on the fake nodes, and pulls of
// "does-not-exist" images fail with ErrImagePull. It has its own cluster because it needs those nodes and stages.
func TestImagePullJobOnDevCluster(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	nodes := 1000
	if v := os.Getenv("MANTA_E2E_IMAGEPULL_NODES"); v != "" {
		fmt.Sscan(v, &nodes)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	var extra [][]byte
	if !strings.Contains(string(devcluster.DefaultStages()), "manta-puller-complete") {
		extra = append(extra, devcluster.PullerStages)
	}
	c, err := devcluster.Start(ctx, devcluster.Options{
		Pools: []devcluster.NodePool{
			{Name: "ipj", Count: nodes - 10, Labels: map[string]string{"e2e.manta.dev/pool": "main"}},
			{Name: "ipj-cached", Count: 10, Labels: map[string]string{"e2e.manta.dev/pool": "cached"}, Images: []string{"docker.io/example/app:v1"}},
		},
		ExtraStages: extra,
		Logf:        t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the dev cluster: %v", err)
		}
	}()
	t.Logf("dev cluster with %d nodes up in %s", nodes, time.Since(start).Round(time.Millisecond))

	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = 200, 400
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	writes := &apiWrites{}
	mgrCfg := c.RESTConfig()
	mgrCfg.QPS, mgrCfg.Burst = 200, 400
	mgrCfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { writes.next = rt; return writes }
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := imagepulljob.NewReconciler(mgr, imagepulljob.Options{RetryBackoff: time.Second, MaxConcurrentReconciles: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	podWatch := testutil.WatchPods(t, ctx, c.RESTConfig(), labels.Set{imagepulljob.LabelImagePuller: "true"}, imagepulljob.LabelJobUID)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "imagepull-e2e"}}
	if err := testutil.CreateNamespace(ctx, cl, ns.Name); err != nil {
		t.Fatal(err)
	}

	// run creates the job, waits for it to complete and for its puller pods to be gone, and returns it with the most
	// puller pods of the job that existed at once (terminating included), the time to completion and the API writes.
	run := func(t *testing.T, job *mantav1alpha1.ImagePullJob, timeout time.Duration) (*mantav1alpha1.ImagePullJob, int, time.Duration, int64) {
		t.Helper()
		before := writes.n.Load()
		began := time.Now()
		if err := cl.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		got := &mantav1alpha1.ImagePullJob{}
		for {
			if err := cl.Get(ctx, client.ObjectKeyFromObject(job), got); err != nil {
				t.Fatal(err)
			}
			if got.Status.CompletionTime != nil {
				break
			}
			if time.Since(began) > timeout {
				t.Fatalf("job %s not complete after %s: %+v", job.Name, timeout, got.Status)
			}
			time.Sleep(200 * time.Millisecond)
		}
		took, w := time.Since(began), writes.n.Load()-before
		for {
			var pods corev1.PodList
			if err := cl.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{imagepulljob.LabelJobUID: string(got.UID)}); err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) == 0 {
				break
			}
			if time.Since(began) > timeout+time.Minute {
				t.Fatalf("job %s: %d puller pods left after completion", job.Name, len(pods.Items))
			}
			time.Sleep(200 * time.Millisecond)
		}
		return got, podWatch.Max(string(got.UID)), took, w
	}

	t.Run("failing pulls are retried then reported", func(t *testing.T) {
		job := &mantav1alpha1.ImagePullJob{
			ObjectMeta: metav1.ObjectMeta{Name: "missing", Namespace: ns.Name},
			Spec: mantav1alpha1.ImagePullJobSpec{
				Image: "registry.invalid/team/does-not-exist:v1", Parallelism: ptr.To[int32](2),
				PullPolicy: &mantav1alpha1.PullPolicy{BackoffLimit: ptr.To[int32](1)},
				Selector:   &mantav1alpha1.ImagePullJobNodeSelector{Names: []string{"ipj-0", "ipj-1", "ipj-2"}},
			},
		}
		got, maxPods, took, w := run(t, job, 2*time.Minute)
		if got.Status.Failed != 3 || got.Status.Succeeded != 0 {
			t.Fatalf("status %+v", got.Status)
		}
		for _, f := range got.Status.FailedNodes {
			if f.Reason != imagepulljob.ReasonImageNotFound || f.Attempts != 2 || !strings.Contains(f.Message, "not found") {
				t.Errorf("failed node %+v", f)
			}
		}
		if maxPods > 2 {
			t.Errorf("%d puller pods existed at once (terminating included), parallelism 2", maxPods)
		}
		t.Logf("MEASUREMENT: 3 failing nodes, 2 attempts each, parallelism 2: %s, %d API writes, at most %d puller pods at once",
			took.Round(time.Millisecond), w, maxPods)
	})

	t.Run("IfNotPresent skips nodes reporting the image", func(t *testing.T) {
		names := []string{"ipj-cached-0", "ipj-cached-1", "ipj-cached-2", "ipj-10", "ipj-11"}
		job := &mantav1alpha1.ImagePullJob{
			ObjectMeta: metav1.ObjectMeta{Name: "cached", Namespace: ns.Name},
			Spec: mantav1alpha1.ImagePullJobSpec{Image: "example/app:v1", Parallelism: ptr.To[int32](5),
				Selector: &mantav1alpha1.ImagePullJobNodeSelector{Names: names}},
		}
		got, maxPods, took, w := run(t, job, time.Minute)
		if got.Status.Succeeded != 5 || got.Status.Desired != 5 {
			t.Fatalf("status %+v", got.Status)
		}
		if maxPods > 5 {
			t.Errorf("%d puller pods existed at once, parallelism 5", maxPods)
		}
		// 2 puller pods (create + delete each) plus status writes: the 3 cached nodes needed none.
		if w > 12 {
			t.Errorf("%d API writes for 2 pulls", w)
		}
		t.Logf("IfNotPresent over 5 nodes (3 cached): %s, %d API writes", took.Round(time.Millisecond), w)
	})

	t.Run("1000 nodes with parallelism 50", func(t *testing.T) {
		job := &mantav1alpha1.ImagePullJob{
			ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns.Name},
			Spec: mantav1alpha1.ImagePullJobSpec{Image: "example/app:v1", ImagePullPolicy: mantav1alpha1.PullAlways,
				Parallelism: ptr.To[int32](50)},
		}
		got, maxPods, took, w := run(t, job, 20*time.Minute)
		if got.Status.Desired != int32(nodes) || got.Status.Succeeded != int32(nodes) || got.Status.Message != imagepulljob.MessageCompleted {
			t.Fatalf("status %+v", got.Status)
		}
		if maxPods > 50 {
			t.Errorf("%d puller pods existed at once (terminating included), parallelism 50", maxPods)
		}
		t.Logf("MEASUREMENT: Always over %d nodes, parallelism 50: %s, %d API writes by the controller (%.1f per node), at most %d pods at once",
			nodes, took.Round(time.Millisecond), w, float64(w)/float64(nodes), maxPods)
	})
}
