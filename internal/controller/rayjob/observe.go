package rayjob

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/rayauth"
)

// observation is everything computePlan reads: the RayJob, and what its deployment state needs of its cluster, its
// submitter, the cluster's pods and Ray. A read that failed is kept beside what it would have read, and the plan
// returns it where the step needs what it would have read: a failed read the step does not need changes nothing.
type observation struct {
	j   *rayv1.RayJob
	now time.Time
	// newName draws a fresh name for a cluster or a submission ID (random, so not part of the plan's inputs).
	newName func() string

	// cluster is the RayCluster named in status.rayClusterName; nil when there is none.
	cluster    *rayv1.RayCluster
	clusterErr error
	// submitter is the Job named after the RayJob, whoever controls it; nil when there is none.
	submitter    *batchv1.Job
	submitterErr error
	// pods are the pods of the cluster named in status.rayClusterName, terminating ones included.
	pods    []corev1.Pod
	podsErr error
	// headService is <job>-head-svc as the API server has it (nil: absent).
	headService    *corev1.Service
	headServiceErr error
	// headServiceCurrent says <job>-head-svc was read pointing at the cluster less than headServiceRecheck ago,
	// and so was not read again (headService is nil then).
	headServiceCurrent bool
	// headServiceUnread says <job>-head-svc was not read: this process never looked at it for the job before, and
	// a job's first look is a create (one that finds the name taken reads the Service then and syncs it).
	headServiceUnread bool
	// inClusterDashboard is the address the K8sJobMode submitter reaches the cluster's dashboard at; set when a
	// submitter may be created.
	inClusterDashboard string
	// dash is the cluster's dashboard client (dashErr: it could not be built, its auth token not read); jobInfo is
	// Ray's answer about status.jobId, jobErr the failed question (ray.ErrNotFound: Ray does not know the job).
	dash    ray.Dashboard
	dashErr error
	jobInfo *ray.JobInfo
	jobErr  error
	// headProbed: the head's GCS health was asked (a job that may start before its cluster is ready, startEarly);
	// headErr is why it did not answer healthy.
	headProbed bool
	headErr    error
}

// observe reads what the RayJob's deployment state needs, from the cache except where noted; it writes nothing.
// Asking Ray for the job's status is a read; submitting or stopping it is the writer's.
func (r *Reconciler) observe(ctx context.Context, j *rayv1.RayJob) *observation {
	o := &observation{j: j, now: r.opts.Clock.Now(), newName: func() string { return clusterbuild.ChildClusterName(j.Name, r.opts.Rand) }}
	s := &j.Status
	state, name, mode := s.JobDeploymentStatus, s.RayClusterName, submissionMode(j)
	tearDown := state == rayv1.JobDeploymentStatusRetrying || state == rayv1.JobDeploymentStatusSuspending ||
		state == rayv1.JobDeploymentStatusValidationFailed
	switch state {
	case rayv1.JobDeploymentStatusNew, rayv1.JobDeploymentStatusSuspended:
		return o
	}
	if name != "" {
		o.cluster, o.clusterErr = r.getCluster(ctx, j)
	}
	if tearDown || (mode == rayv1.K8sJobMode && (state == rayv1.JobDeploymentStatusInitializing || state == rayv1.JobDeploymentStatusRunning)) {
		o.submitter, o.submitterErr = r.readSubmitter(ctx, j)
	}
	// The pods: whether they are gone (a teardown), why they cannot start (initializing, or a pre-running deadline
	// that may fail the job), the SidecarMode submitter's state (in the head pod).
	started := state == rayv1.JobDeploymentStatusWaiting || state == rayv1.JobDeploymentStatusRunning
	if name != "" && (tearDown || state == rayv1.JobDeploymentStatusInitializing ||
		(started && (mode == rayv1.SidecarMode || j.Spec.PreRunningDeadlineSeconds != nil))) {
		pods := &corev1.PodList{}
		o.podsErr = r.client.List(ctx, pods, client.InNamespace(j.Namespace), clusterpods.Of(name))
		o.pods = pods.Items
	}
	c := o.cluster
	if c == nil {
		return o
	}
	// A job that may start before its cluster is ready (startEarly): its submitter may be made, and once the head
	// pod runs, the head's client is made and asked whether the GCS is healthy and lists the head node alive (see
	// headReady).
	early := state == rayv1.JobDeploymentStatusInitializing && submitsEarly(j) && !j.Spec.Suspend && c.Status.State != rayv1.Ready
	if mode == rayv1.K8sJobMode && o.submitter == nil && o.submitterErr == nil &&
		(state == rayv1.JobDeploymentStatusRunning || (state == rayv1.JobDeploymentStatusInitializing && (c.Status.State == rayv1.Ready || early))) {
		o.inClusterDashboard = r.rays.InClusterDashboardURL(HeadTarget(c))
	}
	if early && o.podsErr == nil && headUp(o.pods, c.Name) {
		if o.dash, o.dashErr = r.dashboard(ctx, c); o.dashErr == nil {
			o.headProbed = true
			o.headErr = headReady(ctx, o.dash)
		}
	}
	if state != rayv1.JobDeploymentStatusRunning || j.Spec.Suspend {
		return o
	}
	if len(j.Spec.ClusterSelector) == 0 {
		now := r.opts.Clock.Now()
		if o.headServiceCurrent = r.headServices.current(j, c.Name, now); !o.headServiceCurrent && r.headServices.firstLook(j) {
			o.headServiceUnread = true
		} else if !o.headServiceCurrent {
			o.headService, o.headServiceErr = r.readHeadService(ctx, j, c)
			if svc := o.headService; svc != nil && svc.Spec.Selector[rayv1.LabelCluster] == c.Name {
				r.headServices.saw(j, c.Name, now)
			}
		}
	}
	if o.dash, o.dashErr = r.dashboard(ctx, c); o.dashErr == nil {
		o.jobInfo, o.jobErr = o.dash.GetJob(ctx, s.JobId)
	}
	return o
}

// getCluster reads the cluster named in the status; nil when it does not exist.
func (r *Reconciler) getCluster(ctx context.Context, j *rayv1.RayJob) (*rayv1.RayCluster, error) {
	if j.Status.RayClusterName == "" {
		return nil, nil
	}
	// The cache's object itself (its maps, slices and pointers shared): the plan only reads the cluster and copies
	// it before any change (resumeIdleCluster, suspendWorkers). A copy was 4% of what the operator allocated in a
	// burst of RayJobs.
	c := &rayv1.RayCluster{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: j.Namespace, Name: j.Status.RayClusterName}, c, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return c, nil
}

// readSubmitter reads the Job named after the RayJob, whoever controls it (the plan tells); nil when absent.
func (r *Reconciler) readSubmitter(ctx context.Context, j *rayv1.RayJob) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: j.Namespace, Name: SubmitterJobName(j)}, job); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return job, nil
}

// headServiceRecheck is how long a head Service read pointing at the job's cluster is taken as still so: one
// deleted or changed by hand is put back within it, as a cached object would be at the next resync.
const headServiceRecheck = 5 * time.Minute

// headServiceMemo remembers when each RayJob's head Service was last read pointing at its cluster, and which
// RayJobs' head Services this process looked at.
type headServiceMemo struct {
	mu     sync.Mutex
	seen   map[types.NamespacedName]headServiceSeen
	looked map[types.NamespacedName]types.UID
}

// firstLook says whether this is the first time this process looks at j's head Service, and records the look.
func (m *headServiceMemo) firstLook(j *rayv1.RayJob) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := client.ObjectKeyFromObject(j)
	if m.looked[key] == j.UID {
		return false
	}
	if m.looked == nil {
		m.looked = map[types.NamespacedName]types.UID{}
	}
	m.looked[key] = j.UID
	return true
}

type headServiceSeen struct {
	uid     types.UID
	cluster string
	at      time.Time
}

func (m *headServiceMemo) current(j *rayv1.RayJob, cluster string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.seen[client.ObjectKeyFromObject(j)]
	return ok && s.uid == j.UID && s.cluster == cluster && now.Sub(s.at) < headServiceRecheck
}

func (m *headServiceMemo) saw(j *rayv1.RayJob, cluster string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil {
		m.seen = map[types.NamespacedName]headServiceSeen{}
	}
	m.seen[client.ObjectKeyFromObject(j)] = headServiceSeen{uid: j.UID, cluster: cluster, at: now}
}

func (m *headServiceMemo) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seen, key)
	delete(m.looked, key)
}

// headReady says whether the head takes a job: its GCS is healthy and lists the head node alive. Between the
// dashboard starting to answer and the head's raylet registering, Ray accepts a submission and then fails the job
// (ray.DashboardClient.HeadNodeAlive says why).
func headReady(ctx context.Context, dash ray.Dashboard) error {
	if err := dash.CheckGCSHealth(ctx); err != nil {
		return err
	}
	alive, err := dash.HeadNodeAlive(ctx)
	if err != nil {
		return fmt.Errorf("head node: %w", err)
	}
	if !alive {
		return fmt.Errorf("head node: %w: the GCS does not list it alive yet", ray.ErrUnavailable)
	}
	return nil
}

// readHeadService reads <job>-head-svc from the API server: it carries no ray.io/cluster label, so the manager's
// cache does not hold it.
func (r *Reconciler) readHeadService(ctx context.Context, j *rayv1.RayJob, c *rayv1.RayCluster) (*corev1.Service, error) {
	key := client.ObjectKeyFromObject(clusterbuild.OwnerHeadService(c, clusterbuild.KindRayJob, j.Name))
	svc := &corev1.Service{}
	if err := r.reader.Get(ctx, key, svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return svc, nil
}

// dashboard is the client of cluster's dashboard, with the cluster's Ray auth token when it uses one.
func (r *Reconciler) dashboard(ctx context.Context, cluster *rayv1.RayCluster) (ray.Dashboard, error) {
	return rayauth.Dashboard(ctx, r.reader, r.rays, cluster, HeadTarget(cluster))
}
