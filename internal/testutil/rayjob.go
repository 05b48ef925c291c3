package testutil

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// RayJobWrapper builds RayJobs for tests: MakeRayJob("ns", "name").Mode(rayv1.K8sJobMode).Suspend().Obj().
type RayJobWrapper struct{ rayv1.RayJob }

// MakeRayJob is a RayJob submitting `python -c 'print(1)'` over HTTP to a cluster of its own
// (RayJobClusterSpec).
func MakeRayJob(ns, name string) *RayJobWrapper {
	return &RayJobWrapper{rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: rayv1.RayJobSpec{
			Entrypoint: "python -c 'print(1)'", RayClusterSpec: RayJobClusterSpec(), SubmissionMode: rayv1.HTTPMode,
		},
	}}
}

// RayJobClusterSpec is the smallest cluster a RayJob test needs: a one-container head and one worker group
// "small" of one replica (min 0, max 2), rayproject/ray:2.52.0, no resources.
func RayJobClusterSpec() *rayv1.RayClusterSpec {
	return &rayv1.RayClusterSpec{
		HeadGroupSpec: rayv1.HeadGroupSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray:2.52.0"}}}}},
		WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{GroupName: "small", Replicas: ptr.To[int32](1), MinReplicas: ptr.To[int32](0), MaxReplicas: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-worker", Image: "rayproject/ray:2.52.0"}}}}}},
	}
}

// Mode sets the submission mode.
func (w *RayJobWrapper) Mode(m rayv1.JobSubmissionMode) *RayJobWrapper {
	w.Spec.SubmissionMode = m
	return w
}

// Entrypoint sets the entrypoint.
func (w *RayJobWrapper) Entrypoint(e string) *RayJobWrapper {
	w.Spec.Entrypoint = e
	return w
}

// Suspend sets suspend.
func (w *RayJobWrapper) Suspend() *RayJobWrapper {
	w.Spec.Suspend = true
	return w
}

// ShutdownAfterJobFinishes deletes the cluster when the job finishes.
func (w *RayJobWrapper) ShutdownAfterJobFinishes() *RayJobWrapper {
	w.Spec.ShutdownAfterJobFinishes = true
	return w
}

// BackoffLimit sets how many times a failed job is retried.
func (w *RayJobWrapper) BackoffLimit(n int32) *RayJobWrapper {
	w.Spec.BackoffLimit = ptr.To(n)
	return w
}

// ActiveDeadline sets activeDeadlineSeconds.
func (w *RayJobWrapper) ActiveDeadline(seconds int32) *RayJobWrapper {
	w.Spec.ActiveDeadlineSeconds = ptr.To(seconds)
	return w
}

// PreRunningDeadline sets preRunningDeadlineSeconds.
func (w *RayJobWrapper) PreRunningDeadline(seconds int32) *RayJobWrapper {
	w.Spec.PreRunningDeadlineSeconds = ptr.To(seconds)
	return w
}

// RuntimeEnvYAML sets the runtime environment.
func (w *RayJobWrapper) RuntimeEnvYAML(y string) *RayJobWrapper {
	w.Spec.RuntimeEnvYAML = y
	return w
}

// ManagedBy sets spec.managedBy.
func (w *RayJobWrapper) ManagedBy(m string) *RayJobWrapper {
	w.Spec.ManagedBy = ptr.To(m)
	return w
}

// ClusterSelector runs the job on an existing cluster selected by labels, instead of a cluster of its own.
func (w *RayJobWrapper) ClusterSelector(sel map[string]string) *RayJobWrapper {
	w.Spec.RayClusterSpec = nil
	w.Spec.ClusterSelector = sel
	return w
}

// Label sets a label on the RayJob.
func (w *RayJobWrapper) Label(k, v string) *RayJobWrapper {
	metav1.SetMetaDataLabel(&w.ObjectMeta, k, v)
	return w
}

// With applies f, for what no other method sets.
func (w *RayJobWrapper) With(f func(*rayv1.RayJob)) *RayJobWrapper {
	if f != nil {
		f(&w.RayJob)
	}
	return w
}

// Obj returns the RayJob.
func (w *RayJobWrapper) Obj() *rayv1.RayJob { return w.RayJob.DeepCopy() }
