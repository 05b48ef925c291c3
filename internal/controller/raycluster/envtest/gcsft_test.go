package envtest

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
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

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
	e.Eventually(t, "Redis cleanup Job", func() (bool, string) {
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
	waitEvent(t, e, rc.Namespace, raycluster.EventCreatedRedisCleanupJob)
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
	e.Eventually(t, "cluster deleted", func() (bool, string) {
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
	if got := testutil.Get(t, e.Env, rc); !slices.Equal(got.Finalizers, []string{clusterbuild.FinalizerGCSFTRedisCleanup}) {
		t.Fatalf("finalizers %v", got.Finalizers)
	}
	e.setReady(t, rc)
	e.waitState(t, rc, rayv1.Ready)
	live := testutil.Get(t, e.Env, rc)

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
	waitEvent(t, e, ns, raycluster.EventRedisCleanupFailed)
}

// A cleanup Job that never finishes does not hold the cluster past its deletion timeout: the finalizer is released
// with KubeRay's ForceDeletedStuckCluster warning.
func testRedisCleanupTimeout(t *testing.T, e *env) {
	ns := e.Namespace(t)
	rc := ftCluster(ns)
	rc.Annotations = map[string]string{raycluster.AnnotationGCSFTDeletionTimeout: "3"}
	e.Create(t, rc)
	e.waitPods(t, rc, 2)
	e.deleteAndWaitJob(t, rc) // never finished: envtest runs no Job controller
	e.waitGone(t, rc)
	waitEvent(t, e, ns, raycluster.EventForceDeletedStuckCluster)
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
	if got := testutil.Get(t, e.Env, rc); !slices.Equal(got.Finalizers, []string{clusterbuild.FinalizerGCSFTRedisCleanup}) {
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
		if got := testutil.Get(t, e.Env, rc); len(got.Finalizers) != 0 {
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
