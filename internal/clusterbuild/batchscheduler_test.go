package clusterbuild

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	spv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// schedulerPodKeys are every label and annotation a batch scheduler may put on a pod: the tests below say, for
// each, exactly the value it must have or that it must be absent.
var schedulerPodLabels = []string{LabelVolcanoQueue, LabelPriorityClassName, LabelYuniKornPodAppID, LabelYuniKornPodQueue,
	LabelKaiQueue, LabelSchedulerPluginsPodGroup}
var schedulerPodAnnotations = []string{AnnotationVolcanoGroupName, AnnotationVolcanoTaskSpec, AnnotationYuniKornTaskGroups,
	AnnotationYuniKornTaskGroupName}

func pick(m map[string]string, keys []string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// The pods each batch scheduler of KubeRay v1.7 gets (batchscheduler/*/AddMetadataToChildResource), written out.
func TestBatchSchedulerPodsAsKubeRay17(t *testing.T) {
	const taskGroups = `[{"minResource":{"cpu":"1","memory":"2Gi"},"name":"headgroup","minMember":1},` +
		`{"minResource":{"cpu":"2","memory":"4Gi"},"name":"small","minMember":0}]`
	type podWant struct {
		scheduler          string
		labels, annotation map[string]string
	}
	tests := []struct {
		name, scheduler string
		labels          map[string]string
		annotations     map[string]string
		head, worker    podWant
	}{
		{name: "none", labels: map[string]string{LabelVolcanoQueue: "q", LabelKaiQueue: "k"},
			head: podWant{"", map[string]string{}, map[string]string{}}, worker: podWant{"", map[string]string{}, map[string]string{}}},
		{name: "volcano queue and priority", scheduler: SchedulerVolcano,
			labels: map[string]string{LabelVolcanoQueue: "q1", LabelPriorityClassName: "high", LabelKaiQueue: "k"},
			head: podWant{"volcano", map[string]string{LabelVolcanoQueue: "q1", LabelPriorityClassName: "high"},
				map[string]string{AnnotationVolcanoGroupName: "ray-rc-pg", AnnotationVolcanoTaskSpec: "headgroup"}},
			worker: podWant{"volcano", map[string]string{LabelVolcanoQueue: "q1", LabelPriorityClassName: "high"},
				map[string]string{AnnotationVolcanoGroupName: "ray-rc-pg", AnnotationVolcanoTaskSpec: "small"}}},
		{name: "volcano, a RayJob's cluster: the RayJob's PodGroup", scheduler: SchedulerVolcano,
			labels: map[string]string{rayv1.LabelOriginCRD: "RayJob", rayv1.LabelOriginCRName: "job1"},
			head:   podWant{"volcano", map[string]string{}, map[string]string{AnnotationVolcanoGroupName: "ray-job1-pg", AnnotationVolcanoTaskSpec: "headgroup"}},
			worker: podWant{"volcano", map[string]string{}, map[string]string{AnnotationVolcanoGroupName: "ray-job1-pg", AnnotationVolcanoTaskSpec: "small"}}},
		{name: "yunikorn gang", scheduler: SchedulerYuniKorn,
			labels: map[string]string{LabelYuniKornAppID: "app1", LabelYuniKornQueue: "root.q", LabelGangScheduling: "true"},
			head: podWant{"yunikorn", map[string]string{"applicationId": "app1", "queue": "root.q"},
				map[string]string{AnnotationYuniKornTaskGroups: taskGroups, AnnotationYuniKornTaskGroupName: "headgroup"}},
			worker: podWant{"yunikorn", map[string]string{"applicationId": "app1", "queue": "root.q"},
				map[string]string{AnnotationYuniKornTaskGroups: taskGroups, AnnotationYuniKornTaskGroupName: "small"}}},
		{name: "yunikorn gang, the cluster's own task groups", scheduler: SchedulerYuniKorn,
			labels: map[string]string{LabelGangScheduling: "false"}, annotations: map[string]string{AnnotationYuniKornTaskGroups: "[mine]"},
			head:   podWant{"yunikorn", map[string]string{}, map[string]string{AnnotationYuniKornTaskGroups: "[mine]", AnnotationYuniKornTaskGroupName: "headgroup"}},
			worker: podWant{"yunikorn", map[string]string{}, map[string]string{AnnotationYuniKornTaskGroups: "[mine]", AnnotationYuniKornTaskGroupName: "small"}}},
		{name: "yunikorn without gang", scheduler: SchedulerYuniKorn, labels: map[string]string{LabelYuniKornQueue: "root.q"},
			head:   podWant{"yunikorn", map[string]string{"queue": "root.q"}, map[string]string{}},
			worker: podWant{"yunikorn", map[string]string{"queue": "root.q"}, map[string]string{}}},
		{name: "scheduler-plugins gang", scheduler: SchedulerPlugins, labels: map[string]string{LabelGangScheduling: "true"},
			head:   podWant{"scheduler-plugins-scheduler", map[string]string{LabelSchedulerPluginsPodGroup: "rc"}, map[string]string{}},
			worker: podWant{"scheduler-plugins-scheduler", map[string]string{LabelSchedulerPluginsPodGroup: "rc"}, map[string]string{}}},
		{name: "scheduler-plugins without gang", scheduler: SchedulerPlugins,
			head:   podWant{"scheduler-plugins-scheduler", map[string]string{}, map[string]string{}},
			worker: podWant{"scheduler-plugins-scheduler", map[string]string{}, map[string]string{}}},
		{name: "kai queue", scheduler: SchedulerKai, labels: map[string]string{LabelKaiQueue: "team-a", LabelVolcanoQueue: "q"},
			head:   podWant{"kai-scheduler", map[string]string{LabelKaiQueue: "team-a"}, map[string]string{}},
			worker: podWant{"kai-scheduler", map[string]string{LabelKaiQueue: "team-a"}, map[string]string{}}},
		{name: "kai without queue: scheduler name only", scheduler: SchedulerKai,
			head:   podWant{"kai-scheduler", map[string]string{}, map[string]string{}},
			worker: podWant{"kai-scheduler", map[string]string{}, map[string]string{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster()
			c.Labels, c.Annotations = tc.labels, tc.annotations
			o := PodOptions{BatchScheduler: tc.scheduler}
			for _, p := range []struct {
				pod  *corev1.Pod
				want podWant
			}{{HeadPod(c, o), tc.head}, {WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], o), tc.worker}} {
				if p.pod.Spec.SchedulerName != p.want.scheduler {
					t.Errorf("%s schedulerName %q, want %q", p.pod.GenerateName, p.pod.Spec.SchedulerName, p.want.scheduler)
				}
				if diff := cmp.Diff(p.want.labels, pick(p.pod.Labels, schedulerPodLabels)); diff != "" {
					t.Errorf("%s labels (-want +got):\n%s", p.pod.GenerateName, diff)
				}
				if diff := cmp.Diff(p.want.annotation, pick(p.pod.Annotations, schedulerPodAnnotations)); diff != "" {
					t.Errorf("%s annotations (-want +got):\n%s", p.pod.GenerateName, diff)
				}
				// Ray's own labels stay.
				if p.pod.Labels[rayv1.LabelCluster] != "rc" {
					t.Errorf("%s lost ray.io/cluster: %v", p.pod.GenerateName, p.pod.Labels)
				}
			}
		})
	}
}

// gangCluster has a head of two containers (one with limits only, one asking for less than its limit), a
// group within its bounds, one over its maximum with two hosts per replica, and a suspended one.
func gangCluster() *rayv1.RayCluster {
	c := cluster()
	c.Spec.HeadGroupSpec.Template.Spec.Containers = append(c.Spec.HeadGroupSpec.Template.Spec.Containers, corev1.Container{
		Name: "sidecar", Resources: res(map[string]string{"cpu": "500m", "memory": "1Gi"}, map[string]string{"cpu": "100m"}),
	})
	c.Spec.WorkerGroupSpecs[0].MinReplicas = ptr.To[int32](1)
	worker := func(name string, replicas, minR, maxR, hosts int32, r map[string]string) rayv1.WorkerGroupSpec {
		return rayv1.WorkerGroupSpec{GroupName: name, Replicas: &replicas, MinReplicas: &minR, MaxReplicas: &maxR, NumOfHosts: hosts,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-worker", Resources: res(nil, r)}}}}}
	}
	off := worker("off", 1, 1, 1, 1, map[string]string{"cpu": "100"})
	off.Suspend = ptr.To(true)
	c.Spec.WorkerGroupSpecs = append(c.Spec.WorkerGroupSpecs,
		worker("tpu", 9, 1, 3, 2, map[string]string{"cpu": "8", "google.com/tpu": "4"}), off)
	return c
}

func quantities(t *testing.T, got corev1.ResourceList, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("resources %v, want %v", got, want)
	}
	for k, v := range want {
		if q, ok := got[corev1.ResourceName(k)]; !ok || q.Cmp(resource.MustParse(v)) != 0 {
			t.Errorf("resource %s = %v, want %s (all: %v)", k, got[corev1.ResourceName(k)], v, got)
		}
	}
}

// KubeRay's gang (volcano calculatePodGroupParams, utils.Calculate{Desired,Min}{Replicas,Resources}): the desired
// workers within min and max, but their resources from replicas as written; with the autoscaler, the minimum;
// suspended groups not at all; requests over limits, container by container.
func TestGangSizeAsKubeRay17(t *testing.T) {
	c := gangCluster()
	members, r := GangSize(&c.Spec, false)
	if members != 9 { // head + 2 small + 3×2 tpu
		t.Errorf("members %d, want 9", members)
	}
	// head 1100m/3Gi; small 2 × (2, 4Gi); tpu 9 × 2 × (8, 4 TPU)
	quantities(t, r, map[string]string{"cpu": "149100m", "memory": "11Gi", "google.com/tpu": "72"})

	members, r = GangSize(&c.Spec, true)
	if members != 4 { // head + 1 small + 1×2 tpu
		t.Errorf("autoscaled members %d, want 4", members)
	}
	quantities(t, r, map[string]string{"cpu": "19100m", "memory": "7Gi", "google.com/tpu": "8"})
}

func TestVolcanoPodGroupAsKubeRay17(t *testing.T) {
	c := gangCluster()
	c.Labels = map[string]string{LabelVolcanoQueue: "q1", LabelPriorityClassName: "high",
		LabelVolcanoNetworkTopologyMode: "hard", LabelVolcanoNetworkTopologyHighestTier: "2"}
	c.Annotations = map[string]string{"team": "a"}
	members, r := GangSize(&c.Spec, AutoscalingEnabled(c))
	got, err := VolcanoPodGroup(c, rayv1.GroupVersion.WithKind("RayCluster"), members, r)
	if err != nil {
		t.Fatal(err)
	}
	want := &volcanov1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ray-rc-pg", Annotations: map[string]string{"team": "a"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "rc", UID: "uid-1",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: volcanov1beta1.PodGroupSpec{MinMember: 9, MinResources: &r, Queue: "q1", PriorityClassName: "high",
			NetworkTopology: &volcanov1beta1.NetworkTopologySpec{Mode: "hard", HighestTierAllowed: ptr.To(2)}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PodGroup (-want +got):\n%s", diff)
	}

	c.Labels[LabelVolcanoNetworkTopologyHighestTier] = "two"
	if _, err := VolcanoPodGroup(c, rayv1.GroupVersion.WithKind("RayCluster"), members, r); err == nil ||
		!strings.Contains(err.Error(), "metadata.labels[volcano.sh/network-topology-highest-tier-allowed]") {
		t.Errorf("a tier that is not a number: %v, want an error naming the label", err)
	}
	if VolcanoPodGroupWanted(c) != true {
		t.Error("a RayCluster of its own gets a PodGroup")
	}
	c.Labels[rayv1.LabelOriginCRD] = KindRayJob
	if VolcanoPodGroupWanted(c) {
		t.Error("a RayJob's cluster uses the RayJob's PodGroup")
	}
}

// KubeRay updates an existing PodGroup's minMember and minResources, nothing else, and only when they differ.
func TestVolcanoPodGroupChanged(t *testing.T) {
	want, _ := VolcanoPodGroup(cluster(), rayv1.GroupVersion.WithKind("RayCluster"), 3,
		corev1.ResourceList{"cpu": resource.MustParse("1")})
	got := want.DeepCopy()
	got.Spec.Queue = "theirs"
	got.Spec.MinResources = &corev1.ResourceList{"cpu": resource.MustParse("1000m")}
	if VolcanoPodGroupChanged(got, want) {
		t.Error("1000m is 1 CPU and the queue is not kept in line: no change")
	}
	got.Spec.MinMember = 2
	if !VolcanoPodGroupChanged(got, want) || got.Spec.MinMember != 3 || got.Spec.Queue != "theirs" {
		t.Errorf("minMember not brought back, or more changed: %+v", got.Spec)
	}
	got.Spec.MinResources = nil
	if !VolcanoPodGroupChanged(got, want) || got.Spec.MinResources == nil {
		t.Errorf("minResources not brought back: %+v", got.Spec)
	}
}

func TestSchedulerPluginsPodGroupAsKubeRay17(t *testing.T) {
	c := gangCluster()
	c.Spec.EnableInTreeAutoscaling = ptr.To(true) // KubeRay sizes it by the desired workers even then
	got := SchedulerPluginsPodGroup(c)
	_, r := GangSize(&c.Spec, false)
	want := &spv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rc",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "rc", UID: "uid-1"}}},
		Spec: spv1alpha1.PodGroupSpec{MinMember: 9, MinResources: r},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PodGroup (-want +got):\n%s", diff)
	}
}

func TestYuniKornTaskGroupsPlacement(t *testing.T) {
	c := cluster()
	c.Spec.WorkerGroupSpecs[0].NumOfHosts = 2
	c.Spec.WorkerGroupSpecs[0].MinReplicas = ptr.To[int32](3)
	c.Spec.WorkerGroupSpecs[0].Template.Spec.NodeSelector = map[string]string{"pool": "gpu"}
	c.Spec.WorkerGroupSpecs[0].Template.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
	submitter := &corev1.PodSpec{Containers: []corev1.Container{{Resources: res(nil, map[string]string{"cpu": "500m"})}}}
	got := MarshalTaskGroups(append(ClusterTaskGroups(&c.Spec), SubmitterTaskGroup(submitter)))
	want := `[{"minResource":{"cpu":"1","memory":"2Gi"},"name":"headgroup","minMember":1},` +
		`{"minResource":{"cpu":"2","memory":"4Gi"},"nodeSelector":{"pool":"gpu"},"name":"small","tolerations":[{"key":"gpu","operator":"Exists"}],"minMember":6},` +
		`{"minResource":{"cpu":"500m"},"name":"submittergroup","minMember":1}]`
	if got != want {
		t.Errorf("task groups\n got %s\nwant %s", got, want)
	}
}

func TestIgnoredSchedulerFields(t *testing.T) {
	c := cluster()
	c.Labels = map[string]string{rayv1.LabelSchedulerName: "volcano", LabelVolcanoQueue: "q", LabelGangScheduling: "true",
		LabelKaiQueue: "k"}
	c.Annotations = map[string]string{AnnotationYuniKornTaskGroups: "[]"}
	tests := []struct {
		scheduler string
		want      []string
	}{
		{"", []string{
			"metadata.labels[ray.io/scheduler-name]=volcano (the operator runs none: --batch-scheduler is unset)",
			"metadata.labels[ray.io/gang-scheduling-enabled] (read by yunikorn or scheduler-plugins; the operator runs none: --batch-scheduler is unset)",
			"metadata.labels[volcano.sh/queue-name] (read by volcano; the operator runs none: --batch-scheduler is unset)",
			"metadata.annotations[yunikorn.apache.org/task-groups] (read by yunikorn; the operator runs none: --batch-scheduler is unset)",
			"metadata.labels[kai.scheduler/queue] (read by kai-scheduler; the operator runs none: --batch-scheduler is unset)",
		}},
		{"volcano", []string{
			"metadata.labels[ray.io/gang-scheduling-enabled] (read by yunikorn or scheduler-plugins; the operator runs --batch-scheduler=volcano)",
			"metadata.annotations[yunikorn.apache.org/task-groups] (read by yunikorn; the operator runs --batch-scheduler=volcano)",
			"metadata.labels[kai.scheduler/queue] (read by kai-scheduler; the operator runs --batch-scheduler=volcano)",
		}},
		{"yunikorn", []string{
			"metadata.labels[ray.io/scheduler-name]=volcano (the operator runs --batch-scheduler=yunikorn)",
			"metadata.labels[volcano.sh/queue-name] (read by volcano; the operator runs --batch-scheduler=yunikorn)",
			"metadata.labels[kai.scheduler/queue] (read by kai-scheduler; the operator runs --batch-scheduler=yunikorn)",
		}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, IgnoredSchedulerFields(c, tc.scheduler)); diff != "" {
			t.Errorf("scheduler %q (-want +got):\n%s", tc.scheduler, diff)
		}
	}
}
