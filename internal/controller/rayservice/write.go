package rayservice

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/ray"
)

// write carries out the plan in an order that keeps traffic safe: clusters first, then the Serve configs, then the
// Services (switched to the active cluster), then the serve labels, and deletions last. It stops at the first
// Kubernetes write that fails, so a cluster is never deleted while a Service may still point at it. A Serve config
// that Ray does not accept now is reported and retried by a later reconcile; the rest of the plan goes on.
func (r *Reconciler) write(ctx context.Context, p *plan) error {
	for _, step := range []func(context.Context, *plan) error{
		r.writeClusters,
		r.writeServeConfigs,
		r.writeRouting,
		r.writeServeLabels,
		r.writeAnnotations,
		r.writeDeletions,
	} {
		if err := step(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// writeClusters creates the planned cluster (one that exists already is fine) and updates clusters in place.
func (r *Reconciler) writeClusters(ctx context.Context, p *plan) error {
	w := reconcile.Writer{Client: r.client, Owner: p.owner}
	if c := p.createCluster; c != nil {
		_, _, err := reconcile.WriteOwned(ctx, w, &clusterKind, reconcile.PlanOwned(p.owner, &clusterKind, c, nil), func(op reconcile.Op, c *rayv1.RayCluster, err error) {
			switch {
			case op == reconcile.Created && err != nil:
				p.RelatedEventf(c, corev1.EventTypeWarning, EventFailedToCreateRayCluster, "Create", "Failed to create the RayCluster %s/%s: %v", c.Namespace, c.Name, err)
			case op == reconcile.Created:
				p.RelatedEventf(c, corev1.EventTypeNormal, EventCreatedRayCluster, "Create", "Created the RayCluster %s/%s", c.Namespace, c.Name)
			}
		})
		if err != nil {
			return err
		}
	}
	for _, c := range p.updateClusters {
		// The plan made the update (computePlan decides what changes on a cluster): this only writes it.
		step := reconcile.Step[*rayv1.RayCluster]{Op: reconcile.Updated, Desired: c, Existing: c, Object: c}
		if _, _, err := reconcile.WriteOwned(ctx, w, &clusterKind, step, func(_ reconcile.Op, c *rayv1.RayCluster, err error) {
			if err != nil {
				p.Eventf(corev1.EventTypeWarning, EventFailedToUpdateRayCluster, "Update", "Failed to update the %s RayCluster %s/%s: %v", p.role(c.Name), c.Namespace, c.Name, err)
			}
		}); err != nil {
			return err
		}
		p.recordWritten(c.Name)
	}
	return nil
}

// clusterKind writes the RayService's clusters; one that exists already when created is the service's own, made
// by a reconcile the cache does not show yet.
var clusterKind = reconcile.Owned[*rayv1.RayCluster]{Kind: "RayCluster", New: func() *rayv1.RayCluster { return &rayv1.RayCluster{} }}

// writeServeConfigs sends the Serve configs (one Ray refuses is reported, its capacity change taken back, and
// retried) and records configs applied earlier whose record could not be written then.
func (r *Reconciler) writeServeConfigs(ctx context.Context, p *plan) error {
	for _, a := range p.apply {
		if err := r.applyServeConfig(ctx, a); err != nil {
			p.RelatedEventf(a.cluster, corev1.EventTypeWarning, EventFailedToUpdateServeApplications, "ApplyServeConfig", "Failed to update serve applications to the RayCluster %s/%s: %v", a.cluster.Namespace, a.cluster.Name, err)
			if a.capacity {
				a.revert(&p.status)
				p.RelatedEventf(a.cluster, corev1.EventTypeWarning, EventFailedToUpdateTargetCapacity, "ApplyServeConfig", "Failed to update target_capacity of serve applications to the RayCluster %s/%s: %v", a.cluster.Namespace, a.cluster.Name, err)
			}
			p.Requeue(0)
			continue
		}
		p.RelatedEventf(a.cluster, corev1.EventTypeNormal, EventUpdatedServeApplications, "ApplyServeConfig", "Updated serve applications to the RayCluster %s/%s", a.cluster.Namespace, a.cluster.Name)
		if a.capacity {
			p.RelatedEventf(a.cluster, corev1.EventTypeNormal, EventUpdatedServeTargetCapacity, "ApplyServeConfig", "Updated target_capacity of serve applications to the RayCluster %s/%s", a.cluster.Namespace, a.cluster.Name)
		}
	}
	for _, c := range p.recordApplied {
		if err := r.recordApplied(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// writeRouting applies the Services, then the incremental upgrade's Gateway and HTTPRoute (a route that could not be
// written takes its traffic change out of the status).
func (r *Reconciler) writeRouting(ctx context.Context, p *plan) error {
	for _, svc := range p.services {
		if err := r.applyService(ctx, p, svc); err != nil {
			return err
		}
	}
	if p.gateway != nil {
		if err := r.applyGateway(ctx, p, p.gateway); err != nil {
			return err
		}
	}
	if p.route != nil {
		if err := r.applyRoute(ctx, p, p.route); err != nil {
			p.routeRevert(&p.status)
			return err
		}
	}
	return nil
}

// writeServeLabels sets ray.io/serve on the pods whose label is to change; a pod that is gone is skipped.
func (r *Reconciler) writeServeLabels(ctx context.Context, p *plan) error {
	for _, l := range p.podLabels {
		patched := l.pod.DeepCopy()
		if patched.Labels == nil {
			patched.Labels = map[string]string{}
		}
		patched.Labels[rayv1.LabelServe] = l.value
		// The head's label follows its Serve proxy's health, so each change is news, as KubeRay reports it;
		// a worker's is only ever set to the true it is created with.
		head := l.pod.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead
		if err := r.client.Patch(ctx, patched, client.MergeFrom(l.pod)); err != nil && !apierrors.IsNotFound(err) {
			if head {
				p.Eventf(corev1.EventTypeWarning, EventFailedToUpdateHeadPodServeLabel, "Update", "Failed to update the serve label to %q for the Head Pod %s/%s: %v", l.value, l.pod.Namespace, l.pod.Name, err)
			}
			return fmt.Errorf("label pod %s: %w", l.pod.Name, err)
		} else if err == nil && head {
			p.Eventf(corev1.EventTypeNormal, EventUpdatedHeadPodServeLabel, "Update", "Updated the serve label to %q for the Head Pod %s/%s", l.value, l.pod.Namespace, l.pod.Name)
		}
	}
	return nil
}

// writeAnnotations sets or removes the planned cluster annotations; a cluster that is gone is skipped.
func (r *Reconciler) writeAnnotations(ctx context.Context, p *plan) error {
	for _, a := range p.annotate {
		patched := a.cluster.DeepCopy()
		patched.Annotations = maps.Clone(patched.Annotations)
		if a.value == nil {
			delete(patched.Annotations, a.key)
		} else {
			if patched.Annotations == nil {
				patched.Annotations = map[string]string{}
			}
			patched.Annotations[a.key] = *a.value
		}
		if err := r.client.Patch(ctx, patched, client.MergeFrom(a.cluster)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("annotate RayCluster %s: %w", a.cluster.Name, err)
		}
	}
	return nil
}

// writeDeletions deletes a suspended service's Gateway and HTTPRoute, then the clusters that go (each only as the
// incarnation planned, by UID) with their per-cluster Serve Services.
func (r *Reconciler) writeDeletions(ctx context.Context, p *plan) error {
	if p.deleteGatewayOf != nil {
		if err := r.deleteGatewayObjects(ctx, p, p.deleteGatewayOf); err != nil {
			return err
		}
	}
	for _, c := range p.deleteClusters {
		if err := r.client.Delete(ctx, c, client.Preconditions{UID: &c.UID}); err != nil && !apierrors.IsNotFound(err) {
			p.RelatedEventf(c, corev1.EventTypeWarning, EventFailedToDeleteRayCluster, "Delete", "Failed to delete the RayCluster %s/%s: %v", c.Namespace, c.Name, err)
			return fmt.Errorf("delete RayCluster %s: %w", c.Name, err)
		}
		r.applied.Delete(c.UID)
		p.recordWritten(c.Name)
		if err := r.deleteClusterServeService(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// deleteClusterServeService deletes the <cluster>-serve-svc an incremental upgrade made for a cluster that goes.
func (r *Reconciler) deleteClusterServeService(ctx context.Context, c *rayv1.RayCluster) error {
	owner := metav1.GetControllerOf(c)
	svc := &corev1.Service{}
	if err := r.services.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: clusterbuild.ServeServiceName(c)}, svc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if ref := metav1.GetControllerOf(svc); owner == nil || ref == nil || ref.UID != owner.UID || svc.DeletionTimestamp != nil {
		return nil
	}
	if err := r.client.Delete(ctx, svc, client.Preconditions{UID: &svc.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete Service %s: %w", svc.Name, err)
	}
	return nil
}

// ownedReasons are the event reasons of one kind's writes.
type ownedReasons struct{ created, updated, failedCreate, failedUpdate string }

// applyGateway creates the Gateway or brings the fields Manta sets (class, listeners) in line.
func (r *Reconciler) applyGateway(ctx context.Context, p *plan, desired *gwv1.Gateway) error {
	return applyOwned(ctx, r.client, p, desired, func() *gwv1.Gateway { return &gwv1.Gateway{} }, "Gateway",
		ownedReasons{EventCreatedGateway, EventUpdatedGateway, EventFailedToCreateGateway, EventFailedToUpdateGateway},
		gatewayEqual, func(existing, desired *gwv1.Gateway) {
			existing.Spec.GatewayClassName, existing.Spec.Listeners = desired.Spec.GatewayClassName, desired.Spec.Listeners
		})
}

// applyRoute creates the HTTPRoute or brings the fields Manta sets (parent, match, backends and weights) in line.
func (r *Reconciler) applyRoute(ctx context.Context, p *plan, desired *gwv1.HTTPRoute) error {
	return applyOwned(ctx, r.client, p, desired, func() *gwv1.HTTPRoute { return &gwv1.HTTPRoute{} }, "HTTPRoute",
		ownedReasons{EventCreatedHTTPRoute, EventUpdatedHTTPRoute, EventFailedToCreateHTTPRoute, EventFailedToUpdateHTTPRoute},
		routeEqual, func(existing, desired *gwv1.HTTPRoute) {
			existing.Spec.ParentRefs, existing.Spec.Rules = desired.Spec.ParentRefs, desired.Spec.Rules
		})
}

// applyOwned creates desired, or writes what Manta sets (merge) onto the object of its name when that differs
// (equal); an object of that name the RayService does not control is left alone, reported, and fails the write.
// newObj makes an empty object of desired's type.
// One that exists already when created is looked at again as soon as the cache can show it.
func applyOwned[T client.Object](ctx context.Context, c client.Client, p *plan, desired T, newObj func() T, kind string, reasons ownedReasons,
	equal func(a, b T) bool, merge func(existing, desired T)) error {
	k := &reconcile.Owned[T]{
		Kind: kind,
		New:  newObj,
		Sync: func(existing, desired T) (T, bool, bool) {
			if equal(existing, desired) {
				return existing, false, false
			}
			u := existing.DeepCopyObject().(T)
			merge(u, desired)
			return u, true, false
		},
	}
	w := reconcile.Writer{Client: c, Reader: c, Owner: p.owner}
	_, op, err := reconcile.EnsureOwned(ctx, w, k, desired, func(op reconcile.Op, o T, err error) {
		switch {
		case op == reconcile.Exists:
			p.Requeue(0)
		case op == reconcile.Foreign:
			p.RelatedEventf(o, corev1.EventTypeWarning, reasons.failedUpdate, "Update", "Failed to update the %s %s/%s, it is not controlled by this RayService", kind, o.GetNamespace(), o.GetName())
		case op == reconcile.Created && err != nil:
			p.RelatedEventf(o, corev1.EventTypeWarning, reasons.failedCreate, "Create", "Failed to create the %s %s/%s: %v", kind, o.GetNamespace(), o.GetName(), err)
		case op == reconcile.Created:
			p.RelatedEventf(o, corev1.EventTypeNormal, reasons.created, "Create", "Created the %s %s/%s%s", kind, o.GetNamespace(), o.GetName(), routeNote(desired))
		case op == reconcile.Updated && err != nil:
			p.RelatedEventf(o, corev1.EventTypeWarning, reasons.failedUpdate, "Update", "Failed to update the %s %s/%s: %v", kind, o.GetNamespace(), o.GetName(), err)
		case op == reconcile.Updated:
			p.RelatedEventf(o, corev1.EventTypeNormal, reasons.updated, "Update", "Updated the %s %s/%s%s", kind, o.GetNamespace(), o.GetName(), routeNote(desired))
		}
	})
	if err == nil && op == reconcile.Foreign {
		err = fmt.Errorf("%s %s is not controlled by the RayService", kind, desired.GetName())
	}
	return err
}

// routeNote says where an HTTPRoute sends traffic, for its events.
func routeNote(o client.Object) string {
	if r, ok := o.(*gwv1.HTTPRoute); ok {
		return ": " + weights(r)
	}
	return ""
}

// deleteGatewayObjects deletes the service's HTTPRoute and Gateway.
func (r *Reconciler) deleteGatewayObjects(ctx context.Context, p *plan, rs *rayv1.RayService) error {
	for _, d := range []struct {
		o      client.Object
		reason string
	}{
		{&gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: rs.Namespace, Name: HTTPRouteName(rs)}}, EventDeletedHTTPRoute},
		{&gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: rs.Namespace, Name: GatewayName(rs)}}, EventDeletedGateway},
	} {
		o := d.o
		if err := r.client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("get %s: %w", o.GetName(), err)
		}
		if !metav1.IsControlledBy(o, rs) || o.GetDeletionTimestamp() != nil {
			continue
		}
		uid := o.GetUID()
		if err := r.client.Delete(ctx, o, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete %s: %w", o.GetName(), err)
		}
		p.RelatedEventf(o, corev1.EventTypeNormal, d.reason, "Suspend", "Deleted %s/%s: the RayService is suspended", o.GetNamespace(), o.GetName())
	}
	return nil
}

// gatewayEqual compares what Manta sets on a Gateway; the API server and the Gateway implementation default the rest.
func gatewayEqual(a, b *gwv1.Gateway) bool {
	if a.Spec.GatewayClassName != b.Spec.GatewayClassName || len(a.Spec.Listeners) != len(b.Spec.Listeners) {
		return false
	}
	for i := range a.Spec.Listeners {
		x, y := a.Spec.Listeners[i], b.Spec.Listeners[i]
		if x.Name != y.Name || x.Protocol != y.Protocol || x.Port != y.Port {
			return false
		}
	}
	return true
}

// routeEqual compares what Manta sets on an HTTPRoute.
func routeEqual(a, b *gwv1.HTTPRoute) bool {
	if len(a.Spec.ParentRefs) != len(b.Spec.ParentRefs) || len(a.Spec.Rules) != len(b.Spec.Rules) {
		return false
	}
	for i := range a.Spec.ParentRefs {
		x, y := a.Spec.ParentRefs[i], b.Spec.ParentRefs[i]
		if x.Name != y.Name || ptr.Deref(x.Namespace, "") != ptr.Deref(y.Namespace, "") {
			return false
		}
	}
	for i := range a.Spec.Rules {
		x, y := a.Spec.Rules[i], b.Spec.Rules[i]
		if len(x.Matches) != len(y.Matches) || len(x.BackendRefs) != len(y.BackendRefs) {
			return false
		}
		for j := range x.Matches {
			m, n := x.Matches[j].Path, y.Matches[j].Path
			if (m == nil) != (n == nil) || (m != nil && (ptr.Deref(m.Type, "") != ptr.Deref(n.Type, "") || ptr.Deref(m.Value, "") != ptr.Deref(n.Value, ""))) {
				return false
			}
		}
		for j := range x.BackendRefs {
			m, n := x.BackendRefs[j], y.BackendRefs[j]
			if m.Name != n.Name || ptr.Deref(m.Namespace, "") != ptr.Deref(n.Namespace, "") ||
				ptr.Deref(m.Port, 0) != ptr.Deref(n.Port, 0) || ptr.Deref(m.Weight, 1) != ptr.Deref(n.Weight, 1) {
				return false
			}
		}
	}
	return true
}

// weights says where the route sends traffic, for events.
func weights(r *gwv1.HTTPRoute) string {
	var parts []string
	for _, rule := range r.Spec.Rules {
		for _, b := range rule.BackendRefs {
			parts = append(parts, fmt.Sprintf("%s %d%%", b.Name, ptr.Deref(b.Weight, 1)))
		}
	}
	return strings.Join(parts, ", ")
}

// applyServeConfig sends the config to the cluster's head, then records on the cluster what was applied to which
// head, so that an unchanged config is not sent again.
func (r *Reconciler) applyServeConfig(ctx context.Context, a serveApply) error {
	c := a.cluster
	dash, err := r.dashboardFor(ctx, c, ray.Target{
		Namespace: c.Namespace, HeadServiceName: clusterbuild.HeadServiceName(c), DashboardPort: r.dashboardPort(ctx, c),
	})
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.RayCallTimeout)
	defer cancel()
	if err := dash.DeployServeConfigV2(cctx, a.config); err != nil {
		return err
	}
	// Applied: remembered before it is recorded on the cluster, so that a failed patch does not send it again.
	rec := appliedRecord{hash: a.hash, headID: a.headID}
	r.applied.Store(c.UID, rec)
	if err := r.recordApplied(ctx, c); err != nil {
		return err
	}
	// Later steps of this reconcile (annotation patches) build on the recorded state.
	rec.putOn(c)
	return nil
}

// recordApplied writes the Serve config this process applied to the cluster (its appliedRecord) on the cluster's
// annotations, where it outlives the process.
func (r *Reconciler) recordApplied(ctx context.Context, c *rayv1.RayCluster) error {
	v, ok := r.applied.Load(c.UID)
	if !ok {
		return nil
	}
	rec := v.(appliedRecord)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		clusterbuild.AnnotationServeConfigHash: rec.hash, clusterbuild.AnnotationServeConfigHead: rec.headID,
	}}})
	if err != nil {
		return err
	}
	if err := r.client.Patch(ctx, c.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("record the applied config on RayCluster %s: %w", c.Name, err)
	}
	rec.written = true
	r.applied.CompareAndSwap(c.UID, v, rec)
	return nil
}

// appliedRecord is a Serve config this process applied (hash) to a head (headID); written once the cluster's
// annotations say so.
type appliedRecord struct {
	hash, headID string
	written      bool
}

// withApplied puts on a cluster read from the cache the Serve config this process applied to it while the cached
// copy does not show it yet (a cache that has not seen the patch, or a patch that failed); once it does, the
// cluster speaks for itself and the record is dropped. It reports whether the record is still to be written.
func (r *Reconciler) withApplied(c *rayv1.RayCluster) (unwritten bool) {
	v, ok := r.applied.Load(c.UID)
	if !ok {
		return false
	}
	rec := v.(appliedRecord)
	if c.Annotations[clusterbuild.AnnotationServeConfigHash] == rec.hash && c.Annotations[clusterbuild.AnnotationServeConfigHead] == rec.headID {
		r.applied.CompareAndDelete(c.UID, v)
		return false
	}
	rec.putOn(c)
	return !rec.written
}

// putOn sets the annotations that record rec on c (a copy of their map: c may share it with the cache).
func (rec appliedRecord) putOn(c *rayv1.RayCluster) {
	c.Annotations = maps.Clone(c.Annotations)
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[clusterbuild.AnnotationServeConfigHash] = rec.hash
	c.Annotations[clusterbuild.AnnotationServeConfigHead] = rec.headID
}

func (r *Reconciler) dashboardPort(ctx context.Context, c *rayv1.RayCluster) int32 {
	svc := &corev1.Service{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: clusterbuild.HeadServiceName(c)}, svc); err != nil {
		return ray.DashboardPort(nil)
	}
	return ray.DashboardPort(svc)
}

// applyService creates the Service or brings the fields Manta owns in line. A Service of that name the RayService
// does not control is left alone, reported, and fails the write. The cache holds only Services labelled for a
// RayService, so a create that finds the name taken asks the API server whose the Service is.
func (r *Reconciler) applyService(ctx context.Context, p *plan, desired *corev1.Service) error {
	// moved: the update points the Service at another cluster, the only update KubeRay reports.
	var moved bool
	k := &reconcile.Owned[*corev1.Service]{
		Kind: "Service", New: func() *corev1.Service { return &corev1.Service{} },
		Sync: func(existing, desired *corev1.Service) (*corev1.Service, bool, bool) {
			relabelled := withoutRetiredLabels(existing, desired)
			updated, changed, recreate := clusterbuild.UpdateService(relabelled, desired)
			moved = relabelled.Spec.Selector[rayv1.LabelCluster] != updated.Spec.Selector[rayv1.LabelCluster]
			return updated, changed || relabelled != existing, recreate
		},
		Patch: true, OnExists: reconcile.ExistsCheck,
	}
	w := reconcile.Writer{Client: r.client, Reader: r.services, Live: r.apiReader, Owner: p.owner}
	_, op, err := reconcile.EnsureOwned(ctx, w, k, desired, func(op reconcile.Op, o *corev1.Service, err error) {
		switch {
		case op == reconcile.Taken:
			p.RelatedEventf(desired, corev1.EventTypeWarning, EventFailedToCreateService, "Create", "Failed to create the service %s/%s, it exists and is not controlled by this RayService", desired.Namespace, desired.Name)
		case op == reconcile.Foreign:
			p.RelatedEventf(desired, corev1.EventTypeWarning, EventFailedToUpdateService, "Update", "Failed to update the service %s/%s, it is not controlled by this RayService", desired.Namespace, desired.Name)
		case op == reconcile.Created && err != nil:
			p.RelatedEventf(desired, corev1.EventTypeWarning, EventFailedToCreateService, "Create", "Failed to create the service %s/%s, %v", desired.Namespace, desired.Name, err)
		case op == reconcile.Created:
			p.RelatedEventf(desired, corev1.EventTypeNormal, EventCreatedService, "Create", "Created the service %s/%s", desired.Namespace, desired.Name)
		case op == reconcile.Deleted && err == nil:
			// It could not switch between headless and not in place: created again once the cache shows it gone.
			p.Requeue(0)
		case op == reconcile.Updated && err != nil:
			p.RelatedEventf(o, corev1.EventTypeWarning, EventFailedToUpdateService, "Update", "Failed to update the service %s/%s, %v", o.Namespace, o.Name, err)
		case op == reconcile.Updated && moved:
			p.RelatedEventf(o, corev1.EventTypeNormal, EventUpdatedService, "Update", "Updated the service %s/%s", o.Namespace, o.Name)
		}
	})
	switch {
	case err != nil:
		return err
	case op == reconcile.Taken:
		return fmt.Errorf("service %s exists and is not controlled by the RayService", desired.Name)
	case op == reconcile.Foreign:
		return fmt.Errorf("service %s is not controlled by the RayService", desired.Name)
	}
	return nil
}

// retiredLabels are the labels earlier Manta versions put on a RayService's Services (the cluster's labels);
// KubeRay's, and now Manta's, label them for the RayService alone.
var retiredLabels = []string{rayv1.LabelCluster, rayv1.LabelAppName, rayv1.LabelCreatedBy}

// withoutRetiredLabels is svc without the retired labels desired does not set (the user's serveService may), or
// svc itself when it carries none: a Service made by an earlier version is relabelled, so that ray.io/cluster
// does not name a cluster the Service may no longer point at.
func withoutRetiredLabels(svc, desired *corev1.Service) *corev1.Service {
	out := svc
	for _, k := range retiredLabels {
		if _, has := svc.Labels[k]; !has {
			continue
		}
		if _, want := desired.Labels[k]; want {
			continue
		}
		if out == svc {
			out = svc.DeepCopy()
		}
		delete(out.Labels, k)
	}
	return out
}

// role names a cluster as KubeRay's events do: the pending one, or the active one.
func (p *plan) role(cluster string) string {
	if cluster == p.status.PendingServiceStatus.RayClusterName {
		return "pending"
	}
	return "active"
}

// recordWritten moves the prepared event of a cluster write that succeeded into the events to record.
func (p *plan) recordWritten(cluster string) {
	if e, ok := p.written[cluster]; ok {
		p.Events = append(p.Events, e)
		delete(p.written, cluster)
	}
}
