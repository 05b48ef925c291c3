package rayservice

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/ray"
)

// ownedClusters lists the RayClusters the service controls.
func (r *Reconciler) ownedClusters(ctx context.Context, rs *rayv1.RayService) ([]rayv1.RayCluster, error) {
	var list rayv1.RayClusterList
	if err := r.client.List(ctx, &list, client.InNamespace(rs.Namespace), client.MatchingLabels{rayv1.LabelOriginCRName: rs.Name}); err != nil {
		return nil, fmt.Errorf("list RayClusters: %w", err)
	}
	var out []rayv1.RayCluster
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], rs) {
			out = append(out, list.Items[i])
		}
	}
	return out, nil
}

// observe reads the service's clusters and their pods from the cache, and asks each ready head for its Serve
// applications and each running pod's Serve proxy for its health.
func (r *Reconciler) observe(ctx context.Context, rs *rayv1.RayService) (observed, error) {
	o := observed{rs: rs, now: r.opts.Clock.Now(), newName: func() string { return clusterbuild.ChildClusterName(rs.Name, r.opts.Rand) }, noZeroDowntime: r.opts.NoZeroDowntime,
		gatewayAPI: r.gatewayAPI}
	var err error
	if o.clusters, err = r.ownedClusters(ctx, rs); err != nil {
		return o, err
	}
	if incremental(rs) && r.gatewayAPI {
		if o.gateway, o.route, err = r.gatewayObjects(ctx, rs); err != nil {
			return o, err
		}
	}
	if rs.Spec.Suspend || len(validate(rs)) > 0 {
		return o, nil
	}
	for _, slot := range []struct {
		name string
		dst  **clusterObs
	}{{rs.Status.ActiveServiceStatus.RayClusterName, &o.active}, {rs.Status.PendingServiceStatus.RayClusterName, &o.pending}} {
		if slot.name == "" {
			continue
		}
		co := &clusterObs{}
		*slot.dst = co
		for i := range o.clusters {
			if o.clusters[i].Name == slot.name && o.clusters[i].DeletionTimestamp == nil {
				co.cluster = &o.clusters[i]
			}
		}
		if co.cluster == nil {
			continue
		}
		co.recordUnwritten = r.withApplied(co.cluster)
		if err := r.observeCluster(ctx, rs, co); err != nil {
			return o, err
		}
	}
	return o, nil
}

func (r *Reconciler) observeCluster(ctx context.Context, rs *rayv1.RayService, co *clusterObs) error {
	c := co.cluster
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(c.Namespace), clusterpods.Of(c.Name)); err != nil {
		return fmt.Errorf("list pods of RayCluster %s: %w", c.Name, err)
	}
	for i := range pods.Items {
		p := pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		co.pods = append(co.pods, p)
	}
	for i := range co.pods {
		if co.pods[i].Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead && co.pods[i].Status.Phase == corev1.PodRunning {
			co.head = &co.pods[i]
		}
	}
	co.headReady = co.head != nil && clusterbuild.PodRunningAndReady(co.head) && co.head.Status.PodIP != ""
	if !co.headReady {
		return nil
	}
	headSvc := &corev1.Service{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: clusterbuild.HeadServiceName(c)}, headSvc); err != nil {
		headSvc = nil
	}
	target := ray.Target{
		Namespace: c.Namespace, HeadServiceName: clusterbuild.HeadServiceName(c),
		DashboardPort: ray.DashboardPort(headSvc), ServePort: servePort(c),
	}
	if dash, err := r.dashboardFor(ctx, c, target); err != nil {
		co.detailsErr = err
	} else {
		cctx, cancel := context.WithTimeout(ctx, r.opts.RayCallTimeout)
		co.details, co.detailsErr = dash.GetServeDetails(cctx)
		cancel()
	}
	if co.detailsErr != nil {
		log.FromContext(ctx).V(1).Info("serve details unavailable", "cluster", c.Name, "error", co.detailsErr.Error())
	}
	co.proxyHealthy = r.checkProxies(ctx, rs, co, target)
	return nil
}

// checkProxies asks the head's Serve proxy for /-/healthz: its answer decides the head's ray.io/serve label
// (planServeLabels), the only one the operator changes. Workers keep the label they are created with and their
// readiness probe checks their proxy, so asking them would cost one proxied call per worker per reconcile for an
// answer nothing reads; KubeRay v1.5.0 asks the head only. An excluded head is labelled false
// whatever its proxy says, so it is not asked.
func (r *Reconciler) checkProxies(ctx context.Context, rs *rayv1.RayService, co *clusterObs, base ray.Target) map[string]bool {
	p := co.head
	if p == nil || p.Status.PodIP == "" || rs.Spec.ExcludeHeadPodFromServeSvc {
		return nil
	}
	t := base
	t.HeadPodName, t.HeadPodIP = p.Name, p.Status.PodIP
	proxy, err := r.opts.RayClients.ServeProxyFor(t)
	if err != nil {
		return map[string]bool{p.Name: false}
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.RayCallTimeout)
	defer cancel()
	return map[string]bool{p.Name: proxy.CheckHealth(cctx) == nil}
}

// servePort is the port of the head Ray container's port named "serve", or Serve's default.
func servePort(c *rayv1.RayCluster) int32 {
	if cs := c.Spec.HeadGroupSpec.Template.Spec.Containers; len(cs) > 0 {
		for _, p := range cs[clusterbuild.RayContainerIndex].Ports {
			if p.Name == clusterbuild.ServePortName && p.ContainerPort > 0 {
				return p.ContainerPort
			}
		}
	}
	return ray.DefaultServePort
}

// gatewayObjects reads the service's Gateway and HTTPRoute; nil when absent.
func (r *Reconciler) gatewayObjects(ctx context.Context, rs *rayv1.RayService) (*gwv1.Gateway, *gwv1.HTTPRoute, error) {
	g, route := &gwv1.Gateway{}, &gwv1.HTTPRoute{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: GatewayName(rs)}, g); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("get Gateway %s: %w", GatewayName(rs), err)
		}
		g = nil
	}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: HTTPRouteName(rs)}, route); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("get HTTPRoute %s: %w", HTTPRouteName(rs), err)
		}
		route = nil
	}
	return g, route, nil
}
