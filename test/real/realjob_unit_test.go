package real

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// The phases of a run come from the first object that shows each, whatever order the watches delivered them in;
// workers count once each and only when every worker is Ready; a RUNNING the operator never wrote is absent.
func TestRealJobPhaseSeconds(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	pod := func(name, nodeType string, ready bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), Labels: map[string]string{}}}
		if nodeType != "" {
			p.Labels[rayv1.LabelNodeType] = nodeType
		} else {
			p.Labels[batchv1.JobNameLabel] = "rayjob-sample"
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		return p
	}
	job := func(js rayv1.JobStatus, ds rayv1.JobDeploymentStatus, start, end *time.Time) *rayv1.RayJob {
		j := &rayv1.RayJob{Status: rayv1.RayJobStatus{JobStatus: js, JobDeploymentStatus: ds}}
		if start != nil {
			j.Status.RayJobStatusInfo.StartTime = &metav1.Time{Time: *start}
		}
		if end != nil {
			j.Status.RayJobStatusInfo.EndTime = &metav1.Time{Time: *end}
		}
		return j
	}
	start, end := at(22), at(28)
	obs := []observation{
		{at(29.5), job(rayv1.JobStatusSucceeded, rayv1.JobDeploymentStatusComplete, &start, &end)},
		{at(1), job("", rayv1.JobDeploymentStatusInitializing, nil, nil)},
		{at(2), pod("head", rayv1.NodeTypeHead, false)},
		{at(12.25), pod("head", rayv1.NodeTypeHead, true)},
		{at(14), pod("w1", rayv1.NodeTypeWorker, true)},
		{at(15), pod("w1", rayv1.NodeTypeWorker, true)}, // the same worker again: not a second one
		{at(18.5), pod("w2", rayv1.NodeTypeWorker, true)},
		{at(19), &batchv1.Job{}},
		{at(19.25), pod("submitter", "", false)},
		{at(20), job("", rayv1.JobDeploymentStatusRunning, nil, nil)},
		{at(30), job(rayv1.JobStatusSucceeded, rayv1.JobDeploymentStatusComplete, &start, &end)},
	}
	got := realJobPhaseSeconds(t0, obs, 2)
	want := map[string]float64{
		phaseHeadReady: 12.25, phaseWorkersReady: 18.5, phaseSubmitterCreated: 19, phaseSubmitterPodCreated: 19.25,
		phaseRayJobStart: 22, phaseJobSucceeded: 29.5, phaseComplete: 29.5, phaseRayJobEnd: 28,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("phases (-want +got):\n%s", d)
	}
	if got, ok := realJobPhaseSeconds(t0, obs[:6], 2)[phaseWorkersReady]; ok {
		t.Errorf("one of two workers Ready (twice): workers Ready at %v, want none", got)
	}
}

// The table has a row per image and contender, warm first, medians of each phase (with how many trials had it),
// and SUCCEEDED over kuberay's for the same image.
func TestRealJobTable(t *testing.T) {
	trial := func(contender, image string, succeeded, cpu float64, running bool) realJobTrial {
		p := map[string]float64{phaseHeadReady: 12, phaseJobSucceeded: succeeded}
		if running {
			p[phaseJobRunning] = 22
		}
		return realJobTrial{Contender: contender, Image: image, Phases: p, OperatorCPUSeconds: cpu}
	}
	table := realJobTable([]realJobTrial{
		trial("manta", "cold", 51, 2, true),
		trial("kuberay", "cold", 36, 3, true),
		trial("manta", "warm", 29, 1, true),
		trial("kuberay", "warm", 28, 1.5, true),
		trial("manta", "warm", 31, 1.2, false),
		trial("kuberay", "warm", 29, 1.5, true),
		trial("manta", "warm", 30, 1.1, true),
	})
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 6 {
		t.Fatalf("table has %d lines, want a heading, a rule and 4 rows:\n%s", len(lines), table)
	}
	for i, want := range []string{
		"| warm | manta | 3 | 12.0 | – | – | – | 22.0 (2/3) | – | 30.0 | – | – | 1.10 | 1.05 |",
		"| warm | kuberay | 2 | 12.0 | – | – | – | 22.0 | – | 28.5 | – | – | 1.50 | 1.00 |",
		"| cold | manta | 1 | 12.0 | – | – | – | 22.0 | – | 51.0 | – | – | 2.00 | 1.42 |",
		"| cold | kuberay | 1 | 12.0 | – | – | – | 22.0 | – | 36.0 | – | – | 3.00 | 1.00 |",
	} {
		if lines[2+i] != want {
			t.Errorf("row %d:\n got %s\nwant %s", i, lines[2+i], want)
		}
	}
	if !strings.HasPrefix(lines[0], "| image | contender | trials | head Ready |") {
		t.Errorf("heading %q", lines[0])
	}
	if got := realJobTable([]realJobTrial{trial("manta", "warm", 30, 1, true)}); !strings.Contains(got, "| 1.00 | – |") {
		t.Errorf("without kuberay the ratio is –:\n%s", got)
	}
}

func TestMedian(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median of 3 = %v", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of 4 = %v", got)
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median of none = %v", got)
	}
}
