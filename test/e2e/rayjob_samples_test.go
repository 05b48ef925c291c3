package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// wantJobUnsupported is, per RayJob sample, exactly the fields its cluster reports as unsupported (the RayJob's
// labels are carried to its cluster). Written by hand from reading the samples of the pinned KubeRay (v1.5.0).
var wantJobUnsupported = map[string][]string{
	"ray-job.volcano-scheduler-queue.yaml": {"metadata.labels[ray.io/scheduler-name]=volcano (" + noScheduler + ")",
		"metadata.labels[volcano.sh/queue-name] (read by volcano; " + noScheduler + ")"},
	"ray-job.yunikorn-scheduler.yaml": {"metadata.labels[ray.io/gang-scheduling-enabled] (read by yunikorn or scheduler-plugins; " + noScheduler + ")",
		"metadata.labels[yunikorn.apache.org/queue] (read by yunikorn; " + noScheduler + ")",
		"metadata.labels[yunikorn.apache.org/app-id] (read by yunikorn; " + noScheduler + ")"},
}

// jobSample is one RayJob from a KubeRay sample file.
type jobSample struct {
	file string
	job  *rayv1.RayJob
}

func loadJobSamples() ([]jobSample, error) {
	var out []jobSample
	err := forEachSample(func(file, kind string, doc []byte) error {
		if kind != "RayJob" {
			return nil
		}
		j := &rayv1.RayJob{}
		if err := yaml.UnmarshalStrict(doc, j); err != nil {
			return err
		}
		out = append(out, jobSample{file: file, job: j})
		return nil
	})
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("no RayJob samples")
	}
	return out, err
}

// TestRayJobSamples applies every KubeRay RayJob sample, each in its own namespace, all at once, and waits until
// its cluster is ready and the job Running (Waiting for InteractiveMode, which waits for the user's job ID), with
// the cluster reporting exactly the fields listed in wantUnsupported. On the dev cluster kwok completes the
// submitter Jobs; no Ray runs, so the test stops at Running.
func TestRayJobSamples(t *testing.T) {
	_, cl := devCluster(t)
	samples, err := loadJobSamples()
	if err != nil {
		t.Fatal(err)
	}
	// KubeRay v1.5.0 has 22 RayJob samples; fewer means the reading went wrong.
	if len(samples) < 22 {
		t.Fatalf("%d RayJob samples, want 22", len(samples))
	}
	existing, err := selectedClusterSpec()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	errs := make([]string, len(samples))
	var wg sync.WaitGroup
	for i, s := range samples {
		wg.Go(func() { errs[i] = runJobSample(ctx, cl, i, s, existing) })
	}
	wg.Wait()
	for i, s := range samples {
		if errs[i] != "" {
			t.Errorf("%s (RayJob %s): %s", s.file, s.job.Name, errs[i])
		} else {
			t.Logf("ok: %s (RayJob %s, %s)", s.file, s.job.Name, submissionModeOf(s.job))
		}
	}
	t.Logf("%d RayJob samples in %s", len(samples), time.Since(start).Round(time.Millisecond))
}

func submissionModeOf(j *rayv1.RayJob) rayv1.JobSubmissionMode {
	if j.Spec.SubmissionMode == "" {
		return rayv1.K8sJobMode
	}
	return j.Spec.SubmissionMode
}

// selectedClusterSpec is the cluster the test creates for a sample that selects an existing one
// (ray-job.use-existing-raycluster.yaml): the RayCluster of ray-cluster.sample.yaml, which the user is told to
// create first.
func selectedClusterSpec() (*rayv1.RayClusterSpec, error) {
	samples, err := loadSamples()
	if err != nil {
		return nil, err
	}
	for _, s := range samples {
		if s.file == "ray-cluster.sample.yaml" && s.kind == "RayCluster" {
			return &s.cluster.Spec, nil
		}
	}
	return nil, fmt.Errorf("no RayCluster in ray-cluster.sample.yaml")
}

// runJobSample applies one RayJob sample in a fresh namespace, with the RayCluster it selects when it selects one,
// and waits for it.
func runJobSample(ctx context.Context, cl client.Client, i int, s jobSample, existing *rayv1.RayClusterSpec) string {
	ns := strings.Trim(dnsUnsafe.ReplaceAllString(strings.ToLower(fmt.Sprintf("j%02d-%s", i, strings.TrimSuffix(s.file, ".yaml"))), "-"), "-")
	if len(ns) > 63 {
		ns = strings.TrimRight(ns[:63], "-")
	}
	if err := testutil.CreateNamespace(ctx, cl, ns); err != nil {
		return "create namespace: " + err.Error()
	}
	j := s.job.DeepCopy()
	j.Namespace = ns
	var tmpls []corev1.PodTemplateSpec
	if j.Spec.RayClusterSpec != nil {
		tmpls = templates(&rayv1.RayCluster{Spec: *j.Spec.RayClusterSpec})
	}
	if j.Spec.SubmitterPodTemplate != nil {
		tmpls = append(tmpls, *j.Spec.SubmitterPodTemplate)
	}
	for _, tmpl := range tmpls {
		if sa := tmpl.Spec.ServiceAccountName; sa != "" {
			err := cl.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}})
			if err != nil && !strings.Contains(err.Error(), "already exists") {
				return "create service account: " + err.Error()
			}
		}
	}
	if name := j.Spec.ClusterSelector[rayv1.LabelCluster]; name != "" {
		rc := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: *existing.DeepCopy()}
		if err := cl.Create(ctx, rc); err != nil {
			return "create the selected RayCluster: " + err.Error()
		}
	}
	if err := cl.Create(ctx, j); err != nil {
		return "create RayJob: " + err.Error()
	}
	want := rayv1.JobDeploymentStatusRunning
	if submissionModeOf(j) == rayv1.InteractiveMode {
		want = rayv1.JobDeploymentStatusWaiting
	}
	wantUnsup := wantJobUnsupported[s.file]
	var last string
	for {
		got := &rayv1.RayJob{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(j), got); err != nil {
			return err.Error()
		}
		st := got.Status
		if st.JobDeploymentStatus == rayv1.JobDeploymentStatusValidationFailed || rayv1.IsJobDeploymentTerminal(st.JobDeploymentStatus) {
			return fmt.Sprintf("ended %s: %s %s", st.JobDeploymentStatus, st.Reason, st.Message)
		}
		var unsup []string
		if c := meta.FindStatusCondition(st.RayClusterStatus.Conditions, raycluster.ConditionUnsupportedFeature); c != nil && c.Status == metav1.ConditionTrue {
			unsup = parseUnsupported(c.Message)
		}
		if st.JobDeploymentStatus == want && st.RayClusterStatus.State == rayv1.Ready {
			if !slices.Equal(unsup, wantUnsup) {
				return fmt.Sprintf("cluster reports unsupported %v, want %v", unsup, wantUnsup)
			}
			if st.JobId == "" && want == rayv1.JobDeploymentStatusRunning || st.RayClusterName == "" || st.DashboardURL == "" || st.StartTime == nil {
				return fmt.Sprintf("status incomplete: %+v", st)
			}
			return ""
		}
		last = fmt.Sprintf("jobDeploymentStatus %q, cluster %s state %q, message %q", st.JobDeploymentStatus, st.RayClusterName, st.RayClusterStatus.State, st.Message)
		select {
		case <-ctx.Done():
			return "timed out: " + last
		case <-time.After(500 * time.Millisecond):
		}
	}
}
