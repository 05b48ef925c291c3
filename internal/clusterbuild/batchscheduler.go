package clusterbuild

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	spv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// Batch schedulers, by the names KubeRay's --batch-scheduler takes (KubeRay v1.7). The operator has at most one;
// every RayCluster (and RayJob) it reconciles is handed to it.
const (
	SchedulerVolcano  = "volcano"
	SchedulerYuniKorn = "yunikorn"
	SchedulerPlugins  = "scheduler-plugins"
	SchedulerKai      = "kai-scheduler"
)

// BatchSchedulers are the names --batch-scheduler accepts.
var BatchSchedulers = []string{SchedulerVolcano, SchedulerYuniKorn, SchedulerPlugins, SchedulerKai}

// Labels and annotations the batch schedulers read on a RayCluster or RayJob, and write on its pods.
const (
	// LabelGangScheduling, present with any value, asks YuniKorn and scheduler-plugins for gang scheduling.
	LabelGangScheduling = AnnotationGangScheduling
	// LabelPriorityClassName is Volcano's: the PodGroup's priority class, copied to the pods.
	LabelPriorityClassName = "ray.io/priority-class-name"

	LabelVolcanoQueue                      = "volcano.sh/queue-name"
	LabelVolcanoNetworkTopologyMode        = "volcano.sh/network-topology-mode"
	LabelVolcanoNetworkTopologyHighestTier = "volcano.sh/network-topology-highest-tier-allowed"
	// AnnotationVolcanoGroupName names a pod's PodGroup; AnnotationVolcanoTaskSpec its task (the Ray group).
	AnnotationVolcanoGroupName = volcanov1beta1.KubeGroupNameAnnotationKey
	AnnotationVolcanoTaskSpec  = "volcano.sh/task-spec"

	LabelYuniKornAppID = "yunikorn.apache.org/app-id"
	LabelYuniKornQueue = "yunikorn.apache.org/queue"
	// The pod labels older YuniKorn releases read the application and queue from.
	LabelYuniKornPodAppID = "applicationId"
	LabelYuniKornPodQueue = "queue"
	// AnnotationYuniKornTaskGroups lists the gang's task groups (JSON); set on the RayCluster, it is used as it is.
	AnnotationYuniKornTaskGroups    = "yunikorn.apache.org/task-groups"
	AnnotationYuniKornTaskGroupName = "yunikorn.apache.org/task-group-name"

	LabelKaiQueue = "kai.scheduler/queue"

	// LabelSchedulerPluginsPodGroup names a pod's scheduler-plugins PodGroup.
	LabelSchedulerPluginsPodGroup = "scheduling.x-k8s.io/pod-group"
	// schedulerPluginsPodScheduler is the schedulerName of scheduler-plugins' second-scheduler install.
	schedulerPluginsPodScheduler = "scheduler-plugins-scheduler"

	// SubmitterGroupName is the group (task) name of a RayJob's submitter pod (KubeRay's
	// utils.RayNodeSubmitterGroupLabelValue, v1.5.0 to v1.7.0): volcano.sh/task-spec, yunikorn.apache.org/task-group-name
	// and its task group.
	SubmitterGroupName = "submittergroup"
)

// ValidBatchScheduler says whether name is one --batch-scheduler accepts.
func ValidBatchScheduler(name string) bool { return slices.Contains(BatchSchedulers, name) }

// PodSchedulerName is the spec.schedulerName the scheduler's pods get.
func PodSchedulerName(scheduler string) string {
	if scheduler == SchedulerPlugins {
		return schedulerPluginsPodScheduler
	}
	return scheduler
}

// GangScheduling says whether the object asks for gang scheduling (YuniKorn, scheduler-plugins): the label's
// presence, whatever its value, as KubeRay reads it.
func GangScheduling(o metav1.Object) bool {
	_, ok := o.GetLabels()[LabelGangScheduling]
	return ok
}

// AddSchedulerMetadata adds to child what scheduler needs to see on it: the schedulerName of a pod or pod template,
// and the labels and annotations that tie it to its parent's queue, priority and gang. parent is the RayCluster or
// RayJob the child belongs to; group is the child's Ray group (headgroup, a worker group, submitter; "" for a
// RayCluster a RayJob makes); taskGroups gives YuniKorn's gang for the parent, asked for only when needed.
func AddSchedulerMetadata(scheduler string, parent, child metav1.Object, group string, taskGroups func() []YuniKornTaskGroup) {
	switch scheduler {
	case SchedulerVolcano:
		copyLabel(parent, child, LabelVolcanoQueue, LabelVolcanoQueue)
		copyLabel(parent, child, LabelPriorityClassName, LabelPriorityClassName)
		setAnnotation(child, AnnotationVolcanoGroupName, VolcanoPodGroupName(parent))
		setAnnotation(child, AnnotationVolcanoTaskSpec, group)
	case SchedulerYuniKorn:
		copyLabel(parent, child, LabelYuniKornAppID, LabelYuniKornPodAppID)
		copyLabel(parent, child, LabelYuniKornQueue, LabelYuniKornPodQueue)
		if GangScheduling(parent) {
			groups := parent.GetAnnotations()[AnnotationYuniKornTaskGroups]
			if groups == "" && taskGroups != nil {
				groups = MarshalTaskGroups(taskGroups())
			}
			setAnnotation(child, AnnotationYuniKornTaskGroups, groups)
			if group != "" {
				setAnnotation(child, AnnotationYuniKornTaskGroupName, group)
			}
		}
	case SchedulerPlugins:
		if GangScheduling(parent) {
			setLabel(child, LabelSchedulerPluginsPodGroup, parent.GetName())
		}
	case SchedulerKai:
		copyLabel(parent, child, LabelKaiQueue, LabelKaiQueue)
	default:
		return
	}
	switch o := child.(type) {
	case *corev1.Pod:
		o.Spec.SchedulerName = PodSchedulerName(scheduler)
	case *corev1.PodTemplateSpec:
		o.Spec.SchedulerName = PodSchedulerName(scheduler)
	}
}

// copyLabel copies the parent's non-empty label from to the child's label to.
func copyLabel(parent, child metav1.Object, from, to string) {
	if v := parent.GetLabels()[from]; v != "" {
		setLabel(child, to, v)
	}
}

func setLabel(o metav1.Object, k, v string) {
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[k] = v
	o.SetLabels(l)
}

func setAnnotation(o metav1.Object, k, v string) {
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	o.SetAnnotations(a)
}

// YuniKornTaskGroup is one member of a YuniKorn gang, in the shape YuniKorn's k8s shim reads from the
// yunikorn.apache.org/task-groups annotation.
type YuniKornTaskGroup struct {
	MinResource               map[string]resource.Quantity      `json:"minResource"`
	NodeSelector              map[string]string                 `json:"nodeSelector,omitempty"`
	Affinity                  *corev1.Affinity                  `json:"affinity,omitempty"`
	Name                      string                            `json:"name"`
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	Tolerations               []corev1.Toleration               `json:"tolerations,omitempty"`
	MinMember                 int32                             `json:"minMember"`
}

// ClusterTaskGroups is the YuniKorn gang of a cluster spec: the head (one pod), then each worker group with its
// minReplicas × numOfHosts pods, each with one pod's resources and placement.
func ClusterTaskGroups(spec *rayv1.RayClusterSpec) []YuniKornTaskGroup {
	h := &spec.HeadGroupSpec.Template.Spec
	groups := []YuniKornTaskGroup{taskGroup(rayv1.HeadGroupName, 1, h)}
	for i := range spec.WorkerGroupSpecs {
		g := &spec.WorkerGroupSpecs[i]
		groups = append(groups, taskGroup(g.GroupName, ptr.Deref(g.MinReplicas, 0)*groupHosts(g), &g.Template.Spec))
	}
	return groups
}

// SubmitterTaskGroup is the task group of a RayJob's submitter pod, appended to its cluster's.
func SubmitterTaskGroup(submitter *corev1.PodSpec) YuniKornTaskGroup {
	return taskGroup(SubmitterGroupName, 1, submitter)
}

func taskGroup(name string, members int32, spec *corev1.PodSpec) YuniKornTaskGroup {
	res := map[string]resource.Quantity{}
	for k, v := range PodResource(spec) {
		res[string(k)] = v
	}
	return YuniKornTaskGroup{Name: name, MinMember: members, MinResource: res,
		NodeSelector: spec.NodeSelector, Tolerations: spec.Tolerations, Affinity: spec.Affinity}
}

// MarshalTaskGroups is the value of the yunikorn.apache.org/task-groups annotation.
func MarshalTaskGroups(groups []YuniKornTaskGroup) string {
	b, err := json.Marshal(groups)
	if err != nil { // maps of strings and quantities, and API types: cannot fail
		panic(err)
	}
	return string(b)
}

// groupHosts is numOfHosts, which the CRD defaults to 1.
func groupHosts(g *rayv1.WorkerGroupSpec) int32 { return max(g.NumOfHosts, 1) }

// PodResource is what one pod of spec asks for: each container's requests, or its limits where it requests
// nothing of a resource, summed over the containers (init containers and overhead are not counted, as in KubeRay).
func PodResource(spec *corev1.PodSpec) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := range spec.Containers {
		r := &spec.Containers[i].Resources
		for name, q := range r.Requests {
			addQuantity(out, name, q, 1)
		}
		for name, q := range r.Limits {
			if _, ok := r.Requests[name]; !ok {
				addQuantity(out, name, q, 1)
			}
		}
	}
	return out
}

// addQuantity adds n × q to list[name] (the key is kept even when n is 0, as KubeRay keeps it).
func addQuantity(list corev1.ResourceList, name corev1.ResourceName, q resource.Quantity, n int64) {
	q = q.DeepCopy()
	if n != 1 {
		q.Mul(n)
	}
	if total, ok := list[name]; ok {
		total = total.DeepCopy()
		total.Add(q)
		q = total
	}
	list[name] = q
}

// AddResources adds b into a.
func AddResources(a, b corev1.ResourceList) {
	for name, q := range b {
		addQuantity(a, name, q, 1)
	}
}

// GangSize is the gang a batch scheduler waits for before it starts a cluster: the head plus the workers, and what
// they ask for. Without the autoscaler the workers are the desired ones (replicas within min and max, times
// numOfHosts; the resources count replicas as written, as KubeRay does); with it, the minimum. Suspended groups
// count for nothing.
func GangSize(spec *rayv1.RayClusterSpec, autoscaled bool) (int32, corev1.ResourceList) {
	members := int64(1)
	res := PodResource(&spec.HeadGroupSpec.Template.Spec)
	for i := range spec.WorkerGroupSpecs {
		g := &spec.WorkerGroupSpecs[i]
		if ptr.Deref(g.Suspend, false) {
			continue
		}
		minR := ptr.Deref(g.MinReplicas, 0)
		pods, resPods := minR, minR
		if !autoscaled {
			pods = min(max(ptr.Deref(g.Replicas, minR), minR), ptr.Deref(g.MaxReplicas, math.MaxInt32))
			resPods = ptr.Deref(g.Replicas, 0)
		}
		members += int64(pods) * int64(groupHosts(g))
		for name, q := range PodResource(&g.Template.Spec) {
			addQuantity(res, name, q, int64(resPods)*int64(groupHosts(g)))
		}
	}
	return int32(min(members, math.MaxInt32)), res
}

// VolcanoPodGroupName is the Volcano PodGroup of a RayCluster or RayJob: ray-<name>-pg, where a RayJob's cluster
// shares its RayJob's.
func VolcanoPodGroupName(o metav1.Object) string {
	name := o.GetName()
	if l := o.GetLabels(); l[rayv1.LabelOriginCRD] == KindRayJob && l[rayv1.LabelOriginCRName] != "" {
		name = l[rayv1.LabelOriginCRName]
	}
	return "ray-" + name + "-pg"
}

// VolcanoPodGroupWanted says whether a RayCluster gets a Volcano PodGroup of its own: not when a RayJob made it
// (the RayJob's PodGroup, which also counts the submitter, holds its pods).
func VolcanoPodGroupWanted(c *rayv1.RayCluster) bool { return originCRD(c) != KindRayJob }

// VolcanoPodGroup is the PodGroup of owner (a RayCluster or RayJob, of kind gvk) gathering members pods that ask
// for res: in owner's queue and priority class (its labels), with its annotations and network topology, controlled
// by owner. A network-topology tier label that is not a whole number is an error naming it.
func VolcanoPodGroup(owner metav1.Object, gvk schema.GroupVersionKind, members int32, res corev1.ResourceList) (*volcanov1beta1.PodGroup, error) {
	l := owner.GetLabels()
	pg := &volcanov1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       owner.GetNamespace(),
			Name:            VolcanoPodGroupName(owner),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, gvk)},
			Annotations:     mergeMaps(owner.GetAnnotations(), nil),
		},
		Spec: volcanov1beta1.PodGroupSpec{
			MinMember:         members,
			MinResources:      &res,
			Queue:             l[LabelVolcanoQueue],
			PriorityClassName: l[LabelPriorityClassName],
		},
	}
	if mode, ok := l[LabelVolcanoNetworkTopologyMode]; ok {
		pg.Spec.NetworkTopology = &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.NetworkTopologyMode(mode)}
		if tier, ok := l[LabelVolcanoNetworkTopologyHighestTier]; ok {
			n, err := strconv.Atoi(tier)
			if err != nil {
				return nil, fmt.Errorf("metadata.labels[%s]: %q is not a whole number", LabelVolcanoNetworkTopologyHighestTier, tier)
			}
			pg.Spec.NetworkTopology.HighestTierAllowed = &n
		}
	}
	return pg, nil
}

// VolcanoPodGroupChanged says whether got's gang (the only fields KubeRay keeps in line) differs from want's, and if
// so sets them to want's.
func VolcanoPodGroupChanged(got, want *volcanov1beta1.PodGroup) bool {
	if got.Spec.MinMember == want.Spec.MinMember && got.Spec.MinResources != nil && resourcesEqual(*got.Spec.MinResources, *want.Spec.MinResources) {
		return false
	}
	got.Spec.MinMember = want.Spec.MinMember
	got.Spec.MinResources = ptr.To(want.Spec.MinResources.DeepCopy())
	return true
}

// resourcesEqual: the same resources in the same amounts (1000m equals 1).
func resourcesEqual(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		if o, ok := b[name]; !ok || q.Cmp(o) != 0 {
			return false
		}
	}
	return true
}

// SchedulerPluginsPodGroup is the coscheduling PodGroup of a RayCluster that asks for gang scheduling: named after
// the cluster, the head and the desired workers, what they ask for. KubeRay creates it once and never changes it,
// and its owner reference to the cluster is not a controller reference.
func SchedulerPluginsPodGroup(c *rayv1.RayCluster) *spv1alpha1.PodGroup {
	members, res := GangSize(&c.Spec, false)
	return &spv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: c.Namespace,
			Name:      c.Name,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: rayv1.GroupVersion.String(), Kind: KindRayCluster, Name: c.Name, UID: c.UID,
			}},
		},
		Spec: spv1alpha1.PodGroupSpec{MinMember: members, MinResources: res},
	}
}

// schedulerKeys are the RayCluster labels and annotations that only one of the batch schedulers reads (or, for
// the pod-group label, writes on the pods), by scheduler.
var schedulerKeys = []struct {
	key        string
	annotation bool
	schedulers []string
}{
	{LabelGangScheduling, false, []string{SchedulerYuniKorn, SchedulerPlugins}},
	{LabelPriorityClassName, false, []string{SchedulerVolcano}},
	{LabelVolcanoQueue, false, []string{SchedulerVolcano}},
	{LabelVolcanoNetworkTopologyMode, false, []string{SchedulerVolcano}},
	{LabelVolcanoNetworkTopologyHighestTier, false, []string{SchedulerVolcano}},
	{LabelYuniKornQueue, false, []string{SchedulerYuniKorn}},
	{LabelYuniKornAppID, false, []string{SchedulerYuniKorn}},
	{AnnotationYuniKornTaskGroups, true, []string{SchedulerYuniKorn}},
	{LabelKaiQueue, false, []string{SchedulerKai}},
	{LabelSchedulerPluginsPodGroup, false, []string{SchedulerPlugins}},
}

// IgnoredSchedulerFields names the scheduler labels and annotations of o that mean nothing under the operator's
// batch scheduler ("" for none), for the UnsupportedFeature condition: those of another scheduler, and a
// ray.io/scheduler-name that names one the operator does not run (KubeRay v1.7 selects the scheduler only by its
// --batch-scheduler flag).
func IgnoredSchedulerFields(o metav1.Object, scheduler string) []string {
	why := "the operator runs none: --batch-scheduler is unset"
	if scheduler != "" {
		why = "the operator runs --batch-scheduler=" + scheduler
	}
	var out []string
	if v, ok := o.GetLabels()[rayv1.LabelSchedulerName]; ok && v != scheduler {
		out = append(out, fmt.Sprintf("metadata.labels[%s]=%s (%s)", rayv1.LabelSchedulerName, v, why))
	}
	for _, k := range schedulerKeys {
		m, where := o.GetLabels(), "labels"
		if k.annotation {
			m, where = o.GetAnnotations(), "annotations"
		}
		if _, ok := m[k.key]; ok && !slices.Contains(k.schedulers, scheduler) {
			out = append(out, fmt.Sprintf("metadata.%s[%s] (read by %s; %s)", where, k.key, strings.Join(k.schedulers, " or "), why))
		}
	}
	return out
}

// addClusterSchedulerMetadata hands a pod of c's group to the batch scheduler.
func addClusterSchedulerMetadata(c *rayv1.RayCluster, pod *corev1.Pod, group, scheduler string) {
	if scheduler == "" {
		return
	}
	AddSchedulerMetadata(scheduler, c, pod, group, func() []YuniKornTaskGroup { return ClusterTaskGroups(&c.Spec) })
}
