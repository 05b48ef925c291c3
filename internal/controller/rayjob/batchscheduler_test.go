package rayjob

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

func sameQuantities(got *corev1.ResourceList, want map[string]string) bool {
	if got == nil || len(*got) != len(want) {
		return false
	}
	for k, v := range want {
		if q, ok := (*got)[corev1.ResourceName(k)]; !ok || q.Cmp(resource.MustParse(v)) != 0 {
			return false
		}
	}
	return true
}

// kai-scheduler refuses a K8sJobMode RayJob, as KubeRay v1.7 does, naming the field; SidecarMode goes on.
func TestBatchSchedulerKaiRefusesK8sJobMode(t *testing.T) {
	cfg := planConfig{batchScheduler: clusterbuild.SchedulerKai}
	for _, c := range []struct {
		mode   rayv1.JobSubmissionMode
		refuse bool
	}{{rayv1.K8sJobMode, true}, {"", true}, {rayv1.SidecarMode, false}, {rayv1.HTTPMode, false}} {
		p := newPlan(&observation{j: &rayv1.RayJob{Spec: rayv1.RayJobSpec{SubmissionMode: c.mode, RayClusterSpec: testutil.RayJobClusterSpec()}}}, cfg)
		err := p.batchSchedule()
		if (err != nil) != c.refuse || (err != nil && !strings.Contains(err.Error(), "spec.submissionMode")) {
			t.Errorf("%q: %v", c.mode, err)
		}
	}
}

// The submitter's share of a Volcano gang, as KubeRay's getSubmitterResource: the pod's (requests over limits) in
// K8sJobMode, the default sidecar's in SidecarMode, nothing otherwise.
func TestSubmitterResources(t *testing.T) {
	j := &rayv1.RayJob{Spec: rayv1.RayJobSpec{RayClusterSpec: testutil.RayJobClusterSpec()}}
	check := func(what string, want map[string]string) {
		t.Helper()
		got := submitterResources(j)
		if len(want) == 0 && len(got) == 0 {
			return
		}
		if !sameQuantities(&got, want) {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	check("default submitter", map[string]string{"cpu": "500m", "memory": "200Mi"})
	j.Spec.SubmitterPodTemplate = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "s",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"cpu": resource.MustParse("2"), "nvidia.com/gpu": resource.MustParse("1")},
			Requests: corev1.ResourceList{"cpu": resource.MustParse("1")}}}}}}
	check("own template", map[string]string{"cpu": "1", "nvidia.com/gpu": "1"})
	j.Spec.SubmissionMode = rayv1.SidecarMode
	check("sidecar", map[string]string{"cpu": "500m", "memory": "200Mi"})
	j.Spec.SubmissionMode = rayv1.HTTPMode
	check("HTTPMode", nil)
}
