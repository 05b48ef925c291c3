// Package startphases explains where a Ray pod's, a RayCluster's and a RayJob's start went: the time from the
// object's creation to each phase of its start (scheduled, image pulled, containers started, Ray ready; for a
// RayJob also submitted, RUNNING and finished). The phases are computed by pure functions from what the API server
// shows (pod conditions and container states, the kubelet's Pulled events, the RayCluster's and RayJob's status
// timestamps); a controller records each one once in the manta_start_phase_seconds histogram, warns in an event
// when a phase took longer than a threshold, and writes a one-line summary naming the slowest step when the
// RayCluster turns ready or the RayJob finishes. It writes nothing but events: no field of ray.io/v1 is added.
package startphases

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// Phase is one milestone of a start, in the order they are reached.
type Phase int

const (
	Scheduled Phase = iota
	ImagePulled
	ContainersStarted
	RayReady
	Submitted
	Running
	Finished
	numPhases
)

// Phases lists every phase in order.
var Phases = []Phase{Scheduled, ImagePulled, ContainersStarted, RayReady, Submitted, Running, Finished}

// String is the phase's label value in the metrics.
func (p Phase) String() string {
	return [...]string{"scheduled", "image_pulled", "containers_started", "ray_ready", "submitted", "running", "finished"}[p]
}

// Step names the stretch of time that ends at the phase, as the summary and the events say it.
func (p Phase) Step() string {
	return [...]string{"scheduling", "image pull", "container start", "Ray start", "job submission", "waiting in Ray", "job run"}[p]
}

// Times are when an object reached each phase; a zero time is a phase not reached (or not known).
type Times struct {
	Created time.Time
	At      [numPhases]time.Time
}

// Has says whether the phase was reached.
func (t *Times) Has(p Phase) bool { return !t.At[p].IsZero() }

// Since is the time from the object's creation to the phase (never negative: the clocks of the kubelet, the API
// server and Ray may disagree by a little).
func (t *Times) Since(p Phase) time.Duration { return max(0, t.At[p].Sub(t.Created)) }

// StepOf is how long the step that ends at phase p took: from the last phase before p that was reached (or the
// creation) to p.
func (t *Times) StepOf(p Phase) time.Duration {
	from := t.Created
	for q := p - 1; q >= 0; q-- {
		if t.Has(q) {
			from = t.At[q]
			break
		}
	}
	return max(0, t.At[p].Sub(from))
}

// Pull is one of the kubelet's Pulled events about a pod: when it was written, and whether the kubelet pulled the
// image then (false: the image was already on the node).
type Pull struct {
	At     time.Time
	Pulled bool
}

// PullFromEvent reads a kubelet Pulled event: its time (the series' last, else the event's) and whether its message
// says the image was pulled ("Successfully pulled image ...") rather than found on the node ("... already present
// on machine").
func PullFromEvent(ev *corev1.Event) Pull {
	at := ev.LastTimestamp.Time
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		at = ev.Series.LastObservedTime.Time
	case at.IsZero() && !ev.EventTime.IsZero():
		at = ev.EventTime.Time
	case at.IsZero():
		at = ev.FirstTimestamp.Time
	}
	return Pull{At: at, Pulled: strings.HasPrefix(ev.Message, "Successfully pulled")}
}

// PullEnd is when a pod's images were on its node, from its Pulled events: the last real pull's end, or, when
// every image was already there, the first check that said so. The pod's other "already present" events are left
// out: a worker's main container is checked only after its init container has waited for the head, and that wait
// is not image pulling.
func PullEnd(pulls []Pull) time.Time {
	var last, first time.Time
	for _, p := range pulls {
		if p.Pulled && p.At.After(last) {
			last = p.At
		}
		if first.IsZero() || p.At.Before(first) {
			first = p.At
		}
	}
	if !last.IsZero() {
		return last
	}
	return first
}

// PodTimes computes a pod's phases: scheduled when its PodScheduled condition turned true, image pulled from its
// Pulled events (PullEnd; unknown without them, as on nodes with no kubelet), containers started when the last of
// its containers started, Ray ready when its Ready condition (the Ray readiness probe) turned true.
func PodTimes(p *corev1.Pod, pulls []Pull) Times {
	t := Times{Created: p.CreationTimestamp.Time}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case corev1.PodScheduled:
			t.At[Scheduled] = c.LastTransitionTime.Time
		case corev1.PodReady:
			t.At[RayReady] = c.LastTransitionTime.Time
		}
	}
	t.At[ImagePulled] = PullEnd(pulls)
	t.At[ContainersStarted] = containersStarted(p)
	// A pod is not ready before its containers started: a Ready condition left from an earlier run of its
	// containers (a restart) is not this start's.
	if !t.Has(ContainersStarted) || t.At[RayReady].Before(t.At[ContainersStarted].Truncate(time.Second)) {
		t.At[RayReady] = time.Time{}
	}
	return t
}

// containersStarted is when the last of the pod's containers started (zero until every one has).
func containersStarted(p *corev1.Pod) time.Time {
	if len(p.Status.ContainerStatuses) == 0 || len(p.Status.ContainerStatuses) < len(p.Spec.Containers) {
		return time.Time{}
	}
	var last time.Time
	for _, cs := range p.Status.ContainerStatuses {
		var at time.Time
		switch {
		case cs.State.Running != nil:
			at = cs.State.Running.StartedAt.Time
		case cs.State.Terminated != nil:
			at = cs.State.Terminated.StartedAt.Time
		}
		if at.IsZero() {
			return time.Time{}
		}
		last = later(last, at)
	}
	return last
}

// PodOf is one pod of a cluster with its phases.
type PodOf struct {
	Name  string
	Times Times
}

// ClusterTimes computes a RayCluster's phases from its pods: the cluster reaches scheduled, image pulled and
// containers started when as many of its pods as it wants (its head and status.desiredWorkerReplicas workers) have
// reached them, and Ray ready when its status says ready (the first time). last names, for each phase, the pod that
// completed it (empty when the phase is the cluster's own).
//
// How many pods the cluster wants is known once its status was written for its spec (observedGeneration): before,
// desiredWorkerReplicas is 0, and the head alone would complete each phase, a value the record-once rule would keep
// (a real node's cluster recorded "container start 0s", the head's, where its worker started 7 s later).
func ClusterTimes(c *rayv1.RayCluster, pods []PodOf) (t Times, last [numPhases]string) {
	t = Times{Created: c.CreationTimestamp.Time}
	want := 1 + int(c.Status.DesiredWorkerReplicas)
	type reached struct {
		at   time.Time
		name string
	}
	// A cluster of up to 16 pods is sorted on the stack: this runs at each reconcile of the cluster.
	var buf [16]reached
	for _, p := range []Phase{Scheduled, ImagePulled, ContainersStarted} {
		if c.Status.ObservedGeneration < c.Generation {
			break
		}
		rs := buf[:0]
		for _, pod := range pods {
			if pod.Times.Has(p) {
				rs = append(rs, reached{pod.Times.At[p], pod.Name})
			}
		}
		if len(rs) < want {
			continue
		}
		slices.SortStableFunc(rs, func(a, b reached) int { return a.at.Compare(b.at) })
		t.At[p], last[p] = rs[want-1].at, rs[want-1].name
	}
	t.At[RayReady] = clusterReady(c)
	return t, last
}

// clusterReady is when the cluster first turned ready: its ready state's transition time, else (a status written
// without it) its RayClusterProvisioned condition's.
func clusterReady(c *rayv1.RayCluster) time.Time {
	if at := c.Status.StateTransitionTimes[rayv1.Ready]; at != nil && c.Status.State == rayv1.Ready {
		return at.Time
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, string(rayv1.RayClusterProvisioned)); cond != nil && cond.Status == "True" {
		return cond.LastTransitionTime.Time
	}
	return time.Time{}
}

// JobTimes computes a RayJob's phases: those of its RayCluster up to Ray ready (cluster, absolute times; only
// those reached after the RayJob was created: a cluster it selected may have started long before), submitted when
// Ray took the job (its start_time, status.rayJobInfo.startTime), RUNNING when the operator first saw it RUNNING
// (runningSeen: Ray keeps no time for it), and finished when Ray ended it (status.rayJobInfo.endTime, else the
// RayJob's status.endTime once its deployment is terminal).
func JobTimes(j *rayv1.RayJob, cluster *Times, runningSeen time.Time) Times {
	t := Times{Created: j.CreationTimestamp.Time}
	if cluster != nil {
		for _, p := range []Phase{Scheduled, ImagePulled, ContainersStarted, RayReady} {
			if cluster.Has(p) && !cluster.At[p].Before(t.Created) {
				t.At[p] = cluster.At[p]
			}
		}
	}
	s := &j.Status
	if s.RayJobStatusInfo.StartTime != nil {
		t.At[Submitted] = s.RayJobStatusInfo.StartTime.Time
	}
	t.At[Running] = runningSeen
	switch {
	case s.RayJobStatusInfo.EndTime != nil:
		t.At[Finished] = s.RayJobStatusInfo.EndTime.Time
	case s.EndTime != nil && rayv1.IsJobDeploymentTerminal(s.JobDeploymentStatus):
		t.At[Finished] = s.EndTime.Time
	}
	// RUNNING is seen only by polling Ray: a job that ran between two polls has none, and a late first sight must
	// not come after the end.
	if t.Has(Running) && t.Has(Finished) && t.At[Running].After(t.At[Finished]) {
		t.At[Running] = time.Time{}
	}
	return t
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
