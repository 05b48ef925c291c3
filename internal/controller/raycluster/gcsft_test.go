package raycluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

func TestPlanCleanup(t *testing.T) {
	rc := func(finalizer, ft bool) *rayv1.RayCluster {
		c := testutil.MakeRayCluster("ns", "rc").Obj()
		c.UID = "uid-rc"
		if finalizer {
			c.Finalizers = []string{clusterbuild.FinalizerGCSFTRedisCleanup}
		}
		if ft {
			c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{RedisAddress: "redis:6379"}
		}
		return c
	}
	owner := *clusterbuild.OwnerReference(rc(true, true))
	pod := func(name, nodeType string, deleting bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{rayv1.LabelNodeType: nodeType}, OwnerReferences: []metav1.OwnerReference{owner}}}
		if deleting {
			p.DeletionTimestamp = ptr.To(metav1.Now())
		}
		return p
	}
	job := func(cond batchv1.JobConditionType, owner metav1.OwnerReference) batchv1.Job {
		j := batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "rc-redis-cleanup", OwnerReferences: []metav1.OwnerReference{owner}}}
		if cond != "" {
			j.Status.Conditions = []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue}}
		}
		return j
	}
	stranger := owner
	stranger.UID = "uid-old"
	tests := []struct {
		name     string
		c        *rayv1.RayCluster
		pods     []corev1.Pod
		jobs     []batchv1.Job
		want     cleanupStep
		wantPods []string
		failed   bool
	}{
		{"no finalizer", rc(false, true), []corev1.Pod{pod("h", rayv1.NodeTypeHead, false)}, nil, cleanupNone, nil, false},
		{"finalizer without Redis", rc(true, false), []corev1.Pod{pod("h", rayv1.NodeTypeHead, false)}, nil, cleanupSkip, nil, false},
		{"running pods are deleted first", rc(true, true), []corev1.Pod{
			pod("h", rayv1.NodeTypeHead, false), pod("w1", rayv1.NodeTypeWorker, false), pod("w2", rayv1.NodeTypeWorker, true),
			pod("cleanup", clusterbuild.NodeTypeRedisCleanup, false),
		}, nil, cleanupDeletePods, []string{"h", "w1"}, false},
		{"a terminating head is waited for", rc(true, true), []corev1.Pod{pod("h", rayv1.NodeTypeHead, true)}, nil, cleanupWaitHead, nil, false},
		{"terminating workers are not waited for", rc(true, true), []corev1.Pod{pod("w", rayv1.NodeTypeWorker, true)}, nil, cleanupCreateJob, nil, false},
		{"no pods, no Job", rc(true, true), nil, nil, cleanupCreateJob, nil, false},
		{"a Job of an older cluster of that name is not ours", rc(true, true), nil, []batchv1.Job{job(batchv1.JobComplete, stranger)}, cleanupCreateJob, nil, false},
		{"the Job runs", rc(true, true), nil, []batchv1.Job{job("", owner)}, cleanupWaitJob, nil, false},
		{"the Job succeeded", rc(true, true), nil, []batchv1.Job{job(batchv1.JobComplete, owner)}, cleanupRelease, nil, false},
		{"the Job failed", rc(true, true), nil, []batchv1.Job{job(batchv1.JobFailed, owner)}, cleanupRelease, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := planCleanup(tc.c, tc.pods, tc.jobs, time.Now())
			var names []string
			for _, p := range p.pods {
				names = append(names, p.Name)
			}
			if p.step != tc.want || !slices.Equal(names, tc.wantPods) || p.failed != tc.failed {
				t.Errorf("plan = step %d pods %v failed %v, want step %d pods %v failed %v", p.step, names, p.failed, tc.want, tc.wantPods, tc.failed)
			}
		})
	}
}

// Once the head is gone, a cleanup that has not finished within the deletion timeout (ray.io/gcs-ft-deletion-timeout,
// else 300 s, from the deletion) is given up, as KubeRay v1.6.2+; a finished Job is still released as finished, and a
// head that has not terminated is still waited for.
func TestPlanCleanupDeletionTimeout(t *testing.T) {
	deleted := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rc := func(annotation string) *rayv1.RayCluster {
		c := testutil.MakeRayCluster("ns", "rc").Obj()
		c.UID = "uid-rc"
		c.Finalizers = []string{clusterbuild.FinalizerGCSFTRedisCleanup}
		c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{RedisAddress: "redis:6379"}
		c.DeletionTimestamp = ptr.To(metav1.NewTime(deleted))
		if annotation != "" {
			c.Annotations = map[string]string{AnnotationGCSFTDeletionTimeout: annotation}
		}
		return c
	}
	owner := *clusterbuild.OwnerReference(rc(""))
	running := batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "rc-redis-cleanup", OwnerReferences: []metav1.OwnerReference{owner}}}
	done := *running.DeepCopy()
	done.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	head := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "h", Labels: map[string]string{rayv1.LabelNodeType: rayv1.NodeTypeHead},
		OwnerReferences: []metav1.OwnerReference{owner}, DeletionTimestamp: ptr.To(metav1.NewTime(deleted))}}
	tests := []struct {
		name       string
		annotation string
		pods       []corev1.Pod
		jobs       []batchv1.Job
		after      time.Duration
		want       cleanupStep
		wantLeft   time.Duration
	}{
		{"default: the Job runs within 300 s", "", nil, []batchv1.Job{running}, 299 * time.Second, cleanupWaitJob, time.Second},
		{"default: the Job still runs at 300 s", "", nil, []batchv1.Job{running}, 300 * time.Second, cleanupTimedOut, 0},
		{"no Job could be created in time", "", nil, nil, 301 * time.Second, cleanupTimedOut, 0},
		{"annotation shortens it", "30", nil, []batchv1.Job{running}, 31 * time.Second, cleanupTimedOut, 0},
		{"annotation lengthens it", "3600", nil, []batchv1.Job{running}, 301 * time.Second, cleanupWaitJob, 3299 * time.Second},
		{"an unparsable annotation is the default", "5m", nil, nil, 299 * time.Second, cleanupCreateJob, time.Second},
		{"a non-positive annotation is the default", "0", nil, []batchv1.Job{running}, 301 * time.Second, cleanupTimedOut, 0},
		{"a finished Job is released as finished", "", nil, []batchv1.Job{done}, time.Hour, cleanupRelease, 0},
		{"the head is waited for past it", "", []corev1.Pod{head}, nil, time.Hour, cleanupWaitHead, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := planCleanup(rc(tc.annotation), tc.pods, tc.jobs, deleted.Add(tc.after))
			if p.step != tc.want || p.left != tc.wantLeft {
				t.Errorf("step %d left %s, want step %d left %s", p.step, p.left, tc.want, tc.wantLeft)
			}
		})
	}
	if got := waitAtMost(time.Second); got != time.Second {
		t.Errorf("requeue %s before a timeout 1 s away", got)
	}
	if got := waitAtMost(time.Hour); got != cleanupWait {
		t.Errorf("requeue %s with an hour left", got)
	}
}

// ftCluster is a cluster with a Redis-backed GCS set by gcsFaultToleranceOptions.
func ftCluster(ns string) *rayv1.RayCluster {
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Obj()
	rc.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{
		RedisAddress:  "redis:6379",
		RedisPassword: &rayv1.RedisCredential{ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "redis"}, Key: "password"}}},
	}
	return rc
}

// deleteAndWaitJob deletes a running cluster and returns the Redis cleanup Job the controller creates once its pods
// are gone; the cluster is still there, held by the finalizer.
func (e *env) deleteAndWaitJob(t *testing.T, rc *rayv1.RayCluster) *batchv1.Job {
	t.Helper()
	if err := e.cl.Delete(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{}
	eventually(t, "Redis cleanup Job", func() (bool, string) {
		err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: rc.Namespace, Name: "rc-redis-cleanup"}, job)
		return err == nil, fmt.Sprintf("get: %v", err)
	})
	// The head is gone before the Job starts: its GCS could still write to Redis.
	if n := len(e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeHead)); n != 0 {
		t.Errorf("%d head pods beside the cleanup Job", n)
	}
	if n := len(e.pods(t, rc, rayv1.LabelNodeType, rayv1.NodeTypeWorker)); n != 0 {
		t.Errorf("%d worker pods beside the cleanup Job", n)
	}
	waitEvent(t, e, rc.Namespace, EventCreatedRedisCleanupJob)
	return job
}

// finishJob plays the Job controller: the Job ends Complete or Failed.
func (e *env) finishJob(t *testing.T, job *batchv1.Job, cond batchv1.JobConditionType) {
	t.Helper()
	now := metav1.Now()
	job.Status.StartTime = &now
	c := func(typ batchv1.JobConditionType, reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason, LastProbeTime: now, LastTransitionTime: now}
	}
	if cond == batchv1.JobComplete {
		job.Status.Succeeded, job.Status.CompletionTime = 1, &now
		job.Status.Conditions = []batchv1.JobCondition{c(batchv1.JobSuccessCriteriaMet, "CompletionsReached"), c(batchv1.JobComplete, "CompletionsReached")}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{c(batchv1.JobFailureTarget, "BackoffLimitExceeded"), c(batchv1.JobFailed, "BackoffLimitExceeded")}
	}
	job.Status.Ready = ptr.To[int32](0)
	job.Status.Terminating = ptr.To[int32](0)
	job.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
	if err := e.cl.Status().Update(context.Background(), job); err != nil {
		t.Fatalf("job status: %v", err)
	}
}

func (e *env) waitGone(t *testing.T, rc *rayv1.RayCluster) {
	t.Helper()
	eventually(t, "cluster deleted", func() (bool, string) {
		err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(rc), &rayv1.RayCluster{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}

// heldFor checks that the cluster stays (its finalizer held) for d while the Job runs.
func (e *env) heldFor(t *testing.T, rc *rayv1.RayCluster, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		got := &rayv1.RayCluster{}
		if err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(rc), got); err != nil || !slices.Contains(got.Finalizers, clusterbuild.FinalizerGCSFTRedisCleanup) {
			t.Fatalf("cluster released before its cleanup Job finished: %v %v", err, got.Finalizers)
		}
	}
}

// A cluster with a Redis-backed GCS gets KubeRay's finalizer; deleting it deletes its pods, then runs the cleanup Job
// (the head's image and Redis settings, one container, no probes, small resources, one try in five minutes), and the
// cluster goes only when the Job has completed.
func testRedisCleanupComplete(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := ftCluster(ns)
	e.Create(t, rc)
	e.waitPods(t, rc, 2)
	if got := e.get(t, rc); !slices.Equal(got.Finalizers, []string{clusterbuild.FinalizerGCSFTRedisCleanup}) {
		t.Fatalf("finalizers %v", got.Finalizers)
	}
	e.setReady(t, rc)
	e.waitState(t, rc, rayv1.Ready)
	live := e.get(t, rc)

	job := e.deleteAndWaitJob(t, rc)
	if !metav1.IsControlledBy(job, live) || job.Labels[rayv1.LabelNodeType] != clusterbuild.NodeTypeRedisCleanup ||
		job.Annotations[clusterbuild.AnnotationExternalStorageNamespace] != string(live.UID) {
		t.Errorf("job metadata: owners %+v labels %v annotations %v", job.OwnerReferences, job.Labels, job.Annotations)
	}
	if ptr.Deref(job.Spec.BackoffLimit, -1) != 0 || ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0) != 300 {
		t.Errorf("backoffLimit %v, activeDeadlineSeconds %v", job.Spec.BackoffLimit, job.Spec.ActiveDeadlineSeconds)
	}
	spec := job.Spec.Template.Spec
	if len(spec.Containers) != 1 || spec.RestartPolicy != corev1.RestartPolicyNever || spec.Containers[0].Image != "rayproject/ray:2.52.0" {
		t.Fatalf("job pod spec: %d containers, restartPolicy %s", len(spec.Containers), spec.RestartPolicy)
	}
	env := map[string]corev1.EnvVar{}
	for _, v := range spec.Containers[0].Env {
		env[v.Name] = v
	}
	if env[clusterbuild.EnvRedisAddress].Value != "redis:6379" || env[clusterbuild.EnvRedisPassword].ValueFrom == nil || env[clusterbuild.EnvExternalStorageNS].Value != string(live.UID) {
		t.Errorf("job env %+v", env)
	}
	if cpu := spec.Containers[0].Resources.Limits.Cpu(); cpu.String() != "200m" {
		t.Errorf("job cpu limit %s", cpu)
	}

	e.heldFor(t, rc, 2*time.Second)
	e.finishJob(t, job, batchv1.JobComplete)
	e.waitGone(t, rc)
}

// A failed cleanup Job releases the finalizer too (the cluster must not hang), with a Warning that the keys stay.
func testRedisCleanupFailed(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := ftCluster(ns)
	e.Create(t, rc)
	e.waitPods(t, rc, 2)
	job := e.deleteAndWaitJob(t, rc)
	e.finishJob(t, job, batchv1.JobFailed)
	e.waitGone(t, rc)
	waitEvent(t, e, ns, EventRedisCleanupFailed)
}

// A cleanup Job that never finishes does not hold the cluster past its deletion timeout: the finalizer is released
// with KubeRay's ForceDeletedStuckCluster warning.
func testRedisCleanupTimeout(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := ftCluster(ns)
	rc.Annotations = map[string]string{AnnotationGCSFTDeletionTimeout: "3"}
	e.Create(t, rc)
	e.waitPods(t, rc, 2)
	e.deleteAndWaitJob(t, rc) // never finished: envtest runs no Job controller
	e.waitGone(t, rc)
	waitEvent(t, e, ns, EventForceDeletedStuckCluster)
}

// A cluster KubeRay created with the ft-enabled annotation carries the finalizer already; Manta takes it over and
// runs the cleanup on deletion with the Redis address of the head's env.
func testRedisCleanupAdopted(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := testutil.MakeRayCluster(ns, "rc").Obj()
	rc.Annotations = map[string]string{clusterbuild.AnnotationFTEnabled: "true", clusterbuild.AnnotationExternalStorageNamespace: "kept"}
	rc.Finalizers = []string{clusterbuild.FinalizerGCSFTRedisCleanup}
	rc.Spec.HeadGroupSpec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: clusterbuild.EnvRedisAddress, Value: "redis:6379"}}
	e.Create(t, rc)
	e.waitPods(t, rc, 1)
	if got := e.get(t, rc); !slices.Equal(got.Finalizers, []string{clusterbuild.FinalizerGCSFTRedisCleanup}) {
		t.Fatalf("finalizers %v (want KubeRay's, once)", got.Finalizers)
	}
	job := e.deleteAndWaitJob(t, rc)
	if job.Annotations[clusterbuild.AnnotationExternalStorageNamespace] != "kept" {
		t.Errorf("job annotations %v", job.Annotations)
	}
	e.finishJob(t, job, batchv1.JobComplete)
	e.waitGone(t, rc)
}

// Without a Redis-backed GCS there is nothing to clean: no finalizer, and deletion is immediate.
func testNoFinalizerWithoutRedis(t *testing.T, e *env) {
	ns := e.Namespace(t)
	plain := testutil.MakeRayCluster(ns, "plain").Obj()
	embedded := testutil.MakeRayCluster(ns, "embedded").Obj()
	embedded.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{Backend: rayv1.GcsFaultToleranceBackendRocksDB}
	off := testutil.MakeRayCluster(ns, "off").Obj()
	off.Annotations = map[string]string{clusterbuild.AnnotationFTEnabled: "false"}
	for _, rc := range []*rayv1.RayCluster{plain, embedded, off} {
		e.Create(t, rc)
		e.waitPods(t, rc, 1)
		if got := e.get(t, rc); len(got.Finalizers) != 0 {
			t.Errorf("%s: finalizers %v", rc.Name, got.Finalizers)
		}
	}
	list := &batchv1.JobList{}
	if err := e.cl.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d Jobs", len(list.Items))
	}
}
