package raycluster

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

func pod(nodeType string, phase corev1.PodPhase, ready bool) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: nodeType, Labels: map[string]string{rayv1.LabelNodeType: nodeType}},
		Status:     corev1.PodStatus{Phase: phase, PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func condStatus(s rayv1.RayClusterStatus) map[string]string {
	m := map[string]string{}
	for _, c := range s.Conditions {
		m[c.Type] = string(c.Status) + "/" + c.Reason
	}
	return m
}

func TestComputeStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	base := testutil.MakeRayCluster("ns", "rc").Workers("small", 2).Obj()
	headless := clusterbuild.HeadService(base)
	tests := []struct {
		name      string
		mutate    func(*rayv1.RayCluster)
		obs       observed
		wantState rayv1.ClusterState
		wantConds map[string]string
		check     func(*testing.T, rayv1.RayClusterStatus)
	}{{
		name:      "no pods yet",
		obs:       observed{reconcileOK: true, headService: headless},
		wantConds: map[string]string{"HeadPodReady": "False/HeadPodNotFound", "RayClusterProvisioned": "False/RayClusterPodsProvisioning", "RayClusterSuspended": "False/RayClusterSuspended", "RayClusterSuspending": "False/RayClusterSuspending"},
	}, {
		name: "all ready",
		obs: observed{reconcileOK: true, headService: headless, pods: []corev1.Pod{
			pod("head", corev1.PodRunning, true), pod("worker", corev1.PodRunning, true), pod("worker", corev1.PodRunning, true)}},
		wantState: rayv1.Ready,
		wantConds: map[string]string{"HeadPodReady": "True/HeadPodRunningAndReady", "RayClusterProvisioned": "True/AllPodRunningAndReadyFirstTime", "RayClusterSuspended": "False/RayClusterSuspended", "RayClusterSuspending": "False/RayClusterSuspending"},
		check: func(t *testing.T, s rayv1.RayClusterStatus) {
			if s.ReadyWorkerReplicas != 2 || s.AvailableWorkerReplicas != 2 || s.Head.ServiceIP != "10.0.0.1" || s.Endpoints["dashboard"] != "8265" {
				t.Errorf("status %+v", s)
			}
		},
	}, {
		name: "a worker not ready, and a create failed",
		obs: observed{reconcileOK: false, headService: headless, failure: &failure{rayv1.FailedCreateWorkerPod, "quota"}, pods: []corev1.Pod{
			pod("head", corev1.PodRunning, true), pod("worker", corev1.PodRunning, true), pod("worker", corev1.PodPending, false)}},
		wantConds: map[string]string{"HeadPodReady": "True/HeadPodRunningAndReady", "RayClusterProvisioned": "False/RayClusterPodsProvisioning", "ReplicaFailure": "True/FailedCreateWorkerPod", "RayClusterSuspended": "False/RayClusterSuspended", "RayClusterSuspending": "False/RayClusterSuspending"},
	}, {
		name:      "suspending",
		mutate:    func(c *rayv1.RayCluster) { c.Spec.Suspend = ptr.To(true) },
		obs:       observed{reconcileOK: true, pods: []corev1.Pod{pod("head", corev1.PodRunning, true)}},
		wantConds: map[string]string{"HeadPodReady": "True/HeadPodRunningAndReady", "RayClusterProvisioned": "False/RayClusterPodsProvisioning", "RayClusterSuspending": "True/RayClusterSuspending", "RayClusterSuspended": "False/RayClusterSuspended"},
	}, {
		name: "suspension completes even when spec.suspend is cleared meanwhile",
		mutate: func(c *rayv1.RayCluster) {
			c.Status.Conditions = []metav1.Condition{{Type: "RayClusterSuspending", Status: metav1.ConditionTrue, Reason: "RayClusterSuspending"}}
		},
		obs:       observed{reconcileOK: true, pods: []corev1.Pod{pod("head", corev1.PodRunning, true)}},
		wantConds: map[string]string{"HeadPodReady": "True/HeadPodRunningAndReady", "RayClusterProvisioned": "False/RayClusterPodsProvisioning", "RayClusterSuspending": "True/RayClusterSuspending", "RayClusterSuspended": "False/RayClusterSuspended"},
	}, {
		name: "suspended cluster resumes once spec.suspend is cleared",
		mutate: func(c *rayv1.RayCluster) {
			c.Status.State = rayv1.Suspended
			c.Status.Conditions = []metav1.Condition{{Type: "RayClusterSuspended", Status: metav1.ConditionTrue, Reason: "RayClusterSuspended"}}
		},
		obs:       observed{reconcileOK: true},
		wantConds: map[string]string{"HeadPodReady": "False/HeadPodNotFound", "RayClusterSuspended": "False/RayClusterSuspended", "RayClusterSuspending": "False/RayClusterSuspending"},
	}, {
		name: "head waiting on its image",
		obs: observed{reconcileOK: true, pods: []corev1.Pod{func() corev1.Pod {
			p := pod("head", corev1.PodPending, false)
			p.Status.Conditions[0].Reason = "ContainersNotReady"
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "ray-head", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}}}
			return p
		}()}},
		wantConds: map[string]string{"HeadPodReady": "False/ImagePullBackOff", "RayClusterProvisioned": "False/RayClusterPodsProvisioning", "RayClusterSuspended": "False/RayClusterSuspended", "RayClusterSuspending": "False/RayClusterSuspending"},
	}, {
		name:      "suspended",
		mutate:    func(c *rayv1.RayCluster) { c.Spec.Suspend = ptr.To(true) },
		obs:       observed{reconcileOK: true},
		wantState: rayv1.Suspended,
		wantConds: map[string]string{"HeadPodReady": "False/HeadPodNotFound", "RayClusterProvisioned": "False/RayClusterPodsProvisioning", "RayClusterSuspending": "False/RayClusterSuspending", "RayClusterSuspended": "True/RayClusterSuspended"},
		check: func(t *testing.T, s rayv1.RayClusterStatus) {
			// As KubeRay: what the cluster will want on resume.
			if s.DesiredWorkerReplicas != 2 || s.DesiredCPU.String() != "3" {
				t.Errorf("suspended cluster reports %d workers, %s CPU; want 2 and 3", s.DesiredWorkerReplicas, s.DesiredCPU.String())
			}
		},
	}, {
		name: "unsupported and invalid",
		mutate: func(c *rayv1.RayCluster) {
			c.Labels = map[string]string{rayv1.LabelOriginCRD: "RayService"}
		},
		obs:       observed{unsupported: []string{"spec.tlsOptions"}, invalid: &failure{ReasonUpgradeStrategyNotAllowed, "no"}},
		wantConds: map[string]string{"UnsupportedFeature": "True/UnsupportedFields", "InvalidRayClusterSpec": "True/UpgradeStrategyNotAllowed"},
	}, {
		name: "replica counts: clamp, hosts, saturation",
		mutate: func(c *rayv1.RayCluster) {
			g := &c.Spec.WorkerGroupSpecs[0]
			g.Replicas, g.MinReplicas, g.MaxReplicas, g.NumOfHosts = ptr.To[int32](50), ptr.To[int32](1), ptr.To[int32](3), 4
			c.Spec.WorkerGroupSpecs = append(c.Spec.WorkerGroupSpecs, rayv1.WorkerGroupSpec{GroupName: "unbounded",
				MinReplicas: ptr.To[int32](0), MaxReplicas: ptr.To[int32](math.MaxInt32), NumOfHosts: 2,
				Template: testutil.RayPodTemplate("w", "1", "1Gi")})
		},
		obs:       observed{reconcileOK: true},
		wantConds: map[string]string{"HeadPodReady": "False/HeadPodNotFound", "RayClusterProvisioned": "False/RayClusterPodsProvisioning", "RayClusterSuspended": "False/RayClusterSuspended", "RayClusterSuspending": "False/RayClusterSuspending"},
		check: func(t *testing.T, s rayv1.RayClusterStatus) {
			if s.DesiredWorkerReplicas != 12 || s.MinWorkerReplicas != 4 || s.MaxWorkerReplicas != math.MaxInt32 {
				t.Errorf("desired %d min %d max %d", s.DesiredWorkerReplicas, s.MinWorkerReplicas, s.MaxWorkerReplicas)
			}
			if s.DesiredCPU.String() != "13" || s.DesiredMemory.String() != "14Gi" {
				t.Errorf("cpu %s memory %s", s.DesiredCPU.String(), s.DesiredMemory.String())
			}
		},
	}, {
		// A RayJob's DeleteWorkers rule suspends the worker groups: as KubeRay, they count for nothing, their
		// bounds neither (the oracle's ray-job.rule-deleteworkers found maxWorkerReplicas still counting them).
		name: "suspended worker group",
		mutate: func(c *rayv1.RayCluster) {
			g := &c.Spec.WorkerGroupSpecs[0]
			g.MinReplicas, g.MaxReplicas, g.Suspend = ptr.To[int32](1), ptr.To[int32](10), ptr.To(true)
		},
		obs:       observed{reconcileOK: true},
		wantConds: map[string]string{"HeadPodReady": "False/HeadPodNotFound", "RayClusterProvisioned": "False/RayClusterPodsProvisioning", "RayClusterSuspended": "False/RayClusterSuspended", "RayClusterSuspending": "False/RayClusterSuspending"},
		check: func(t *testing.T, s rayv1.RayClusterStatus) {
			if s.DesiredWorkerReplicas != 0 || s.MinWorkerReplicas != 0 || s.MaxWorkerReplicas != 0 {
				t.Errorf("desired %d min %d max %d; want 0 0 0", s.DesiredWorkerReplicas, s.MinWorkerReplicas, s.MaxWorkerReplicas)
			}
		},
	}, {
		// RayClusterStatusConditions off: none of KubeRay's conditions; the state still says Ready and Suspended.
		name: "conditions off: all ready is Ready, with no condition",
		obs: observed{noConditions: true, reconcileOK: true, headService: headless, pods: []corev1.Pod{
			pod("head", corev1.PodRunning, true), pod("worker", corev1.PodRunning, true), pod("worker", corev1.PodRunning, true)}},
		wantState: rayv1.Ready,
		wantConds: map[string]string{},
		check: func(t *testing.T, s rayv1.RayClusterStatus) {
			if s.ReadyWorkerReplicas != 2 || s.Head.PodName != "head" || s.StateTransitionTimes[rayv1.Ready] == nil {
				t.Errorf("status %+v", s)
			}
		},
	}, {
		name: "conditions off: a failed create is no ReplicaFailure, and an earlier run's conditions go",
		mutate: func(c *rayv1.RayCluster) {
			c.Status.Conditions = []metav1.Condition{{Type: "HeadPodReady", Status: metav1.ConditionTrue, Reason: "HeadPodRunningAndReady"},
				{Type: "RayClusterProvisioned", Status: metav1.ConditionTrue, Reason: "AllPodRunningAndReadyFirstTime"},
				{Type: "RayClusterSuspended", Status: metav1.ConditionFalse, Reason: "RayClusterSuspended"}}
		},
		obs: observed{noConditions: true, reconcileOK: false, failure: &failure{rayv1.FailedCreateWorkerPod, "quota"}, pods: []corev1.Pod{
			pod("head", corev1.PodRunning, false)}},
		wantConds: map[string]string{},
	}, {
		name:   "conditions off: suspending keeps the state until the last pod is gone",
		mutate: func(c *rayv1.RayCluster) { c.Spec.Suspend = ptr.To(true); c.Status.State = rayv1.Ready },
		obs:    observed{noConditions: true, reconcileOK: true, pods: []corev1.Pod{pod("head", corev1.PodRunning, true)}},
		// As KubeRay: no Suspending phase to report.
		wantState: rayv1.Ready,
		wantConds: map[string]string{},
	}, {
		name:      "conditions off: suspended once no pod is left",
		mutate:    func(c *rayv1.RayCluster) { c.Spec.Suspend = ptr.To(true) },
		obs:       observed{noConditions: true, reconcileOK: true},
		wantState: rayv1.Suspended,
		wantConds: map[string]string{},
	}, {
		name:      "conditions off: a resumed cluster leaves Suspended",
		mutate:    func(c *rayv1.RayCluster) { c.Status.State = rayv1.Suspended },
		obs:       observed{noConditions: true, reconcileOK: true},
		wantConds: map[string]string{},
	}, {
		name:      "conditions off: Manta's own conditions stay",
		obs:       observed{noConditions: true, unsupported: []string{"spec.tlsOptions"}, templateErr: &failure{ReasonDefaultTemplateNotFound, "gone"}, reconcileOK: true},
		wantConds: map[string]string{"UnsupportedFeature": "True/UnsupportedFields", "DefaultPodTemplateFailure": "True/DefaultPodTemplateNotFound"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base.DeepCopy()
			c.Generation = 3
			if tc.mutate != nil {
				tc.mutate(c)
			}
			s := computeStatus(c, tc.obs, now)
			if s.State != tc.wantState {
				t.Errorf("state %q, want %q", s.State, tc.wantState)
			}
			if diff := cmp.Diff(tc.wantConds, condStatus(s)); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if s.ObservedGeneration != 3 {
				t.Errorf("observedGeneration %d", s.ObservedGeneration)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

// Once provisioned, a cluster stays provisioned, and a recomputed status of a settled cluster is unchanged.
func TestComputeStatusStable(t *testing.T) {
	c := testutil.MakeRayCluster("ns", "rc").Obj()
	obs := observed{reconcileOK: true, pods: []corev1.Pod{pod("head", corev1.PodRunning, true)}}
	first := computeStatus(c, obs, metav1.NewTime(time.Unix(100, 0)))
	c.Status = first
	second := computeStatus(c, obs, metav1.NewTime(time.Unix(200, 0)))
	if !statusEqual(&first, &second) {
		t.Errorf("status changed without a change: %s", cmp.Diff(first, second))
	}
	c.Status = second
	obs.pods = nil
	third := computeStatus(c, obs, metav1.NewTime(time.Unix(300, 0)))
	if !meta.IsStatusConditionTrue(third.Conditions, string(rayv1.RayClusterProvisioned)) || third.State != rayv1.Ready {
		t.Errorf("provisioned/ready not sticky: %+v", third)
	}
}

// ray.io/disable-provisioned-head-restart holds a provisioned cluster's head back: with the status conditions
// (RayClusterProvisioned) or, with them off, once the state was Ready.
func TestHeadRestartDisabled(t *testing.T) {
	marked := testutil.MakeRayCluster("ns", "rc").Obj()
	marked.Annotations = map[string]string{rayv1.LabelDisableProvisionedHeadRestart: "true"}
	provisioned := marked.DeepCopy()
	provisioned.Status.Conditions = []metav1.Condition{{Type: string(rayv1.RayClusterProvisioned), Status: metav1.ConditionTrue}}
	wasReady := marked.DeepCopy()
	wasReady.Status.StateTransitionTimes = map[rayv1.ClusterState]*metav1.Time{rayv1.Ready: ptr.To(metav1.Now())}
	for _, tc := range []struct {
		name         string
		c            *rayv1.RayCluster
		noConditions bool
		want         bool
	}{
		{"not provisioned", marked, false, false},
		{"provisioned", provisioned, false, true},
		{"ready once, conditions on: the condition decides", wasReady, false, false},
		{"conditions off, never ready", marked, true, false},
		{"conditions off, ready once", wasReady, true, true},
		{"conditions off: a stale condition is not read", provisioned, true, false},
	} {
		if got := headRestartDisabled(tc.c, tc.noConditions); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A status without HeadPodReady (conditions off) is complete on its state and counts; with it, only when True.
func TestCompleteWithoutConditions(t *testing.T) {
	s := rayv1.RayClusterStatus{State: rayv1.Ready, ReadyWorkerReplicas: 2, DesiredWorkerReplicas: 2}
	if !complete(&s) {
		t.Error("ready status without conditions not complete")
	}
	s.Conditions = []metav1.Condition{{Type: string(rayv1.HeadPodReady), Status: metav1.ConditionFalse}}
	if complete(&s) {
		t.Error("complete with HeadPodReady False")
	}
	s.Conditions[0].Status = metav1.ConditionTrue
	s.ReadyWorkerReplicas = 1
	if complete(&s) {
		t.Error("complete with a worker not ready")
	}
}
