package rayjob

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/idle"
	"github.com/manta-dev/manta/internal/controller/shared/podgroup"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/ray"
)

// write carries out the plan's actions in order and returns the reconcile's error. The first write that fails ends
// the reconcile where it was planned: the plan goes back to what it was then (what it decided after assumed the
// write went through), and the action's onErr, when it has one, finishes the step from there. Stopping a Ray job
// and a finished job's batch scheduler cleanup are best effort: their failure is reported and the plan goes on.
func (r *Reconciler) write(ctx context.Context, p *plan) error {
	defer p.placeWritten()
	for i := range p.actions {
		a := &p.actions[i]
		if err := r.do(ctx, p, a); err != nil {
			return p.failed(a, err)
		}
	}
	return p.err
}

// eventf asks for an event about a's write, placed among the plan's events where a was planned.
func (p *plan) eventf(a *action, typ, reason, act, format string, args ...any) {
	p.written = append(p.written, placedEvent{at: a.at, ev: reconcile.Event{Type: typ, Reason: reason, Action: act, Note: fmt.Sprintf(format, args...)}})
}

// placeWritten puts the writer's events among the plan's, each where its action was planned.
func (p *plan) placeWritten() {
	if len(p.written) == 0 {
		return
	}
	out := make([]reconcile.Event, 0, len(p.Events)+len(p.written))
	k := 0
	for i, ev := range p.Events {
		for ; k < len(p.written) && p.written[k].at <= i; k++ {
			out = append(out, p.written[k].ev)
		}
		out = append(out, ev)
	}
	for ; k < len(p.written); k++ {
		out = append(out, p.written[k].ev)
	}
	p.Events, p.written = out, nil
}

// do carries out one action and reports it; the error it returns is the action's failure (nil: done, or nothing
// more to do, such as a create the API server already had).
func (r *Reconciler) do(ctx context.Context, p *plan, a *action) error {
	switch a.kind {
	case syncPodGroup:
		updated, err := podgroup.SyncVolcano(ctx, r.client, a.podGroup)
		switch {
		case err != nil && !a.cleanup:
			p.eventf(a, corev1.EventTypeWarning, podgroup.Reason(err), "Reconcile", "batch scheduler volcano: %v", err)
			return err
		case err != nil:
			j := p.j
			p.eventf(a, corev1.EventTypeWarning, ReasonFailedCleanupBatchScheduler, "Cleanup", "Failed to cleanup batch scheduler resources for RayJob %s/%s: %v", j.Namespace, j.Name, err)
			if a.bestEffort {
				return nil
			}
			return err
		case updated && a.cleanup:
			j := p.j
			p.eventf(a, corev1.EventTypeNormal, ReasonBatchSchedulerCleanedUp, "Cleanup", "Cleaned up batch scheduler resources for RayJob %s/%s", j.Namespace, j.Name)
		}
		return nil
	case createCluster:
		// A cluster of that name is not necessarily the job's: onErr decides.
		return r.writeChild(ctx, a, reconcile.ExistsFail, func(op reconcile.Op, c client.Object, err error) {
			switch {
			case err == nil:
				p.eventf(a, corev1.EventTypeNormal, ReasonCreatedCluster, "Create", "Created RayCluster %s/%s", c.GetNamespace(), c.GetName())
			case !apierrors.IsAlreadyExists(err):
				p.eventf(a, corev1.EventTypeWarning, ReasonFailedCreateCluster, "Create", "Failed to create RayCluster %s/%s: %v", c.GetNamespace(), c.GetName(), err)
			}
		})
	case resumeIdleCluster:
		c := a.obj.(*rayv1.RayCluster)
		resumed, err := idle.Resume(ctx, r.client, c)
		if resumed {
			p.eventf(a, corev1.EventTypeNormal, ReasonResumedIdleCluster, "Update", "Resumed RayCluster %s/%s, suspended for idleness, to run the job", c.Namespace, c.Name)
		}
		return err
	case createSubmitter:
		// Named after the RayJob: one of that name is an earlier attempt's, created by a reconcile the cache did not
		// show.
		return r.writeChild(ctx, a, reconcile.ExistsPending, func(op reconcile.Op, job client.Object, err error) {
			switch {
			case err != nil:
				p.eventf(a, corev1.EventTypeWarning, ReasonFailedSubmitter, "Create", "Failed to create new Kubernetes Job %s/%s: %v", job.GetNamespace(), job.GetName(), err)
			case op == reconcile.Created:
				p.eventf(a, corev1.EventTypeNormal, ReasonCreatedSubmitter, "Create", "Created Kubernetes Job %s/%s", job.GetNamespace(), job.GetName())
			}
		})
	case createHeadService, updateHeadService:
		// KubeRay reports a head Service made meanwhile as created. One created without a read first that finds the
		// name taken was not made meanwhile: it is read and synced (ExistsSync), updated when it points elsewhere,
		// left alone when it points at the cluster (the next poll reads it, as after any other first look).
		onExists := reconcile.ExistsPending
		if a.unread {
			onExists = reconcile.ExistsSync
		}
		return r.writeChild(ctx, a, onExists, func(op reconcile.Op, svc client.Object, err error) {
			switch {
			case op == reconcile.Updated && err != nil:
				p.eventf(a, corev1.EventTypeWarning, ReasonFailedUpdateService, "Update", "Failed to update the service %s/%s, %v", svc.GetNamespace(), svc.GetName(), err)
			case op == reconcile.Updated:
				p.eventf(a, corev1.EventTypeNormal, ReasonUpdatedService, "Update", "Updated the service %s/%s", svc.GetNamespace(), svc.GetName())
			case err != nil:
				p.eventf(a, corev1.EventTypeWarning, ReasonFailedCreateService, "Create", "Failed to create the service %s/%s, %v", svc.GetNamespace(), svc.GetName(), err)
			default:
				p.eventf(a, corev1.EventTypeNormal, ReasonCreatedService, "Create", "Created the service %s/%s", svc.GetNamespace(), svc.GetName())
			}
			if s, ok := svc.(*corev1.Service); ok && err == nil && (op == reconcile.Created || op == reconcile.Updated) {
				// Written pointing at the cluster: no read needs to tell the next poll so.
				r.headServices.saw(p.j, s.Spec.Selector[rayv1.LabelCluster], r.opts.Clock.Now())
			}
		})
	case submitJob:
		dash, err := r.dashboardOf(ctx, p.o, a.cluster)
		if err == nil {
			_, err = dash.SubmitJob(ctx, a.submit)
		}
		switch {
		case err == nil:
			p.eventf(a, corev1.EventTypeNormal, ReasonSubmittedJob, "Submit", "submitted Ray job %s to %s", a.jobID, a.cluster.Name)
		case errors.Is(err, ray.ErrAlreadySubmitted):
			// An earlier call got through after all (it timed out on our side).
			return nil
		case !errors.Is(err, ray.ErrUnavailable):
			p.eventf(a, corev1.EventTypeWarning, ReasonFailedSubmitJob, "Submit", "failed to submit Ray job %s: %v", a.jobID, err)
		}
		return err
	case stopJob:
		dash, err := r.dashboardOf(ctx, p.o, a.cluster)
		if err != nil {
			return nil
		}
		if stopped, err := dash.StopJob(ctx, a.jobID); err == nil && stopped {
			p.eventf(a, corev1.EventTypeNormal, ReasonStoppedJob, "Stop", "stopped Ray job %s", a.jobID)
		} else if err != nil && !errors.Is(err, ray.ErrNotFound) {
			p.eventf(a, corev1.EventTypeWarning, ReasonFailedStopJob, "Stop", "failed to stop Ray job %s: %v", a.jobID, err)
		}
		return nil
	case deleteCluster, deleteSubmitter:
		obj := a.obj
		uid := obj.GetUID()
		err := r.client.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
		// KubeRay's messages.
		deleted, failed, noun := ReasonDeletedCluster, ReasonFailedDeleteCluster, "cluster"
		if a.kind == deleteSubmitter {
			deleted, failed, noun = ReasonDeletedSubmitter, ReasonFailedDeleteSubmitter, "submitter K8s Job"
		}
		if err != nil && !apierrors.IsNotFound(err) {
			p.eventf(a, corev1.EventTypeWarning, failed, "Delete", "Failed to delete %s %s/%s: %v", noun, obj.GetNamespace(), obj.GetName(), err)
			return err
		}
		p.eventf(a, corev1.EventTypeNormal, deleted, "Delete", "Deleted %s %s/%s", noun, obj.GetNamespace(), obj.GetName())
		return nil
	case suspendWorkers:
		c := a.base
		if err := r.client.Patch(ctx, a.obj, client.MergeFromWithOptions(c, client.MergeFromWithOptimisticLock{})); err != nil {
			p.eventf(a, corev1.EventTypeWarning, ReasonFailedSuspendWorkers, "Delete", "Failed to suspend worker groups in cluster %s/%s: %v", c.Namespace, c.Name, err)
			return fmt.Errorf("suspend worker groups of %s: %w", c.Name, err)
		}
		p.eventf(a, corev1.EventTypeNormal, ReasonSuspendedWorkers, "Delete", "Set the `suspend` field to true for all worker groups in cluster %s/%s", c.Namespace, c.Name)
		return nil
	case deleteSelf:
		if err := r.client.Delete(ctx, a.obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete RayJob: %w", err)
		}
		p.eventf(a, corev1.EventTypeNormal, ReasonDeletedSelf, "Delete", "deleted the RayJob (DeleteSelf)")
		return nil
	}
	return fmt.Errorf("unknown action %d", a.kind)
}

// writeChild creates a.obj (or, for updateHeadService, writes it over the object the plan read) through the one
// child writer, computePlan having decided the write (reconcile.PlanOwned for the head Service). It returns the API
// server's own error, unwrapped: onErr reads it, and a refused create's message goes into the status as it is.
//
// With ExistsSync (the head Service's create without a read first, the only write made so), a name found taken
// is read from the API server and synced by headServiceKind's rules.
func (r *Reconciler) writeChild(ctx context.Context, a *action, onExists reconcile.ExistsPolicy, report reconcile.Report[client.Object]) error {
	k := &reconcile.Owned[client.Object]{Kind: a.obj.GetObjectKind().GroupVersionKind().Kind, OnExists: onExists}
	if onExists == reconcile.ExistsSync {
		k.Kind, k.AnyController = headServiceKind.Kind, headServiceKind.AnyController
		k.New = func() client.Object { return headServiceKind.New() }
		k.Sync = func(have, want client.Object) (client.Object, bool, bool) {
			return headServiceKind.Sync(have.(*corev1.Service), want.(*corev1.Service))
		}
	}
	s := reconcile.Step[client.Object]{Op: reconcile.Created, Desired: a.obj, Object: a.obj}
	if a.kind == updateHeadService {
		s.Op, s.Existing = reconcile.Updated, a.obj
	}
	var writeErr error
	_, _, err := reconcile.WriteOwned(ctx, reconcile.Writer{Client: r.client, Live: r.reader}, k, s, func(op reconcile.Op, o client.Object, err error) {
		writeErr = err
		report(op, o, err)
	})
	if writeErr != nil {
		return writeErr
	}
	return err
}

// dashboardOf is the client of cluster's dashboard: the one observe built for it, or a new one.
func (r *Reconciler) dashboardOf(ctx context.Context, o *observation, cluster *rayv1.RayCluster) (ray.Dashboard, error) {
	if cluster == o.cluster && (o.dash != nil || o.dashErr != nil) {
		return o.dash, o.dashErr
	}
	return r.dashboard(ctx, cluster)
}
