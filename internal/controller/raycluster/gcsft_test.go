package raycluster

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
