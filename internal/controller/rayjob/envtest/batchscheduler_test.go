package envtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

func sizedSpec() *rayv1.RayClusterSpec {
	spec := testutil.RayJobClusterSpec()
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	spec.HeadGroupSpec.Template.Spec.Containers[0].Resources.Requests = rl
	spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Resources.Requests = rl.DeepCopy()
	return spec
}

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

// A K8sJobMode RayJob under --batch-scheduler=volcano, against a real kube-apiserver serving Volcano's PodGroup
// CRD, as KubeRay v1.7 runs it: the PodGroup ray-<job>-pg (head, worker and the submitter's resources, not the
// submitter pod; the job's queue; controlled by the RayJob) before the cluster; the cluster and the submitter's
// pods in it; once the job is done, the PodGroup shrunk to the cluster that remains. A RayJob on an existing
// cluster is refused with an event naming spec.clusterSelector.
func TestBatchSchedulerVolcano(t *testing.T) {
	e := startEnvWith(t, clusterbuild.SchedulerVolcano)
	ctx := context.Background()
	ns := e.Namespace(t)
	j := e.create(t, testutil.MakeRayJob(ns, "vj").With(func(j *rayv1.RayJob) {
		j.Labels = map[string]string{clusterbuild.LabelVolcanoQueue: "q1"}
		j.Spec.SubmissionMode = rayv1.K8sJobMode
		j.Spec.RayClusterSpec = sizedSpec()
	}))
	pg := &volcanov1beta1.PodGroup{}
	e.Eventually(t, "PodGroup ray-vj-pg", func() (bool, string) {
		err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ray-vj-pg"}, pg)
		return err == nil, fmt.Sprint(err)
	})
	got := testutil.Get(t, e.Env, j)
	// head 1/1Gi + worker 1/1Gi + the default submitter's requests 500m/200Mi
	if pg.Spec.MinMember != 2 || !sameQuantities(pg.Spec.MinResources, map[string]string{"cpu": "2500m", "memory": "2248Mi"}) ||
		pg.Spec.Queue != "q1" || !metav1.IsControlledBy(pg, got) {
		t.Errorf("PodGroup %+v owners %+v", pg.Spec, pg.OwnerReferences)
	}

	c := e.readyCluster(t, j)
	if c.Annotations["scheduling.k8s.io/group-name"] != "ray-vj-pg" || c.Labels[clusterbuild.LabelVolcanoQueue] != "q1" {
		t.Errorf("cluster labels %v annotations %v", c.Labels, c.Annotations)
	}
	got = e.waitDeployment(t, j, rayv1.JobDeploymentStatusRunning)
	sub := &batchv1.Job{}
	e.Eventually(t, "the submitter Job", func() (bool, string) {
		err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vj"}, sub)
		return err == nil, fmt.Sprint(err)
	})
	tmpl := sub.Spec.Template
	if tmpl.Spec.SchedulerName != "volcano" || tmpl.Annotations["scheduling.k8s.io/group-name"] != "ray-vj-pg" ||
		tmpl.Annotations["volcano.sh/task-spec"] != "submittergroup" || tmpl.Labels[clusterbuild.LabelVolcanoQueue] != "q1" {
		t.Errorf("submitter pod template %q %v %v", tmpl.Spec.SchedulerName, tmpl.Labels, tmpl.Annotations)
	}

	e.ray.Cluster(ns, c.Name).SetJob(got.Status.JobId, ray.JobStatusSucceeded, time.Now().UnixMilli()-1000, time.Now().UnixMilli())
	now := metav1.Now()
	sub.Status.StartTime, sub.Status.CompletionTime, sub.Status.Succeeded = &now, &now, 1
	sub.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	if err := e.cl.Status().Update(ctx, sub); err != nil {
		t.Fatal(err)
	}
	e.waitDeployment(t, j, rayv1.JobDeploymentStatusComplete)
	e.WaitEvent(t, j, corev1.EventTypeNormal, rayjob.ReasonBatchSchedulerCleanedUp)
	if err := e.cl.Get(ctx, client.ObjectKeyFromObject(pg), pg); err != nil {
		t.Fatal(err)
	}
	if pg.Spec.MinMember != 2 || !sameQuantities(pg.Spec.MinResources, map[string]string{"cpu": "2", "memory": "2Gi"}) {
		t.Errorf("PodGroup after the job: %+v", pg.Spec)
	}

	sel := e.create(t, testutil.MakeRayJob(ns, "onexisting").With(func(j *rayv1.RayJob) {
		j.Spec.RayClusterSpec = nil
		j.Spec.ClusterSelector = map[string]string{rayv1.LabelCluster: c.Name}
	}))
	if note := e.WaitEvent(t, sel, corev1.EventTypeWarning, rayjob.ReasonBatchSchedulingRefused); !strings.Contains(note, "spec.clusterSelector") {
		t.Errorf("refusal %q does not name spec.clusterSelector", note)
	}
}
