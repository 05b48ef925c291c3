package envtest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	"github.com/manta-dev/manta/internal/controller/imagepulljob"
	"github.com/manta-dev/manta/internal/testutil"
)

// env is one envtest control plane with the controller running, shared by the subtests of TestEnvtest; each
// subtest works in its own namespace and on its own nodes.
type env struct {
	*testutil.Env
	cl      client.Client
	cfg     *rest.Config
	writes  *writeCounter
	kubelet *fakeKubelet
	pods    *testutil.PodWatcher
}

// writeCounter counts the controller's API writes (every request that is not a read), and notes when its pod
// creates were refused, by namespace.
type writeCounter struct {
	next    http.RoundTripper
	n       atomic.Int64
	mu      sync.Mutex
	refused map[string][]time.Time
}

func (w *writeCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		w.n.Add(1)
	}
	resp, err := w.next.RoundTrip(req)
	if parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/"); req.Method == http.MethodPost && len(parts) == 5 &&
		parts[2] == "namespaces" && parts[4] == "pods" && err == nil && resp.StatusCode >= 400 {
		w.mu.Lock()
		if w.refused == nil {
			w.refused = map[string][]time.Time{}
		}
		w.refused[parts[3]] = append(w.refused[parts[3]], time.Now())
		w.mu.Unlock()
	}
	return resp, err
}

// refusedCreates are the times the controller's pod creates in ns were refused.
func (w *writeCounter) refusedCreates(ns string) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.refused[ns])
}

func startEnv(t *testing.T) *env {
	return startEnvWith(t, imagepulljob.Options{RetryBackoff: 200 * time.Millisecond, PodSelectorResync: time.Second,
		CreateBackoffBase: testCreateBackoffBase, CreateBackoffMax: 5 * time.Second})
}

// startEnvWith starts an envtest control plane with the controllers running with these options.
func startEnvWith(t *testing.T, opts imagepulljob.Options) *env {
	testutil.UseTestLogger()
	cfg, cl := testutil.StartEnvtest(t)
	mgrCfg := rest.CopyConfig(cfg)
	wc := &writeCounter{}
	mgrCfg.QPS, mgrCfg.Burst = 500, 1000
	mgrCfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { wc.next = rt; return wc }
	mgr := testutil.NewManager(t, mgrCfg)
	r, err := imagepulljob.NewReconciler(mgr, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	p := imagepulljob.NewRayClusterPrepullReconciler(mgr, r, imagepulljob.RayClusterPrepullOptions{})
	if err := p.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx := testutil.RunManager(t, mgr)
	k := &fakeKubelet{cl: cl, maxActive: map[types.UID]int{}, seen: map[types.UID]map[string]int{}}
	go k.run(ctx)
	pw := testutil.WatchPods(t, ctx, cfg, labels.Set{imagepulljob.LabelImagePuller: "true"}, imagepulljob.LabelJobUID)
	return &env{Env: testutil.NewEnv(cl), cl: cl, cfg: cfg, writes: wc, kubelet: k, pods: pw}
}

// fakeKubelet plays the nodes' kubelets: a puller pod whose image contains "does-not-exist" waits in ErrImagePull,
// one whose image contains "stuck" stays Pending, others run and then exit 0. It records, per job, the most nodes
// that had a pod pulling at once and every pod it saw per node.
type fakeKubelet struct {
	cl        client.Client
	mu        sync.Mutex
	maxActive map[types.UID]int
	seen      map[types.UID]map[string]int // job -> node -> pods seen
	seenPods  sets.Set[string]
	firstSeen map[types.UID][]corev1.Pod // job -> each pod as first seen
}

func (k *fakeKubelet) run(ctx context.Context) {
	k.seenPods = sets.New[string]()
	for ctx.Err() == nil {
		k.tick(ctx)
		time.Sleep(20 * time.Millisecond)
	}
}

func (k *fakeKubelet) tick(ctx context.Context) {
	var pods corev1.PodList
	if err := k.cl.List(ctx, &pods, client.HasLabels{imagepulljob.LabelImagePuller}); err != nil {
		return
	}
	active := map[types.UID]sets.Set[string]{}
	for i := range pods.Items {
		p := &pods.Items[i]
		job := types.UID(p.Labels[imagepulljob.LabelJobUID])
		k.mu.Lock()
		if !k.seenPods.Has(p.Namespace + "/" + p.Name) {
			k.seenPods.Insert(p.Namespace + "/" + p.Name)
			if k.seen[job] == nil {
				k.seen[job] = map[string]int{}
			}
			k.seen[job][p.Spec.NodeName]++
			if k.firstSeen == nil {
				k.firstSeen = map[types.UID][]corev1.Pod{}
			}
			k.firstSeen[job] = append(k.firstSeen[job], *p.DeepCopy())
		}
		k.mu.Unlock()
		if active[job] == nil {
			active[job] = sets.New[string]()
		}
		active[job].Insert(p.Spec.NodeName) // every existing pod counts, finished or not
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		image := p.Spec.Containers[0].Image
		switch {
		case len(p.Status.ContainerStatuses) == 0 && strings.Contains(image, "does-not-exist"):
			p.Status.Phase = corev1.PodPending
			{
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: imagepulljob.PullerContainerName, Image: image, State: corev1.ContainerState{
					Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: fmt.Sprintf("failed to resolve reference %q: %s: not found", image, image)}}}}
			}
		case (p.Status.Phase == corev1.PodPending || p.Status.Phase == "") && !strings.Contains(image, "does-not-exist") && !strings.Contains(image, "stuck"):
			p.Status.Phase = corev1.PodRunning
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: imagepulljob.PullerContainerName, Image: image, Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		case p.Status.Phase == corev1.PodRunning:
			p.Status.Phase = corev1.PodSucceeded
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: imagepulljob.PullerContainerName, Image: image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}
		default:
			continue
		}
		_ = k.cl.Status().Update(ctx, p) // a conflict or a deleted pod is retried on the next tick
	}
	k.mu.Lock()
	for job, nodes := range active {
		k.maxActive[job] = max(k.maxActive[job], nodes.Len())
	}
	k.mu.Unlock()
}

func (k *fakeKubelet) stats(job types.UID) (maxActive int, podsPerNode map[string]int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]int{}
	for n, c := range k.seen[job] {
		out[n] = c
	}
	return k.maxActive[job], out
}

// pods returns every puller pod of the job the kubelet saw, as it first saw it.
func (k *fakeKubelet) pods(job types.UID) []corev1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.firstSeen[job])
}

// namespace is Env.Namespace with its default ServiceAccount, which the puller pods run as and nothing makes on
// envtest's control plane (it has no controller-manager).
func (e *env) namespace(t *testing.T) string {
	t.Helper()
	name := e.Namespace(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}
	if err := e.cl.Create(context.Background(), sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// addNode creates a Ready node that reports images in status.images, as a kubelet does.
func (e *env) addNode(t *testing.T, name string, labels map[string]string, images ...string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := e.cl.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if len(images) > 0 {
		n.Status.Images = []corev1.ContainerImage{{Names: images, SizeBytes: 1 << 30}}
	}
	if err := e.cl.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	// envtest runs no node lifecycle controller to lift the not-ready taint the API server put on the new node.
	n.Spec.Taints = nil
	if err := e.cl.Update(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// waitJob waits until cond holds of the ImagePullJob named key.
func (e *env) waitJob(t *testing.T, key client.ObjectKey, what string, cond func(*mantav1alpha1.ImagePullJob) bool) *mantav1alpha1.ImagePullJob {
	t.Helper()
	return testutil.WaitFor(t, e.Env, &mantav1alpha1.ImagePullJob{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, what, cond)
}

func completed(j *mantav1alpha1.ImagePullJob) bool { return j.Status.CompletionTime != nil }

func (e *env) pullerPods(t *testing.T, ns string) int {
	t.Helper()
	var pods corev1.PodList
	if err := e.cl.List(context.Background(), &pods, client.InNamespace(ns), client.HasLabels{imagepulljob.LabelImagePuller}); err != nil {
		t.Fatal(err)
	}
	return len(pods.Items)
}

func (e *env) waitNoPullerPods(t *testing.T, ns string) {
	t.Helper()
	e.Eventually(t, "the puller pods in "+ns+" cleaned up", func() (bool, string) {
		n := e.pullerPods(t, ns)
		return n == 0, fmt.Sprintf("%d left", n)
	})
}

func newJob(ns, name, image string) *mantav1alpha1.ImagePullJob {
	return &mantav1alpha1.ImagePullJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       mantav1alpha1.ImagePullJobSpec{Image: image},
	}
}

func TestEnvtest(t *testing.T) {
	e := startEnv(t)
	// 12 nodes of pool "p1", 4 of which already have the image.
	for i := range 12 {
		var images []string
		if i%3 == 0 {
			images = []string{"docker.io/example/app:v1", "docker.io/example/app@sha256:0123456789abcdef0123456789abcdef"}
		}
		e.addNode(t, fmt.Sprintf("p1-%02d", i), map[string]string{"pool": "p1"}, images...)
	}
	for i := range 3 {
		e.addNode(t, fmt.Sprintf("f-%d", i), map[string]string{"pool": "fail"})
	}

	t.Run("defaults are applied by the schema", func(t *testing.T) { testDefaults(t, e) })
	t.Run("CEL refuses invalid specs naming the field", func(t *testing.T) { testValidation(t, e) })
	t.Run("IfNotPresent skips nodes that have the image, parallelism is never exceeded", func(t *testing.T) {
		testPolicy(t, e, mantav1alpha1.PullIfNotPresent, 8)
	})
	t.Run("Always pulls on every node", func(t *testing.T) { testPolicy(t, e, mantav1alpha1.PullAlways, 12) })
	t.Run("failing node is retried backoffLimit times then listed", func(t *testing.T) { testFailingNode(t, e) })
	t.Run("deadline fails the nodes not done", func(t *testing.T) { testDeadline(t, e) })
	t.Run("TTL deletes the finished job", func(t *testing.T) { testTTL(t, e) })
	t.Run("Never picks up a node added later", func(t *testing.T) { testNever(t, e) })
	t.Run("podSelector follows the nodes of matching pods", func(t *testing.T) { testPodSelector(t, e) })
	t.Run("RayCluster prepull creates one job per image on the nodes its groups can use", func(t *testing.T) { testPrepull(t, e) })
	t.Run("refused puller creates back off and are reported once", func(t *testing.T) { testQuotaBackoff(t, e) })
}

// testCreateBackoffBase is the env's first wait after a refused puller create (1 s in the operator).
const testCreateBackoffBase = 100 * time.Millisecond

// testQuotaBackoff: a ResourceQuota that allows no pods refuses every puller create. The controller retries with a
// growing interval (not the work queue's 5 ms start), reports the refusal in one FailedCreate event, counts no
// node as active, and creates the pullers once the quota allows them.
func testQuotaBackoff(t *testing.T, e *env) {
	ns := e.namespace(t)
	ctx := context.Background()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	if err := e.cl.Create(ctx, q); err != nil {
		t.Fatal(err)
	}
	// envtest runs no quota controller: the status it would fill in, which the admission plugin then keeps.
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
	if err := e.cl.Status().Update(ctx, q); err != nil {
		t.Fatal(err)
	}
	job := newJob(ns, "quota", "example/quota:v1")
	// One puller at a time, so each try is exactly one refused create: with several, a try's parallel creates reach
	// the API server spread out on a loaded machine and no time window tells one try from the next.
	job.Spec.Parallelism = ptr.To[int32](1)
	job.Spec.Selector = &mantav1alpha1.ImagePullJobNodeSelector{LabelSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "p1"}}}
	if err := e.cl.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	const wantTries = 6
	testutil.Eventually(t, time.Minute, fmt.Sprintf("%d refused tries", wantTries), func() (bool, string) {
		n := len(e.writes.refusedCreates(ns))
		return n >= wantTries, fmt.Sprintf("%d refused tries", n)
	})
	testutil.CheckBackoff(t, e.writes.refusedCreates(ns), testCreateBackoffBase)
	got := &mantav1alpha1.ImagePullJob{}
	if err := e.cl.Get(ctx, client.ObjectKeyFromObject(job), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Active != 0 || got.Status.Succeeded != 0 || got.Status.Desired != 12 {
		t.Errorf("status while every create is refused: %+v; want 12 desired, none active", got.Status)
	}
	list := &corev1.EventList{}
	if err := e.cl.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, ev := range list.Items {
		if ev.Reason == imagepulljob.ReasonFailedCreate {
			notes = append(notes, ev.Message)
		}
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "exceeded quota") || strings.Contains(notes[0], "quota-") {
		t.Errorf("FailedCreate events %q; want one, with the quota refusal and no pod name", notes)
	}

	// The quota grows: the next try creates the pullers and the job completes.
	if err := e.cl.Get(ctx, client.ObjectKeyFromObject(q), q); err != nil {
		t.Fatal(err)
	}
	q.Spec.Hard[corev1.ResourcePods] = resource.MustParse("20")
	if err := e.cl.Update(ctx, q); err != nil {
		t.Fatal(err)
	}
	q.Status.Hard = q.Spec.Hard.DeepCopy()
	if err := e.cl.Status().Update(ctx, q); err != nil {
		t.Fatal(err)
	}
	done := e.waitJob(t, client.ObjectKeyFromObject(job), "completion once the quota allows", completed)
	if done.Status.Succeeded != 12 || done.Status.Failed != 0 {
		t.Errorf("status after the quota grew: %+v", done.Status)
	}
}

func testDefaults(t *testing.T, e *env) {
	ns := e.namespace(t)
	job := newJob(ns, "defaults", "example/app:v1")
	job.Spec.Parallelism = ptr.To[int32](0) // paused: nothing runs
	if err := e.cl.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	s := job.Spec
	if s.ImagePullPolicy != mantav1alpha1.PullIfNotPresent || s.PullPolicy == nil || *s.PullPolicy.TimeoutSeconds != 600 ||
		*s.PullPolicy.BackoffLimit != 3 || s.CompletionPolicy.Type != mantav1alpha1.CompleteAlways {
		t.Fatalf("defaults not applied: %+v", s)
	}
	got := e.waitJob(t, client.ObjectKeyFromObject(job), "status of a paused job", func(j *mantav1alpha1.ImagePullJob) bool {
		return j.Status.Desired == 15 && j.Status.StartTime != nil
	})
	// The 4 nodes that report the image count as succeeded without a pod; the rest wait.
	if got.Status.Active != 0 || got.Status.Succeeded != 4 || got.Status.Message != "job is running, progress 26.7%" || e.pullerPods(t, ns) != 0 {
		t.Fatalf("paused job: %+v", got.Status)
	}
}

func testValidation(t *testing.T, e *env) {
	ns := e.namespace(t)
	cases := map[string]struct {
		mutate func(*mantav1alpha1.ImagePullJob)
		field  string
	}{
		"invalid image":        {func(j *mantav1alpha1.ImagePullJob) { j.Spec.Image = "Not A/Valid:image:ref" }, "spec.image"},
		"empty image":          {func(j *mantav1alpha1.ImagePullJob) { j.Spec.Image = "" }, "spec.image"},
		"unknown pull policy":  {func(j *mantav1alpha1.ImagePullJob) { j.Spec.ImagePullPolicy = "Never" }, "spec.imagePullPolicy"},
		"negative parallelism": {func(j *mantav1alpha1.ImagePullJob) { j.Spec.Parallelism = ptr.To[int32](-1) }, "spec.parallelism"},
		"names and labels": {func(j *mantav1alpha1.ImagePullJob) {
			j.Spec.Selector = &mantav1alpha1.ImagePullJobNodeSelector{Names: []string{"a"}, LabelSelector: metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}
		}, "spec.selector.names"},
		"duplicate names": {func(j *mantav1alpha1.ImagePullJob) {
			j.Spec.Selector = &mantav1alpha1.ImagePullJobNodeSelector{Names: []string{"a", "a"}}
		}, "spec.selector.names"},
		"selector and podSelector": {func(j *mantav1alpha1.ImagePullJob) {
			j.Spec.Selector = &mantav1alpha1.ImagePullJobNodeSelector{Names: []string{"a"}}
			j.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
		}, "spec.podSelector"},
		"deadline with Never": {func(j *mantav1alpha1.ImagePullJob) {
			j.Spec.CompletionPolicy = mantav1alpha1.CompletionPolicy{Type: mantav1alpha1.CompleteNever, ActiveDeadlineSeconds: ptr.To[int64](1000)}
		}, "spec.completionPolicy.activeDeadlineSeconds"},
		"ttl with Never": {func(j *mantav1alpha1.ImagePullJob) {
			j.Spec.CompletionPolicy = mantav1alpha1.CompletionPolicy{Type: mantav1alpha1.CompleteNever, TTLSecondsAfterFinished: ptr.To[int32](10)}
		}, "spec.completionPolicy.ttlSecondsAfterFinished"},
		"unknown completion type": {func(j *mantav1alpha1.ImagePullJob) { j.Spec.CompletionPolicy.Type = "Sometimes" }, "spec.completionPolicy.type"},
		"deadline shorter than the default timeout": {func(j *mantav1alpha1.ImagePullJob) {
			j.Spec.CompletionPolicy.ActiveDeadlineSeconds = ptr.To[int64](599)
		}, "spec.completionPolicy.activeDeadlineSeconds"},
		"deadline shorter than timeoutSeconds": {func(j *mantav1alpha1.ImagePullJob) {
			j.Spec.PullPolicy = &mantav1alpha1.PullPolicy{TimeoutSeconds: ptr.To[int32](100)}
			j.Spec.CompletionPolicy.ActiveDeadlineSeconds = ptr.To[int64](99)
		}, "spec.completionPolicy.activeDeadlineSeconds"},
		"zero timeout": {func(j *mantav1alpha1.ImagePullJob) {
			j.Spec.PullPolicy = &mantav1alpha1.PullPolicy{TimeoutSeconds: ptr.To[int32](0)}
		}, "spec.pullPolicy.timeoutSeconds"},
		"negative backoff": {func(j *mantav1alpha1.ImagePullJob) {
			j.Spec.PullPolicy = &mantav1alpha1.PullPolicy{BackoffLimit: ptr.To[int32](-1)}
		}, "spec.pullPolicy.backoffLimit"},
		"negative ttl": {func(j *mantav1alpha1.ImagePullJob) {
			j.Spec.CompletionPolicy.TTLSecondsAfterFinished = ptr.To[int32](-1)
		}, "spec.completionPolicy.ttlSecondsAfterFinished"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			j := newJob(ns, "invalid", "example/app:v1")
			tc.mutate(j)
			err := e.cl.Create(context.Background(), j)
			if err == nil {
				_ = e.cl.Delete(context.Background(), j)
				t.Fatalf("accepted %+v", j.Spec)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error does not name %s: %v", tc.field, err)
			}
		})
	}
	t.Run("valid combinations are accepted", func(t *testing.T) {
		ok := []func(*mantav1alpha1.ImagePullJob){
			func(j *mantav1alpha1.ImagePullJob) {
				j.Spec.PullPolicy = &mantav1alpha1.PullPolicy{TimeoutSeconds: ptr.To[int32](60)}
				j.Spec.CompletionPolicy = mantav1alpha1.CompletionPolicy{ActiveDeadlineSeconds: ptr.To[int64](60), TTLSecondsAfterFinished: ptr.To[int32](0)}
			},
			func(j *mantav1alpha1.ImagePullJob) {
				j.Spec.Image = "registry.example.com:5000/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
				j.Spec.CompletionPolicy.Type = mantav1alpha1.CompleteNever
				j.Spec.Selector = &mantav1alpha1.ImagePullJobNodeSelector{LabelSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "none"}}}
			},
		}
		for i, mutate := range ok {
			j := newJob(ns, fmt.Sprintf("valid-%d", i), "example/app:v1")
			j.Spec.Parallelism = ptr.To[int32](0)
			mutate(j)
			if err := e.cl.Create(context.Background(), j); err != nil {
				t.Fatalf("case %d refused: %v", i, err)
			}
		}
		// image is immutable
		j := &mantav1alpha1.ImagePullJob{}
		if err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "valid-0"}, j); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(j.DeepCopy())
		j.Spec.Image = "example/app:v2"
		if err := e.cl.Patch(context.Background(), j, patch); err == nil || !strings.Contains(err.Error(), "spec.image") {
			t.Fatalf("changing spec.image: %v", err)
		}
	})
}

func testPolicy(t *testing.T, e *env, policy mantav1alpha1.ImagePullPolicy, wantPods int) {
	ns := e.namespace(t)
	job := newJob(ns, "app", "example/app:v1")
	job.Spec.ImagePullPolicy = policy
	job.Spec.Parallelism = ptr.To[int32](3)
	job.Spec.Selector = &mantav1alpha1.ImagePullJobNodeSelector{LabelSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "p1"}}}
	before := e.writes.n.Load()
	if err := e.cl.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	got := e.waitJob(t, client.ObjectKeyFromObject(job), "completion", completed)
	if got.Status.Desired != 12 || got.Status.Succeeded != 12 || got.Status.Failed != 0 || got.Status.Message != imagepulljob.MessageCompleted {
		t.Fatalf("status: %+v", got.Status)
	}
	e.waitNoPullerPods(t, ns)
	maxActive, perNode := e.kubelet.stats(got.UID)
	if maxActive > 3 {
		t.Errorf("%d nodes pulled at once, parallelism 3", maxActive)
	}
	if maxActive < 2 {
		t.Errorf("at most %d node pulled at once: parallelism 3 is not used", maxActive)
	}
	if n := e.pods.Max(string(got.UID)); n > 3 {
		t.Errorf("%d puller pods existed at once (terminating included), parallelism 3", n)
	}
	pods := 0
	for node, n := range perNode {
		if n != 1 {
			t.Errorf("node %s got %d puller pods", node, n)
		}
		pods += n
	}
	if pods != wantPods {
		t.Errorf("%d puller pods, want %d", pods, wantPods)
	}
	t.Logf("%s: %d pods, %d API writes by the controller (incl. events)", policy, pods, e.writes.n.Load()-before)
}

func testFailingNode(t *testing.T, e *env) {
	ns := e.namespace(t)
	job := newJob(ns, "missing", "registry.invalid/does-not-exist:v1")
	job.Spec.Parallelism = ptr.To[int32](2)
	job.Spec.PullPolicy = &mantav1alpha1.PullPolicy{BackoffLimit: ptr.To[int32](2)}
	failing := []string{"f-0", "f-1", "f-2"}
	job.Spec.Selector = &mantav1alpha1.ImagePullJobNodeSelector{Names: failing}
	if err := e.cl.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	sawRetrying := false
	got := e.waitJob(t, client.ObjectKeyFromObject(job), "completion", func(j *mantav1alpha1.ImagePullJob) bool {
		for _, r := range j.Status.RetryingNodes {
			if r.Attempts >= 1 && r.Reason == imagepulljob.ReasonImageNotFound && !r.NextAttemptAfter.IsZero() {
				sawRetrying = true
			}
		}
		return completed(j)
	})
	if got.Status.Failed != 3 || got.Status.Succeeded != 0 || len(got.Status.FailedNodes) != 3 || len(got.Status.RetryingNodes) != 0 {
		t.Fatalf("status: %+v", got.Status)
	}
	if !sawRetrying {
		t.Error("status.retryingNodes never showed a failed attempt waiting for its retry")
	}
	for _, f := range got.Status.FailedNodes {
		if f.Reason != imagepulljob.ReasonImageNotFound || f.Attempts != 3 || !strings.Contains(f.Message, "not found") {
			t.Errorf("failed node %+v, want reason ImageNotFound after 3 attempts", f)
		}
	}
	_, perNode := e.kubelet.stats(got.UID)
	for _, n := range failing {
		if perNode[n] != 3 {
			t.Errorf("node %s got %d attempts, want 1 + backoffLimit 2", n, perNode[n])
		}
	}
	e.waitNoPullerPods(t, ns)
	maxPods := e.pods.Max(string(got.UID))
	if maxPods > 2 {
		t.Errorf("%d puller pods existed at once (terminating included), parallelism 2", maxPods)
	}
	if maxPods < 2 {
		t.Errorf("at most %d puller pod existed at once: parallelism 2 is not used", maxPods)
	}
	t.Logf("3 failing nodes, 3 attempts each, parallelism 2: at most %d puller pods at once", maxPods)
}

func testDeadline(t *testing.T, e *env) {
	ns := e.namespace(t)
	job := newJob(ns, "slow", "example/stuck:v1")
	job.Spec.Parallelism = ptr.To[int32](1)
	job.Spec.PullPolicy = &mantav1alpha1.PullPolicy{TimeoutSeconds: ptr.To[int32](3)}
	job.Spec.CompletionPolicy.ActiveDeadlineSeconds = ptr.To[int64](3)
	job.Spec.Selector = &mantav1alpha1.ImagePullJobNodeSelector{LabelSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "fail"}}}
	if err := e.cl.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	got := e.waitJob(t, client.ObjectKeyFromObject(job), "completion", completed)
	if got.Status.Message != imagepulljob.MessageDeadlineExceeded || got.Status.Failed != 3 || got.Status.Desired != 3 {
		t.Fatalf("status: %+v", got.Status)
	}
	for _, f := range got.Status.FailedNodes {
		if f.Reason != imagepulljob.ReasonDeadlineExceeded {
			t.Errorf("failed node %+v", f)
		}
	}
	// Not before the deadline; the upper bound leaves room for a slow reconcile on a loaded machine (the stuck pulls
	// never finish, so only the deadline can have completed the job).
	if d := got.Status.CompletionTime.Sub(got.Status.StartTime.Time); d < 3*time.Second || d > 20*time.Second {
		t.Errorf("completed %s after start, deadline 3s", d)
	}
	e.waitNoPullerPods(t, ns)
}

func testTTL(t *testing.T, e *env) {
	ns := e.namespace(t)
	job := newJob(ns, "ttl", "example/app:v2")
	job.Spec.Selector = &mantav1alpha1.ImagePullJobNodeSelector{Names: []string{"p1-01"}}
	job.Spec.CompletionPolicy.TTLSecondsAfterFinished = ptr.To[int32](2)
	if err := e.cl.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	got := e.waitJob(t, client.ObjectKeyFromObject(job), "completion", completed)
	// Measured from the recorded completion, not from when this test saw it: under load the test may notice the
	// completion late, and the deletion then seems early.
	doneAt := got.Status.CompletionTime.Time
	testutil.Eventually(t, time.Minute, "the job deleted after ttlSecondsAfterFinished", func() (bool, string) {
		err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(job), &mantav1alpha1.ImagePullJob{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v; status at completion %+v", err, got.Status)
	})
	if d := time.Since(doneAt); d < time.Second {
		t.Errorf("deleted %s after completion, ttl 2s", d)
	}
}

func testNever(t *testing.T, e *env) {
	ns := e.namespace(t)
	e.addNode(t, "late-0", map[string]string{"pool": "late"})
	job := newJob(ns, "forever", "example/app:v3")
	job.Spec.CompletionPolicy.Type = mantav1alpha1.CompleteNever
	job.Spec.Selector = &mantav1alpha1.ImagePullJobNodeSelector{LabelSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "late"}}}
	if err := e.cl.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(job)
	e.waitJob(t, key, "first node", func(j *mantav1alpha1.ImagePullJob) bool { return j.Status.Succeeded == 1 })
	e.addNode(t, "late-1", map[string]string{"pool": "late"})
	got := e.waitJob(t, key, "the node added later", func(j *mantav1alpha1.ImagePullJob) bool {
		return j.Status.Succeeded == 2 && j.Status.Desired == 2
	})
	if got.Status.CompletionTime != nil || got.Status.Message != "job is running, progress 100.0%" {
		t.Fatalf("Never job: %+v", got.Status)
	}
	e.waitNoPullerPods(t, ns)
}

func testPodSelector(t *testing.T, e *env) {
	ns := e.namespace(t)
	for i, node := range []string{"p1-02", "p1-05"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i), Namespace: ns, Labels: map[string]string{"app": "ray"}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example/app:v1"}}}}
		if err := e.cl.Create(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	job := newJob(ns, "follow", "example/sidecar:v1")
	job.Spec.Parallelism = ptr.To[int32](5)
	job.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ray"}}
	if err := e.cl.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	got := e.waitJob(t, client.ObjectKeyFromObject(job), "completion", completed)
	if diff := sets.New(got.Status.SucceededNodes...); !diff.Equal(sets.New("p1-02", "p1-05")) {
		t.Fatalf("succeeded nodes %v", got.Status.SucceededNodes)
	}
}
