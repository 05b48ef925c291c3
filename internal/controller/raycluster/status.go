package raycluster

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
)

// Condition types Manta adds to KubeRay's.
const (
	// ConditionUnsupportedFeature is True while the spec uses fields Manta does not implement; the message names them.
	ConditionUnsupportedFeature = "UnsupportedFeature"
	// ConditionDefaultPodTemplateFailure is True while the operator's default PodTemplate is missing or invalid.
	ConditionDefaultPodTemplateFailure = "DefaultPodTemplateFailure"
	// ConditionInvalidSpec is True when the cluster cannot be reconciled as written; the operator stops there.
	ConditionInvalidSpec = "InvalidRayClusterSpec"
)

// Reasons of Manta's conditions and of events.
const (
	ReasonUnsupportedFields         = "UnsupportedFields"
	ReasonDefaultTemplateNotFound   = "DefaultPodTemplateNotFound"
	ReasonDefaultTemplateInvalid    = "DefaultPodTemplateInvalid"
	ReasonUpgradeStrategyNotAllowed = "UpgradeStrategyNotAllowed"
	ReasonInvalidSpec               = "InvalidSpec"
	ReasonSuspending                = "RayClusterSuspending"
	ReasonSuspended                 = "RayClusterSuspended"
	ReasonHeadPodNotReady           = "HeadPodNotReady"
	// ReasonUnknown: the head pod has no PodReady condition yet.
	ReasonUnknown = "Unknown"
	// ReasonRedisCleanupSkipped: a deleted cluster's GCS fault-tolerance finalizer was removed without a Redis cleanup.
	ReasonRedisCleanupSkipped = "RedisCleanupSkipped"
)

// Event reasons: KubeRay's, because users filter events on them (kubectl get events --field-selector reason=...).
const (
	EventCreatedHeadPod               = "CreatedHeadPod"
	EventFailedToCreateHeadPod        = "FailedToCreateHeadPod"
	EventDeletedHeadPod               = "DeletedHeadPod"
	EventFailedToDeleteHeadPod        = "FailedToDeleteHeadPod"
	EventCreatedWorkerPod             = "CreatedWorkerPod"
	EventFailedToCreateWorkerPod      = "FailedToCreateWorkerPod"
	EventDeletedWorkerPod             = "DeletedWorkerPod"
	EventFailedToDeleteWorkerPod      = "FailedToDeleteWorkerPod"
	EventDeletedPod                   = "DeletedPod"
	EventFailedToDeletePodCollection  = "FailedToDeletePodCollection"
	EventCreatedService               = "CreatedService"
	EventFailedToCreateService        = "FailedToCreateService"
	EventUpdatedService               = "UpdatedService"
	EventFailedToUpdateService        = "FailedToUpdateService"
	EventDeletedService               = "DeletedService"
	EventFailedToDeleteService        = "FailedToDeleteService"
	EventCreatedServiceAccount        = "CreatedServiceAccount"
	EventFailedToCreateServiceAccount = "FailedToCreateServiceAccount"
	EventCreatedRole                  = "CreatedRole"
	EventFailedToCreateRole           = "FailedToCreateRole"
	EventCreatedRoleBinding           = "CreatedRoleBinding"
	EventFailedToCreateRoleBinding    = "FailedToCreateRoleBinding"
)

// Event reasons of the autoscaler's RBAC that KubeRay has no word for (it ignores an existing object).
const (
	// EventAutoscalerRBACNotOwned: an object under a name the autoscaler's RBAC needs is not this cluster's; the
	// head pod waits, and nothing is bound.
	EventAutoscalerRBACNotOwned    = "AutoscalerRBACNotOwned"
	EventUpdatedRole               = "UpdatedRole"
	EventFailedToUpdateRole        = "FailedToUpdateRole"
	EventUpdatedRoleBinding        = "UpdatedRoleBinding"
	EventFailedToUpdateRoleBinding = "FailedToUpdateRoleBinding"
	EventDeletedRoleBinding        = "DeletedRoleBinding"
)

// deleteEvents are the event reasons of a deletion, by the ReplicaFailure reason it reports on failure.
var deleteEvents = map[string][2]string{
	rayv1.FailedDeleteHeadPod:   {EventDeletedHeadPod, EventFailedToDeleteHeadPod},
	rayv1.FailedDeleteWorkerPod: {EventDeletedWorkerPod, EventFailedToDeleteWorkerPod},
	rayv1.FailedDeleteAllPods:   {EventDeletedPod, EventFailedToDeletePodCollection},
}

// failure is what went wrong creating or deleting pods in one reconcile (ReplicaFailure).
type failure struct {
	reason, message string
}

// observed is what one reconcile saw and did; computeStatus turns it into the status.
type observed struct {
	pods        []corev1.Pod // the cluster's pods that are not terminating
	headService *corev1.Service
	failure     *failure
	unsupported []string
	templateErr *failure
	invalid     *failure
	reconcileOK bool
	// noConditions: the RayClusterStatusConditions gate is off (kubeRayConditions); noIndexing: RayMultiHostIndexing
	// is off (planGroup).
	noConditions, noIndexing bool
	// podsListed: pods holds the cluster's pods as listed (status.reason is computed from them, starttrouble.go).
	podsListed bool
}

// kubeRayConditions are the conditions KubeRay writes only under its RayClusterStatusConditions gate. With the gate
// off Manta writes none of them and drops those an earlier run wrote: left, they would go stale (a HeadPodReady
// True over a dead head). Manta's own conditions, which report a spec it refuses, stay.
var kubeRayConditions = []string{string(rayv1.HeadPodReady), string(rayv1.RayClusterProvisioned), string(rayv1.RayClusterReplicaFailure),
	string(rayv1.RayClusterSuspending), string(rayv1.RayClusterSuspended)}

// computeStatus is the whole status of c from what the reconcile observed. It is pure: now is passed in.
func computeStatus(c *rayv1.RayCluster, o observed, now metav1.Time) rayv1.RayClusterStatus {
	s := *c.Status.DeepCopy()
	s.ObservedGeneration = c.Generation
	setCond := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg,
			ObservedGeneration: c.Generation, LastTransitionTime: now})
	}
	kubeRayCond := setCond
	if o.noConditions {
		for _, t := range kubeRayConditions {
			meta.RemoveStatusCondition(&s.Conditions, t)
		}
		kubeRayCond = func(string, metav1.ConditionStatus, string, string) {}
	}
	setOrRemove(&s, setCond, ConditionInvalidSpec, o.invalid)
	if len(o.unsupported) > 0 {
		setCond(ConditionUnsupportedFeature, metav1.ConditionTrue, ReasonUnsupportedFields, clusterbuild.UnsupportedMessage(o.unsupported))
	} else {
		meta.RemoveStatusCondition(&s.Conditions, ConditionUnsupportedFeature)
	}
	if o.invalid != nil {
		return s
	}
	setOrRemove(&s, setCond, ConditionDefaultPodTemplateFailure, o.templateErr)
	setOrRemove(&s, kubeRayCond, string(rayv1.RayClusterReplicaFailure), o.failure)

	desired := setDesired(&s, c)
	pods := countPods(o.pods)
	s.ReadyWorkerReplicas, s.AvailableWorkerReplicas = pods.ready, pods.available
	setHead(&s, pods.head, o.headService)
	if o.podsListed {
		s.Reason = startTroubleReason(o.pods)
	}
	if pods.head == nil {
		kubeRayCond(string(rayv1.HeadPodReady), metav1.ConditionFalse, rayv1.HeadPodNotFound, "Head Pod not found")
	} else {
		status, reason, msg := headPodReadiness(pods.head)
		kubeRayCond(string(rayv1.HeadPodReady), status, reason, msg)
	}
	setState(&s, c, o, pods, desired, now, kubeRayCond)
	return s
}

// condSetter sets one condition of the computed status, observed at the cluster's generation, now.
type condSetter func(t string, status metav1.ConditionStatus, reason, msg string)

// setOrRemove sets condition t to True with the failure's reason and message, or removes it when there is none.
func setOrRemove(s *rayv1.RayClusterStatus, setCond condSetter, t string, f *failure) {
	if f == nil {
		meta.RemoveStatusCondition(&s.Conditions, t)
		return
	}
	setCond(t, metav1.ConditionTrue, f.reason, f.message)
}

// setDesired records what the spec asks for once running, as KubeRay reports it: a suspended cluster still says
// what it will want on resume (and quota tools read it that way). It returns the desired worker pods.
func setDesired(s *rayv1.RayClusterStatus, c *rayv1.RayCluster) int32 {
	// (A shallow copy: both only read it.)
	running := *c
	running.Spec.Suspend = nil
	desired, minR, maxR := workerReplicaCounts(&running)
	s.DesiredWorkerReplicas, s.MinWorkerReplicas, s.MaxWorkerReplicas = desired, minR, maxR
	s.DesiredCPU, s.DesiredMemory, s.DesiredGPU, s.DesiredTPU = desiredResources(&running)
	return desired
}

// podCounts summarises the cluster's pods that are not terminating.
type podCounts struct {
	head *corev1.Pod
	// ready and available count the workers Running and Ready, and Running.
	ready, available int32
	// allReady: every pod, the head included, is Running and Ready.
	allReady bool
}

func countPods(pods []corev1.Pod) podCounts {
	n := podCounts{allReady: true}
	for i := range pods {
		p := &pods[i]
		r := clusterbuild.PodRunningAndReady(p)
		n.allReady = n.allReady && r
		if p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead {
			n.head = p
			continue
		}
		if p.Status.Phase == corev1.PodRunning {
			n.available++
		}
		if r {
			n.ready++
		}
	}
	return n
}

// setHead records the head pod's and head Service's names and addresses, and the Service's endpoints by port name.
func setHead(s *rayv1.RayClusterStatus, head *corev1.Pod, svc *corev1.Service) {
	s.Head = rayv1.HeadInfo{}
	if head != nil {
		s.Head.PodName, s.Head.PodIP = head.Name, head.Status.PodIP
	}
	s.Endpoints = nil
	if svc == nil {
		return
	}
	s.Head.ServiceName = svc.Name
	s.Head.ServiceIP = svc.Spec.ClusterIP
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		s.Head.ServiceIP = s.Head.PodIP
	}
	for _, p := range svc.Spec.Ports {
		if s.Endpoints == nil {
			s.Endpoints = map[string]string{}
		}
		switch {
		case p.NodePort != 0:
			s.Endpoints[p.Name] = itoa(p.NodePort)
		case p.TargetPort.String() != "0" && p.TargetPort.String() != "":
			s.Endpoints[p.Name] = p.TargetPort.String()
		default:
			s.Endpoints[p.Name] = itoa(p.Port)
		}
	}
}

// setState sets the Provisioned, Suspending and Suspended conditions and the state (with its transition time).
// Suspension is one-way until it completes, as in KubeRay: once Suspending, every pod is deleted even if
// spec.suspend is cleared meanwhile; only a Suspended cluster resumes. Without the conditions (o.noConditions,
// setCond does nothing) there is no phase to keep, as in KubeRay: Suspended once spec.suspend has left no pod.
func setState(s *rayv1.RayClusterStatus, c *rayv1.RayCluster, o observed, pods podCounts, desired int32, now metav1.Time, setCond condSetter) {
	suspend := ptr.Deref(c.Spec.Suspend, false)
	phase := suspendPhaseOf(c, o.noConditions)
	goingDown := phase == suspending || (phase != suspended && suspend)
	allUp := !goingDown && phase != suspended && o.reconcileOK && pods.head != nil && len(o.pods) == int(desired)+1 && pods.allReady
	if !meta.IsStatusConditionTrue(s.Conditions, string(rayv1.RayClusterProvisioned)) && phase != suspended {
		if allUp {
			setCond(string(rayv1.RayClusterProvisioned), metav1.ConditionTrue, rayv1.AllPodRunningAndReadyFirstTime, "All Ray Pods are ready for the first time")
		} else {
			setCond(string(rayv1.RayClusterProvisioned), metav1.ConditionFalse, rayv1.RayClusterPodsProvisioning, "RayCluster Pods are being provisioned for first time")
		}
	}
	state := s.State
	switch {
	case goingDown && len(o.pods) == 0:
		state = rayv1.Suspended
		setCond(string(rayv1.RayClusterProvisioned), metav1.ConditionFalse, rayv1.RayClusterPodsProvisioning, "RayCluster has been suspended")
		setCond(string(rayv1.RayClusterSuspending), metav1.ConditionFalse, ReasonSuspending, "")
		setCond(string(rayv1.RayClusterSuspended), metav1.ConditionTrue, ReasonSuspended, "")
	case goingDown:
		setCond(string(rayv1.RayClusterSuspended), metav1.ConditionFalse, ReasonSuspended, "")
		setCond(string(rayv1.RayClusterSuspending), metav1.ConditionTrue, ReasonSuspending, "")
	case phase == suspended && suspend:
		state = rayv1.Suspended
	default:
		setCond(string(rayv1.RayClusterSuspended), metav1.ConditionFalse, ReasonSuspended, "")
		setCond(string(rayv1.RayClusterSuspending), metav1.ConditionFalse, ReasonSuspending, "")
		if state == rayv1.Suspended {
			state = ""
		}
		if allUp {
			state = rayv1.Ready
		}
	}
	if state != s.State {
		s.State = state
		if s.StateTransitionTimes == nil {
			s.StateTransitionTimes = map[rayv1.ClusterState]*metav1.Time{}
		}
		if state != "" {
			s.StateTransitionTimes[state] = ptr.To(now)
		}
	}
}

type suspendPhase int

const (
	running suspendPhase = iota
	suspending
	suspended
)

// suspendPhaseOf reads where a suspension stands from the conditions the last reconcile wrote; without them
// (noConditions) the cluster is always running, and spec.suspend alone decides.
func suspendPhaseOf(c *rayv1.RayCluster, noConditions bool) suspendPhase {
	switch {
	case noConditions:
		return running
	case meta.IsStatusConditionTrue(c.Status.Conditions, string(rayv1.RayClusterSuspending)):
		return suspending
	case meta.IsStatusConditionTrue(c.Status.Conditions, string(rayv1.RayClusterSuspended)):
		return suspended
	}
	return running
}

// headPodReadiness is HeadPodReady from the head pod: its PodReady condition, and while it is not ready the reason
// a container is waiting (ImagePullBackOff, CrashLoopBackOff, ...), which says more than ContainersNotReady.
func headPodReadiness(head *corev1.Pod) (metav1.ConditionStatus, string, string) {
	status, reason, msg := metav1.ConditionFalse, ReasonUnknown, ""
	for _, cond := range head.Status.Conditions {
		if cond.Type != corev1.PodReady {
			continue
		}
		status, msg = metav1.ConditionStatus(cond.Status), cond.Message
		switch {
		case cond.Reason != "":
			reason = cond.Reason
		case cond.Status == corev1.ConditionTrue:
			reason = rayv1.HeadPodRunningAndReady
		}
	}
	if status == metav1.ConditionTrue {
		return status, reason, msg
	}
	for _, cs := range append(slices.Clone(head.Status.InitContainerStatuses), head.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" {
			return status, w.Reason, fmt.Sprintf("container %s: %s", cs.Name, w.Message)
		}
	}
	return status, reason, msg
}

// itoa renders a port in decimal digits, as KubeRay does (a Quantity would say 32k for 32000).
func itoa(i int32) string { return strconv.Itoa(int(i)) }

// groupReplicas is the number of replicas a group wants: replicas clamped to [min, max], 0 when suspended.
func groupReplicas(c *rayv1.RayCluster, g *rayv1.WorkerGroupSpec) int32 {
	if ptr.Deref(c.Spec.Suspend, false) || ptr.Deref(g.Suspend, false) {
		return 0
	}
	r := ptr.Deref(g.Replicas, 0)
	if g.MinReplicas != nil && r < *g.MinReplicas {
		r = *g.MinReplicas
	}
	if g.MaxReplicas != nil && r > *g.MaxReplicas {
		r = *g.MaxReplicas
	}
	return r
}

func hosts(g *rayv1.WorkerGroupSpec) int64 {
	if g.NumOfHosts < 1 {
		return 1
	}
	return int64(g.NumOfHosts)
}

// groupPods is the number of worker pods a group wants.
func groupPods(c *rayv1.RayCluster, g *rayv1.WorkerGroupSpec) int {
	return int(saturate(int64(groupReplicas(c, g)) * hosts(g)))
}

func workerReplicaCounts(c *rayv1.RayCluster) (desired, minR, maxR int32) {
	var d, mn, mx int64
	for i := range c.Spec.WorkerGroupSpecs {
		g := &c.Spec.WorkerGroupSpecs[i]
		h := hosts(g)
		if ptr.Deref(g.Suspend, false) {
			// A suspended group (a RayJob's DeleteWorkers rule) counts for nothing, its bounds neither, as in KubeRay.
			continue
		}
		d += int64(groupReplicas(c, g)) * h
		mn += int64(ptr.Deref(g.MinReplicas, 0)) * h
		mx += int64(ptr.Deref(g.MaxReplicas, math.MaxInt32)) * h
	}
	if ptr.Deref(c.Spec.Suspend, false) {
		d = 0
	}
	return saturate(d), saturate(mn), saturate(mx)
}

func saturate(v int64) int32 {
	if v > math.MaxInt32 {
		return math.MaxInt32
	}
	return int32(v)
}

// desiredResources sums the requests (or limits where no request is set) of the pods the cluster wants.
func desiredResources(c *rayv1.RayCluster) (cpu, mem, gpu, tpu resource.Quantity) {
	add := func(spec *corev1.PodSpec, n int64) {
		if n == 0 {
			return
		}
		for _, ctr := range spec.Containers {
			for name, q := range podRequests(ctr) {
				total := q.DeepCopy()
				total.Mul(n)
				switch {
				case name == corev1.ResourceCPU:
					cpu.Add(total)
				case name == corev1.ResourceMemory:
					mem.Add(total)
				case name == "google.com/tpu":
					tpu.Add(total)
				case clusterbuild.IsGPUResource(string(name)):
					gpu.Add(total)
				}
			}
		}
	}
	add(&c.Spec.HeadGroupSpec.Template.Spec, 1)
	for i := range c.Spec.WorkerGroupSpecs {
		g := &c.Spec.WorkerGroupSpecs[i]
		add(&g.Template.Spec, int64(groupPods(c, g)))
	}
	if ptr.Deref(c.Spec.Suspend, false) {
		return resource.Quantity{}, resource.Quantity{}, resource.Quantity{}, resource.Quantity{}
	}
	return cpu, mem, gpu, tpu
}

func podRequests(c corev1.Container) corev1.ResourceList {
	out := corev1.ResourceList{}
	for k, v := range c.Resources.Limits {
		out[k] = v
	}
	for k, v := range c.Resources.Requests {
		out[k] = v
	}
	return out
}
