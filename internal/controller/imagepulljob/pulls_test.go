package imagepulljob

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	"github.com/manta-dev/manta/internal/metrics"
)

// TestComputePlanPulls: an attempt's outcome is counted (manta_imagepulljob_pulls_total) in the reconcile that
// records it, and never again once the observed status holds it.
func TestComputePlanPulls(t *testing.T) {
	five := nodes(makeNode("n1"), makeNode("n2"), makeNode("n3"), makeNode("n4"), makeNode("n5"))
	for name, tc := range map[string]struct {
		job  *mantav1alpha1.ImagePullJob
		pods func(*mantav1alpha1.ImagePullJob) []corev1.Pod
		want []string
	}{
		"a succeeded pod is counted": {
			job: makeJob("j").always().parallelism(1).started(t0).obj(),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, succeededPod)}
			},
			want: []string{metrics.OutcomeSucceeded},
		},
		"a recorded success is not counted again": {
			job: makeJob("j").always().parallelism(1).started(t0).succeededNodes("n1").obj(),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, succeededPod)}
			},
		},
		"a failed attempt is counted": {
			job: makeJob("j").always().started(t0).obj(),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, waiting("ErrImagePull", "not found"))}
			},
			want: []string{metrics.OutcomeFailed},
		},
		"a recorded failed attempt is not counted again": {
			job: makeJob("j").always().started(t0).retrying("n1", 1, t0.Add(10*time.Second)).obj(),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, waiting("ErrImagePull", "not found"))}
			},
		},
		"a running pod is not counted": {
			job:  makeJob("j").always().started(t0).obj(),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod { return []corev1.Pod{pullerPod(j, "n1", 1, t0, nil)} },
		},
	} {
		t.Run(name, func(t *testing.T) {
			now := t0.Add(5 * time.Second)
			p, err := computePlan(observed{job: tc.job, nodes: five, pods: tc.pods(tc.job), now: now, retryBase: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, pull := range p.pulls {
				got = append(got, pull.outcome)
				if pull.duration <= 0 || pull.duration > now.Sub(t0) {
					t.Errorf("pull duration %s, want within (0, %s]", pull.duration, now.Sub(t0))
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pulls (-want +got):\n%s", diff)
			}
		})
	}
}
