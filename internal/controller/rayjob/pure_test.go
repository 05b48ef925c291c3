package rayjob

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/features"
	"github.com/manta-dev/manta/internal/testutil"
)

func job(mutate func(*rayv1.RayJob)) *rayv1.RayJob {
	j := &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: "uid-1"}, Spec: rayv1.RayJobSpec{
		Entrypoint: "python x.py", RayClusterSpec: testutil.RayJobClusterSpec(), SubmissionMode: rayv1.K8sJobMode,
	}}
	if mutate != nil {
		mutate(j)
	}
	return j
}

func TestValidate(t *testing.T) {
	succeeded := rayv1.JobStatusSucceeded
	cases := []struct {
		name   string
		mutate func(*rayv1.RayJob)
		want   string // a field path the errors must name; "" means valid
	}{
		{"minimal", nil, ""},
		{"long name", func(j *rayv1.RayJob) { j.Name = strings.Repeat("a", 48) }, "metadata.name"},
		{"neither cluster nor selector", func(j *rayv1.RayJob) { j.Spec.RayClusterSpec = nil }, "spec.rayClusterSpec"},
		{"both cluster and selector", func(j *rayv1.RayJob) { j.Spec.ClusterSelector = map[string]string{"ray.io/cluster": "c"} }, "spec.rayClusterSpec"},
		{"selector without ray.io/cluster", func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec = nil
			j.Spec.ClusterSelector = map[string]string{"app": "x"}
		}, "spec.clusterSelector[ray.io/cluster]"},
		{"selector with suspend", func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec = nil
			j.Spec.ClusterSelector = map[string]string{"ray.io/cluster": "c"}
			j.Spec.Suspend = true
		}, "spec.suspend"},
		{"selector with backoffLimit", func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec = nil
			j.Spec.ClusterSelector = map[string]string{"ray.io/cluster": "c"}
			j.Spec.BackoffLimit = ptr.To[int32](1)
		}, "spec.backoffLimit"},
		{"selector with shutdown", func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec = nil
			j.Spec.ClusterSelector = map[string]string{"ray.io/cluster": "c"}
			j.Spec.ShutdownAfterJobFinishes = true
		}, "spec.shutdownAfterJobFinishes"},
		{"no entrypoint", func(j *rayv1.RayJob) { j.Spec.Entrypoint = "" }, "spec.entrypoint"},
		{"own submitter command needs no entrypoint", func(j *rayv1.RayJob) {
			j.Spec.Entrypoint = ""
			j.Spec.SubmitterPodTemplate = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "s", Command: []string{"/submitter"}}}}}
		}, ""},
		{"interactive needs no entrypoint", func(j *rayv1.RayJob) { j.Spec.SubmissionMode = rayv1.InteractiveMode; j.Spec.Entrypoint = "" }, ""},
		{"interactive with backoffLimit", func(j *rayv1.RayJob) {
			j.Spec.SubmissionMode = rayv1.InteractiveMode
			j.Spec.BackoffLimit = ptr.To[int32](2)
		}, "spec.backoffLimit"},
		{"submitter template in HTTPMode", func(j *rayv1.RayJob) {
			j.Spec.SubmissionMode = rayv1.HTTPMode
			j.Spec.SubmitterPodTemplate = &corev1.PodTemplateSpec{}
		}, "spec.submitterPodTemplate"},
		{"submitter config in SidecarMode", func(j *rayv1.RayJob) {
			j.Spec.SubmissionMode = rayv1.SidecarMode
			j.Spec.SubmitterConfig = &rayv1.SubmitterConfig{}
		}, "spec.submitterConfig"},
		{"sidecar with head restartPolicy Always", func(j *rayv1.RayJob) {
			j.Spec.SubmissionMode = rayv1.SidecarMode
			j.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
		}, "spec.rayClusterSpec.headGroupSpec.template.spec.restartPolicy"},
		{"suspend without shutdown", func(j *rayv1.RayJob) { j.Spec.Suspend = true }, "spec.suspend"},
		{"activeDeadlineSeconds 0", func(j *rayv1.RayJob) { j.Spec.ActiveDeadlineSeconds = ptr.To[int32](0) }, "spec.activeDeadlineSeconds"},
		{"ttl without shutdown", func(j *rayv1.RayJob) { j.Spec.TTLSecondsAfterFinished = 10 }, "spec.ttlSecondsAfterFinished"},
		{"deletionStrategy with shutdown", func(j *rayv1.RayJob) {
			j.Spec.ShutdownAfterJobFinishes = true
			j.Spec.DeletionStrategy = &rayv1.DeletionStrategy{DeletionRules: []rayv1.DeletionRule{{Policy: rayv1.DeleteCluster, Condition: rayv1.DeletionCondition{JobStatus: &succeeded}}}}
		}, "spec.deletionStrategy"},
		{"DeleteWorkers with autoscaling", func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec.EnableInTreeAutoscaling = ptr.To(true)
			j.Spec.DeletionStrategy = &rayv1.DeletionStrategy{DeletionRules: []rayv1.DeletionRule{{Policy: rayv1.DeleteWorkers, Condition: rayv1.DeletionCondition{JobStatus: &succeeded}}}}
		}, "spec.deletionStrategy.deletionRules[0].policy"},
		{"duplicate rules", func(j *rayv1.RayJob) {
			r := rayv1.DeletionRule{Policy: rayv1.DeleteCluster, Condition: rayv1.DeletionCondition{JobStatus: &succeeded}}
			j.Spec.DeletionStrategy = &rayv1.DeletionStrategy{DeletionRules: []rayv1.DeletionRule{r, r}}
		}, "spec.deletionStrategy.deletionRules[1]"},
		{"runtimeEnvYAML", func(j *rayv1.RayJob) { j.Spec.RuntimeEnvYAML = "a: [" }, "spec.runtimeEnvYAML"},
		{"entrypointResources not JSON", func(j *rayv1.RayJob) { j.Spec.EntrypointResources = "custom=1" }, "spec.entrypointResources"},
		{"entrypointResources negative", func(j *rayv1.RayJob) { j.Spec.EntrypointResources = `{"a": -1}` }, "spec.entrypointResources"},
		{"cluster suspend", func(j *rayv1.RayJob) { j.Spec.RayClusterSpec.Suspend = ptr.To(true) }, "spec.rayClusterSpec.suspend"},
		// The RayCluster rules apply to rayClusterSpec, naming the field under it.
		{"cluster rule: head container", func(j *rayv1.RayJob) { j.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers = nil }, "spec.rayClusterSpec.headGroupSpec.template.spec.containers"},
		{"cluster rule: rayStartParams labels", func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec.HeadGroupSpec.RayStartParams = map[string]string{"labels": "a=b"}
		}, "spec.rayClusterSpec.headGroupSpec.rayStartParams[labels]"},
		{"cluster rule: GCS fault tolerance said twice", func(j *rayv1.RayJob) {
			j.Annotations = map[string]string{"ray.io/ft-enabled": "true"}
			j.Spec.RayClusterSpec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{RedisAddress: "redis:6379"}
		}, "metadata.annotations[ray.io/ft-enabled]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := Validate(job(tc.mutate))
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want+":") {
				t.Fatalf("want an error naming %s, got %v", tc.want, errs)
			}
		})
	}
}

func TestCleanups(t *testing.T) {
	end := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	succeeded, failed := rayv1.JobStatusSucceeded, rayv1.JobStatusFailed
	dsFailed := rayv1.JobDeploymentStatusFailed
	finished := func(js rayv1.JobStatus, ds rayv1.JobDeploymentStatus, mutate func(*rayv1.RayJob)) *rayv1.RayJob {
		return job(func(j *rayv1.RayJob) {
			j.Status.JobStatus, j.Status.JobDeploymentStatus, j.Status.EndTime = js, ds, &metav1.Time{Time: end}
			mutate(j)
		})
	}
	rules := func(j *rayv1.RayJob) {
		j.Spec.DeletionStrategy = &rayv1.DeletionStrategy{DeletionRules: []rayv1.DeletionRule{
			{Policy: rayv1.DeleteWorkers, Condition: rayv1.DeletionCondition{JobStatus: &succeeded, TTLSeconds: 10}},
			{Policy: rayv1.DeleteCluster, Condition: rayv1.DeletionCondition{JobStatus: &failed, TTLSeconds: 20}},
			{Policy: rayv1.DeleteSelf, Condition: rayv1.DeletionCondition{JobDeploymentStatus: &dsFailed, TTLSeconds: 30}},
		}}
	}
	cases := []struct {
		name string
		j    *rayv1.RayJob
		want []cleanup
	}{
		{"running: nothing", job(func(j *rayv1.RayJob) { j.Spec.ShutdownAfterJobFinishes = true }), nil},
		{"shutdown after ttl", finished(succeeded, rayv1.JobDeploymentStatusComplete, func(j *rayv1.RayJob) {
			j.Spec.ShutdownAfterJobFinishes, j.Spec.TTLSecondsAfterFinished = true, 60
		}), []cleanup{{rayv1.DeleteCluster, end.Add(time.Minute)}}},
		{"no shutdown: nothing", finished(succeeded, rayv1.JobDeploymentStatusComplete, func(*rayv1.RayJob) {}), nil},
		{"rules on success", finished(succeeded, rayv1.JobDeploymentStatusComplete, rules), []cleanup{{rayv1.DeleteWorkers, end.Add(10 * time.Second)}}},
		{"rules on failure", finished(failed, rayv1.JobDeploymentStatusFailed, rules), []cleanup{
			{rayv1.DeleteCluster, end.Add(20 * time.Second)}, {rayv1.DeleteSelf, end.Add(30 * time.Second)}}},
		{"rules on a deadline failure (job still RUNNING)", finished(rayv1.JobStatusRunning, rayv1.JobDeploymentStatusFailed, rules), []cleanup{
			{rayv1.DeleteSelf, end.Add(30 * time.Second)}}},
		{"legacy onSuccess", finished(succeeded, rayv1.JobDeploymentStatusComplete, func(j *rayv1.RayJob) {
			j.Spec.TTLSecondsAfterFinished = 5
			j.Spec.DeletionStrategy = &rayv1.DeletionStrategy{OnSuccess: &rayv1.DeletionPolicy{Policy: ptr.To(rayv1.DeleteSelf)}, OnFailure: &rayv1.DeletionPolicy{Policy: ptr.To(rayv1.DeleteNone)}}
		}), []cleanup{{rayv1.DeleteSelf, end.Add(5 * time.Second)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Cleanups(tc.j)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i].policy != tc.want[i].policy || !got[i].due.Equal(tc.want[i].due) {
					t.Errorf("[%d] got %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestSubmitScript(t *testing.T) {
	j := job(func(j *rayv1.RayJob) {
		j.Status.JobId = "j-abcde"
		j.Spec.Entrypoint = `python -c "print('it''s')"`
		j.Spec.Metadata = map[string]string{"k": "it's"}
		j.Spec.RuntimeEnvYAML = "pip: [requests]"
		j.Spec.EntrypointNumCpus, j.Spec.EntrypointNumGpus = 1.5, 1
		j.Spec.EntrypointResources = `{"b": 1, "a": 2}`
	})
	got := SubmitScript(j, "http://h:8265")
	for _, want := range []string{
		`/api/gcs_healthz`,
		`if ! ray job status --address 'http://h:8265' 'j-abcde' >/dev/null 2>&1; then ray job submit --address 'http://h:8265' --no-wait --submission-id 'j-abcde'`,
		`--runtime-env-json '{"pip":["requests"]}'`,
		`--metadata-json '{"k":"it'"'"'s"}'`,
		`--entrypoint-num-cpus 1.5 --entrypoint-num-gpus 1`,
		`--entrypoint-resources '{"a":2,"b":1}'`,
		`-- python -c "print('it''s')"; fi`,
		`ray job logs --address 'http://h:8265' --follow 'j-abcde'`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("script lacks %q:\n%s", want, got)
		}
	}
}

func TestClusterFor(t *testing.T) {
	j := job(func(j *rayv1.RayJob) {
		j.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "q"}
		j.Annotations = map[string]string{"a": "b"}
		j.Spec.SubmissionMode = rayv1.SidecarMode
		j.Status.JobId = "j-xyz"
	})
	c := ClusterFor(j, "j-abcde")
	if c.Name != "j-abcde" || c.Labels["ray.io/originated-from-crd"] != "RayJob" || c.Labels["ray.io/originated-from-cr-name"] != "j" ||
		c.Labels["kueue.x-k8s.io/queue-name"] != "q" || c.Annotations["a"] != "b" || c.Annotations["ray.io/disable-provisioned-head-restart"] != "true" ||
		c.Labels["ray.io/job-submission-mode"] != "SidecarMode" {
		t.Errorf("metadata = %+v", c.ObjectMeta)
	}
	if len(c.OwnerReferences) != 1 || !ptr.Deref(c.OwnerReferences[0].Controller, false) || c.OwnerReferences[0].Kind != "RayJob" {
		t.Errorf("ownerReferences = %+v", c.OwnerReferences)
	}
	head := c.Spec.HeadGroupSpec.Template.Spec
	if head.RestartPolicy != corev1.RestartPolicyNever || len(head.Containers) != 2 || head.Containers[1].Name != SubmitterContainerName {
		t.Errorf("head = %+v", head)
	}
	if len(j.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers) != 1 {
		t.Error("ClusterFor changed the RayJob's spec")
	}
	// The mode is the one in force (K8sJobMode when unset) and wins over a label of the RayJob's own; only
	// SidecarMode keeps the head down.
	for mode, want := range map[rayv1.JobSubmissionMode]string{"": "K8sJobMode", rayv1.HTTPMode: "HTTPMode", rayv1.InteractiveMode: "InteractiveMode"} {
		j := job(func(j *rayv1.RayJob) {
			j.Labels = map[string]string{"ray.io/job-submission-mode": "mine"}
			j.Spec.SubmissionMode = mode
		})
		c := ClusterFor(j, "j-abcde")
		if c.Labels["ray.io/job-submission-mode"] != want || c.Annotations["ray.io/disable-provisioned-head-restart"] != "" {
			t.Errorf("mode %q: labels %v annotations %v", mode, c.Labels, c.Annotations)
		}
	}
}

// DELETE_RAYJOB_CR_AFTER_JOB_FINISHES=true: shutdownAfterJobFinishes deletes the RayJob (its cluster with it) when
// the TTL has passed; deletionStrategy is untouched by it, as in KubeRay.
func TestCleanupsDeleteRayJobAfterJobFinishes(t *testing.T) {
	end := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	j := job(func(j *rayv1.RayJob) {
		j.Status.JobStatus, j.Status.JobDeploymentStatus, j.Status.EndTime = rayv1.JobStatusSucceeded, rayv1.JobDeploymentStatusComplete, &metav1.Time{Time: end}
		j.Spec.ShutdownAfterJobFinishes, j.Spec.TTLSecondsAfterFinished = true, 60
	})
	if got := cleanups(j, true); len(got) != 1 || got[0].policy != rayv1.DeleteSelf || !got[0].due.Equal(end.Add(time.Minute)) {
		t.Errorf("shutdownAfterJobFinishes: %v", got)
	}
	j.Spec.DeletionStrategy = &rayv1.DeletionStrategy{OnSuccess: &rayv1.DeletionPolicy{Policy: ptr.To(rayv1.DeleteWorkers)}}
	if got := cleanups(j, true); len(got) != 1 || got[0].policy != rayv1.DeleteWorkers {
		t.Errorf("deletionStrategy: %v", got)
	}
}

func TestSubmitterGrace(t *testing.T) {
	finished := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const timeout = 30 * time.Second
	cases := []struct {
		name       string
		status     rayv1.JobStatus
		finishedAt time.Time
		now        time.Time
		wait       time.Duration
		giveUp     bool
	}{
		{"submitter still running", rayv1.JobStatusRunning, time.Time{}, finished.Add(time.Hour), 0, false},
		{"just finished, Ray never answered", rayv1.JobStatusNew, finished, finished, timeout, false},
		{"10 s later, Ray says RUNNING", rayv1.JobStatusRunning, finished, finished.Add(10 * time.Second), 20 * time.Second, false},
		{"at the deadline", rayv1.JobStatusPending, finished, finished.Add(timeout), 0, true},
		{"past the deadline", rayv1.JobStatusNew, finished, finished.Add(time.Minute), 0, true},
		{"Ray reported SUCCEEDED: settled by Ray's status", rayv1.JobStatusSucceeded, finished, finished.Add(time.Minute), 0, false},
		{"Ray reported FAILED: settled by Ray's status", rayv1.JobStatusFailed, finished, finished.Add(time.Minute), 0, false},
		{"Ray reported STOPPED: settled by Ray's status", rayv1.JobStatusStopped, finished, finished.Add(time.Minute), 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wait, giveUp := SubmitterGrace(tc.status, tc.finishedAt, tc.now, timeout)
			if wait != tc.wait || giveUp != tc.giveUp {
				t.Errorf("SubmitterGrace = (%v, %v), want (%v, %v)", wait, giveUp, tc.wait, tc.giveUp)
			}
		})
	}
}

// With KubeRay's RayJobDeletionPolicy gate off (--feature-gates), spec.deletionStrategy is refused, as KubeRay v1.7.0
// refuses it; on (Manta's default) the same strategy is valid.
func TestValidateDeletionPolicyGate(t *testing.T) {
	succeeded := rayv1.JobStatusSucceeded
	withStrategy := func(j *rayv1.RayJob) {
		j.Spec.DeletionStrategy = &rayv1.DeletionStrategy{DeletionRules: []rayv1.DeletionRule{{Policy: rayv1.DeleteCluster, Condition: rayv1.DeletionCondition{JobStatus: &succeeded}}}}
	}
	if errs := Validate(job(withStrategy)); len(errs) > 0 {
		t.Fatalf("gate on: %v", errs)
	}
	features.SetForTest(t, features.RayJobDeletionPolicy, false)
	errs := Validate(job(withStrategy))
	if !strings.Contains(errs.ToAggregate().Error(), "spec.deletionStrategy: Forbidden: the RayJobDeletionPolicy feature gate is off") {
		t.Errorf("gate off: %v", errs)
	}
	if errs := Validate(job(nil)); len(errs) > 0 {
		t.Errorf("gate off, no strategy: %v", errs)
	}
}
