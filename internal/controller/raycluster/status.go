package raycluster

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/builder"
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
	// ReasonRedisCleanupSkipped: a deleted cluster's GCS fault-tolerance finalizer was removed without a Redis cleanup.
	ReasonRedisCleanupSkipped = "RedisCleanupSkipped"
)

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
}

// computeStatus is the whole status of c from what the reconcile observed. It is pure: now is passed in.
func computeStatus(c *rayv1.RayCluster, o observed, now metav1.Time) rayv1.RayClusterStatus {
	s := *c.Status.DeepCopy()
	s.ObservedGeneration = c.Generation
	setCond := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg,
			ObservedGeneration: c.Generation, LastTransitionTime: now})
	}
	setOrRemove := func(t string, f *failure) {
		if f == nil {
			meta.RemoveStatusCondition(&s.Conditions, t)
			return
		}
		setCond(t, metav1.ConditionTrue, f.reason, f.message)
	}
	setOrRemove(ConditionInvalidSpec, o.invalid)
	if len(o.unsupported) > 0 {
		setCond(ConditionUnsupportedFeature, metav1.ConditionTrue, ReasonUnsupportedFields, builder.UnsupportedMessage(o.unsupported))
	} else {
		meta.RemoveStatusCondition(&s.Conditions, ConditionUnsupportedFeature)
	}
	if o.invalid != nil {
		return s
	}
	setOrRemove(ConditionDefaultPodTemplateFailure, o.templateErr)
	setOrRemove(string(rayv1.RayClusterReplicaFailure), o.failure)

	desired, minR, maxR := workerReplicaCounts(c)
	s.DesiredWorkerReplicas, s.MinWorkerReplicas, s.MaxWorkerReplicas = desired, minR, maxR
	s.DesiredCPU, s.DesiredMemory, s.DesiredGPU, s.DesiredTPU = desiredResources(c)

	suspend := ptr.Deref(c.Spec.Suspend, false)
	var head *corev1.Pod
	var ready, available int32
	allReady := true
	for i := range o.pods {
		p := &o.pods[i]
		r := podRunningAndReady(p)
		allReady = allReady && r
		if p.Labels[builder.LabelNodeType] == builder.NodeTypeHead {
			head = p
			continue
		}
		if p.Status.Phase == corev1.PodRunning {
			available++
		}
		if r {
			ready++
		}
	}
	s.ReadyWorkerReplicas, s.AvailableWorkerReplicas = ready, available

	s.Head = rayv1.HeadInfo{}
	if head != nil {
		s.Head.PodName, s.Head.PodIP = head.Name, head.Status.PodIP
	}
	s.Endpoints = nil
	if svc := o.headService; svc != nil {
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

	switch {
	case head == nil:
		setCond(string(rayv1.HeadPodReady), metav1.ConditionFalse, rayv1.HeadPodNotFound, "the head pod does not exist")
	case podRunningAndReady(head):
		setCond(string(rayv1.HeadPodReady), metav1.ConditionTrue, rayv1.HeadPodRunningAndReady, "the head pod is running and ready")
	default:
		reason, msg := ReasonHeadPodNotReady, "the head pod is "+string(head.Status.Phase)
		for _, cond := range head.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Reason != "" {
				reason, msg = cond.Reason, cond.Message
			}
		}
		setCond(string(rayv1.HeadPodReady), metav1.ConditionFalse, reason, msg)
	}

	allUp := !suspend && o.reconcileOK && head != nil && len(o.pods) == int(desired)+1 && allReady
	if !meta.IsStatusConditionTrue(s.Conditions, string(rayv1.RayClusterProvisioned)) {
		if allUp {
			setCond(string(rayv1.RayClusterProvisioned), metav1.ConditionTrue, rayv1.AllPodRunningAndReadyFirstTime, "all Ray pods are running and ready")
		} else {
			setCond(string(rayv1.RayClusterProvisioned), metav1.ConditionFalse, rayv1.RayClusterPodsProvisioning, "waiting for the Ray pods to be running and ready")
		}
	}
	state := s.State
	switch {
	case suspend && len(o.pods) == 0:
		state = rayv1.Suspended
		setCond(string(rayv1.RayClusterSuspending), metav1.ConditionFalse, ReasonSuspended, "all pods are deleted")
		setCond(string(rayv1.RayClusterSuspended), metav1.ConditionTrue, ReasonSuspended, "all pods are deleted")
	case suspend:
		setCond(string(rayv1.RayClusterSuspending), metav1.ConditionTrue, ReasonSuspending, "deleting the pods")
		setCond(string(rayv1.RayClusterSuspended), metav1.ConditionFalse, ReasonSuspending, "deleting the pods")
	default:
		meta.RemoveStatusCondition(&s.Conditions, string(rayv1.RayClusterSuspending))
		meta.RemoveStatusCondition(&s.Conditions, string(rayv1.RayClusterSuspended))
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
	return s
}

func itoa(i int32) string { return resource.NewQuantity(int64(i), resource.DecimalSI).String() }

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
		if !ptr.Deref(g.Suspend, false) {
			d += int64(groupReplicas(c, g)) * h
		}
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
				case builder.IsGPUResource(string(name)):
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

func podRunningAndReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
