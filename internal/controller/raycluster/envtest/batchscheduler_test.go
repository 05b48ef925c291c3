package envtest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	spv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/controller/shared/podgroup"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestBatchSchedulers runs the controller under each of KubeRay's batch schedulers against a real kube-apiserver
// serving Volcano's and scheduler-plugins' PodGroup CRDs: one control plane, one operator per scheduler, each
// watching a namespace of its own (the scheduler is operator-wide, as in KubeRay).
func TestBatchSchedulers(t *testing.T) {
	cfg, cl := testutil.StartEnvtestWithCRDs(t, filepath.Join(testutil.MustRepoRoot(t), "config", "crd"),
		testutil.VolcanoCRDs(t), testutil.SchedulerPluginsCRDs(t))
	e := &env{Env: testutil.NewEnv(cl), cl: cl}
	for _, tc := range []struct {
		scheduler string
		fn        func(*testing.T, *env, string)
	}{
		{clusterbuild.SchedulerVolcano, testVolcano},
		{clusterbuild.SchedulerPlugins, testSchedulerPlugins},
		{clusterbuild.SchedulerYuniKorn, testYuniKorn},
		{clusterbuild.SchedulerKai, testKai},
	} {
		ns := "sched-" + tc.scheduler
		e.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		startNamespaced(t, cfg, ns, raycluster.Options{BatchScheduler: tc.scheduler, MaxConcurrentReconciles: 2})
		t.Run(tc.scheduler, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, e, ns)
		})
	}
}

func quantitiesEqual(got corev1.ResourceList, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if q, ok := got[corev1.ResourceName(k)]; !ok || q.Cmp(resource.MustParse(v)) != 0 {
			return false
		}
	}
	return true
}

// schedulerPods checks every pod of rc: schedulerName, and the labels and annotations given (name -> value).
func schedulerPods(t *testing.T, pods []corev1.Pod, schedulerName string, lbls, annotations func(p *corev1.Pod) map[string]string) {
	t.Helper()
	for i := range pods {
		p := &pods[i]
		if p.Spec.SchedulerName != schedulerName {
			t.Errorf("pod %s: schedulerName %q, want %q", p.Name, p.Spec.SchedulerName, schedulerName)
		}
		for k, v := range lbls(p) {
			if p.Labels[k] != v {
				t.Errorf("pod %s: label %s=%q, want %q", p.Name, k, p.Labels[k], v)
			}
		}
		for k, v := range annotations(p) {
			if p.Annotations[k] != v {
				t.Errorf("pod %s: annotation %s=%q, want %q", p.Name, k, p.Annotations[k], v)
			}
		}
	}
}

// The Volcano PodGroup KubeRay v1.7 makes (ray-<cluster>-pg: head + desired workers, their resources, the queue and
// priority class, controlled by the cluster), kept at the cluster's size as it scales; the pods in it; a RayJob's
// cluster in its RayJob's PodGroup; a bad network-topology label refused naming it.
func testVolcano(t *testing.T, e *env, ns string) {
	ctx := context.Background()
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 2).
		Label(clusterbuild.LabelVolcanoQueue, "q1").Label(clusterbuild.LabelPriorityClassName, "high").Obj()
	e.Create(t, rc)
	pods := e.waitPods(t, rc, 3)
	c := testutil.Get(t, e.Env, rc)
	pg := &volcanov1beta1.PodGroup{}
	if err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ray-rc-pg"}, pg); err != nil {
		t.Fatal(err)
	}
	if pg.Spec.MinMember != 3 || pg.Spec.MinResources == nil || !quantitiesEqual(*pg.Spec.MinResources, map[string]string{"cpu": "3", "memory": "4Gi"}) ||
		pg.Spec.Queue != "q1" || pg.Spec.PriorityClassName != "high" || !metav1.IsControlledBy(pg, c) {
		t.Errorf("PodGroup %+v %+v", pg.Spec, pg.OwnerReferences)
	}
	schedulerPods(t, pods, "volcano", func(*corev1.Pod) map[string]string {
		return map[string]string{clusterbuild.LabelVolcanoQueue: "q1", clusterbuild.LabelPriorityClassName: "high"}
	}, func(p *corev1.Pod) map[string]string {
		return map[string]string{"scheduling.k8s.io/group-name": "ray-rc-pg", "volcano.sh/task-spec": p.Labels[rayv1.LabelGroup]}
	})

	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](3) })
	e.Eventually(t, "PodGroup follows the scale-up", func() (bool, string) {
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(pg), pg); err != nil {
			return false, err.Error()
		}
		return pg.Spec.MinMember == 4 && quantitiesEqual(*pg.Spec.MinResources, map[string]string{"cpu": "4", "memory": "5Gi"}),
			fmt.Sprintf("%d %v", pg.Spec.MinMember, pg.Spec.MinResources)
	})

	// A RayJob's cluster: the RayJob's PodGroup (which the RayJob controller makes) holds its pods.
	job := testutil.MakeRayCluster(ns, "job1-raycluster").Workers("small", 1).
		Label(rayv1.LabelOriginCRD, "RayJob").Label(rayv1.LabelOriginCRName, "job1").Obj()
	e.Create(t, job)
	schedulerPods(t, e.waitPods(t, job, 2), "volcano", func(*corev1.Pod) map[string]string { return nil },
		func(*corev1.Pod) map[string]string {
			return map[string]string{"scheduling.k8s.io/group-name": "ray-job1-pg"}
		})
	for _, name := range []string{"ray-job1-raycluster-pg", "ray-job1-pg"} {
		if err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &volcanov1beta1.PodGroup{}); !apierrors.IsNotFound(err) {
			t.Errorf("PodGroup %s for a RayJob's cluster: %v", name, err)
		}
	}

	bad := testutil.MakeRayCluster(ns, "bad").Workers("small", 1).
		Label(clusterbuild.LabelVolcanoNetworkTopologyMode, "hard").Label(clusterbuild.LabelVolcanoNetworkTopologyHighestTier, "two").Obj()
	e.Create(t, bad)
	e.waitObserved(t, bad)
	e.Eventually(t, "ReplicaFailure naming the label", func() (bool, string) {
		cond := meta.FindStatusCondition(testutil.Get(t, e.Env, bad).Status.Conditions, string(rayv1.RayClusterReplicaFailure))
		return cond != nil && strings.Contains(cond.Message, "metadata.labels[volcano.sh/network-topology-highest-tier-allowed]"), fmt.Sprintf("%+v", cond)
	})
	waitEvent(t, e, ns, podgroup.EventFailedToCreate)
	if n := len(e.pods(t, bad)); n != 0 {
		t.Errorf("%d pods without their PodGroup", n)
	}
}

// scheduler-plugins: a cluster asking for gang scheduling gets the PodGroup <cluster> (not controlled by it) and
// pods labelled with it; one that does not gets neither.
func testSchedulerPlugins(t *testing.T, e *env, ns string) {
	ctx := context.Background()
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 2).Label(clusterbuild.LabelGangScheduling, "true").Obj()
	e.Create(t, rc)
	pods := e.waitPods(t, rc, 3)
	c := testutil.Get(t, e.Env, rc)
	pg := &spv1alpha1.PodGroup{}
	if err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rc"}, pg); err != nil {
		t.Fatal(err)
	}
	if pg.Spec.MinMember != 3 || !quantitiesEqual(pg.Spec.MinResources, map[string]string{"cpu": "3", "memory": "4Gi"}) ||
		len(pg.OwnerReferences) != 1 || pg.OwnerReferences[0].UID != c.UID || pg.OwnerReferences[0].Controller != nil {
		t.Errorf("PodGroup %+v %+v", pg.Spec, pg.OwnerReferences)
	}
	schedulerPods(t, pods, "scheduler-plugins-scheduler", func(*corev1.Pod) map[string]string {
		return map[string]string{clusterbuild.LabelSchedulerPluginsPodGroup: "rc"}
	}, func(*corev1.Pod) map[string]string { return nil })

	plain := testutil.MakeRayCluster(ns, "plain").Workers("small", 1).Obj()
	e.Create(t, plain)
	// The PodGroup would come before the pods: once they are there, none is coming.
	for _, p := range e.waitPods(t, plain, 2) {
		if _, ok := p.Labels[clusterbuild.LabelSchedulerPluginsPodGroup]; ok || p.Spec.SchedulerName != "scheduler-plugins-scheduler" {
			t.Errorf("pod %s of a cluster without gang scheduling: %q %v", p.Name, p.Spec.SchedulerName, p.Labels)
		}
	}
	if err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "plain"}, &spv1alpha1.PodGroup{}); !apierrors.IsNotFound(err) {
		t.Errorf("PodGroup for a cluster without gang scheduling: %v", err)
	}
}

// YuniKorn: the application and queue labels, the task groups of the gang; another scheduler's label on the cluster
// is reported as ignored.
func testYuniKorn(t *testing.T, e *env, ns string) {
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 2).Label(clusterbuild.LabelGangScheduling, "true").
		Label(clusterbuild.LabelYuniKornAppID, "app1").Label(clusterbuild.LabelYuniKornQueue, "root.q").Label(clusterbuild.LabelKaiQueue, "k").Obj()
	rc.Spec.WorkerGroupSpecs[0].MinReplicas = ptr.To[int32](1)
	e.Create(t, rc)
	groups := `[{"minResource":{"cpu":"1","memory":"2Gi"},"name":"headgroup","minMember":1},` +
		`{"minResource":{"cpu":"1","memory":"1Gi"},"name":"small","minMember":1}]`
	schedulerPods(t, e.waitPods(t, rc, 3), "yunikorn", func(*corev1.Pod) map[string]string {
		return map[string]string{"applicationId": "app1", "queue": "root.q"}
	}, func(p *corev1.Pod) map[string]string {
		return map[string]string{"yunikorn.apache.org/task-groups": groups, "yunikorn.apache.org/task-group-name": p.Labels[rayv1.LabelGroup]}
	})
	cond := meta.FindStatusCondition(testutil.Get(t, e.Env, rc).Status.Conditions, raycluster.ConditionUnsupportedFeature)
	want := "unsupported fields are ignored: metadata.labels[kai.scheduler/queue] (read by kai-scheduler; the operator runs --batch-scheduler=yunikorn)"
	if cond == nil || cond.Message != want {
		t.Errorf("UnsupportedFeature %+v, want message %q", cond, want)
	}
}

func testKai(t *testing.T, e *env, ns string) {
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Label(clusterbuild.LabelKaiQueue, "team-a").Obj()
	e.Create(t, rc)
	schedulerPods(t, e.waitPods(t, rc, 2), "kai-scheduler", func(*corev1.Pod) map[string]string {
		return map[string]string{clusterbuild.LabelKaiQueue: "team-a"}
	}, func(*corev1.Pod) map[string]string { return nil })
	if cond := meta.FindStatusCondition(testutil.Get(t, e.Env, rc).Status.Conditions, raycluster.ConditionUnsupportedFeature); cond != nil {
		t.Errorf("the scheduler's own label reported: %+v", cond)
	}
}
