package imagepulljob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/ownerqueue"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/validation"
)

// RayClusterPrepullOptions configure the RayCluster prepull controller.
type RayClusterPrepullOptions struct {
	// Parallelism of prepull jobs when the RayCluster has no manta.dev/prepull-parallelism annotation. Default 10.
	Parallelism int32
}

// RayClusterPrepullReconciler pre-pulls a RayCluster's images through the ImagePullJob machinery: it gives a
// RayCluster annotated manta.dev/prepull-images: "true" one owned ImagePullJob per distinct image of its pods,
// targeting the nodes its head and worker groups can be scheduled to. It never touches the RayCluster or its pods, so
// cluster creation is not delayed. It lives in this package because it reads nodes through the ImagePullJob
// controller's trimmed node cache (its unexported cache field) and uses its node rules (nodeReady, toleratesNode).
type RayClusterPrepullReconciler struct {
	client client.Client
	jobs   *Reconciler // shares the ImagePullJob controller's trimmed node cache
	opts   RayClusterPrepullOptions
}

// NewRayClusterPrepullReconciler builds the prepull controller. It reads nodes through the ImagePullJob controller's
// cache, so register jobs (jobs.SetupWithManager) as well.
func NewRayClusterPrepullReconciler(
	mgr ctrl.Manager, jobs *Reconciler, opts RayClusterPrepullOptions,
) *RayClusterPrepullReconciler {
	if opts.Parallelism <= 0 {
		opts.Parallelism = defaultPrepullParallel
	}
	return &RayClusterPrepullReconciler{client: mgr.GetClient(), jobs: jobs, opts: opts}
}

// SetupWithManager registers the prepull controller: it watches RayClusters, their ImagePullJobs and node changes.
func (r *RayClusterPrepullReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("raycluster-prepull").
		For(&rayv1.RayCluster{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&mantav1alpha1.ImagePullJob{}, ownerqueue.Controller(schema.GroupKind{Group: rayv1.GroupVersion.Group, Kind: "RayCluster"}),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Kind(r.jobs.cache, &corev1.Node{},
			handler.TypedEnqueueRequestsFromMapFunc(r.clustersForNode), prepullNodeChanged())).
		Complete(r)
}

func prepullNodeChanged() predicate.TypedPredicate[*corev1.Node] {
	return predicate.TypedFuncs[*corev1.Node]{
		UpdateFunc: func(e event.TypedUpdateEvent[*corev1.Node]) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return !equality.Semantic.DeepEqual(o.Labels, n.Labels) || !equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
				nodeReady(o) != nodeReady(n) || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
		},
	}
}

func (r *RayClusterPrepullReconciler) clustersForNode(ctx context.Context, _ *corev1.Node) []ctrlreconcile.Request {
	var list rayv1.RayClusterList
	if err := r.client.List(ctx, &list); err != nil {
		log.FromContext(ctx).Error(err, "listing RayClusters for a node event")
		return nil
	}
	var out []ctrlreconcile.Request
	for i := range list.Items {
		if list.Items[i].Annotations[AnnotationPrepullImages] == "true" {
			out = append(out, ctrlreconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// +kubebuilder:rbac:groups=ray.io,resources=rayclusters,verbs=get;list;watch

// Reconcile makes the cluster's prepull jobs match its images and the nodes its groups can use.
func (r *RayClusterPrepullReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &rayv1.RayCluster{}
	if err := r.client.Get(ctx, req.NamespacedName, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var jobs mantav1alpha1.ImagePullJobList
	if err := r.client.List(ctx, &jobs, client.InNamespace(cluster.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	var owned []*mantav1alpha1.ImagePullJob
	for i := range jobs.Items {
		if ref := metav1.GetControllerOf(&jobs.Items[i]); ref != nil && ref.UID == cluster.UID {
			owned = append(owned, &jobs.Items[i])
		}
	}
	desired := map[string]*mantav1alpha1.ImagePullJob{}
	if cluster.DeletionTimestamp == nil && cluster.Annotations[AnnotationPrepullImages] == "true" {
		var nodes corev1.NodeList
		if err := r.jobs.cache.List(ctx, &nodes); err != nil {
			return ctrl.Result{}, err
		}
		for _, j := range DesiredPrepullJobs(cluster, nodes.Items, r.parallelism(cluster)) {
			desired[j.Name] = j
		}
	}
	var errs []error
	w := reconcile.Writer{Client: r.client, Owner: cluster}
	for _, j := range owned {
		want, ok := desired[j.Name]
		delete(desired, j.Name)
		if !ok {
			if err := r.client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				errs = append(errs, err)
			}
			continue
		}
		if _, _, err := reconcile.WriteOwned(ctx, w, &prepullKind, reconcile.PlanOwned(cluster, &prepullKind, want, j), nil); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range sets.List(sets.KeySet(desired)) {
		if _, _, err := reconcile.WriteOwned(ctx, w, &prepullKind, reconcile.PlanOwned(cluster, &prepullKind, desired[name], nil), nil); err != nil {
			errs = append(errs, err)
		}
	}
	return ctrl.Result{}, errors.Join(errs...)
}

// prepullKind writes a cluster's prepull jobs: the selector, pull secrets and parallelism follow the cluster; a job
// whose image changed is deleted, and the next reconcile creates it anew. One made meanwhile is as good as created.
var prepullKind = reconcile.Owned[*mantav1alpha1.ImagePullJob]{
	Kind: "ImagePullJob", New: func() *mantav1alpha1.ImagePullJob { return &mantav1alpha1.ImagePullJob{} },
	Sync: func(j, want *mantav1alpha1.ImagePullJob) (*mantav1alpha1.ImagePullJob, bool, bool) {
		if want.Spec.Image != j.Spec.Image {
			return j, true, true
		}
		if equality.Semantic.DeepEqual(j.Spec.Selector, want.Spec.Selector) && slices.Equal(j.Spec.PullSecrets, want.Spec.PullSecrets) &&
			equality.Semantic.DeepEqual(j.Spec.Parallelism, want.Spec.Parallelism) {
			return j, false, false
		}
		u := j.DeepCopy()
		u.Spec.Selector, u.Spec.PullSecrets, u.Spec.Parallelism = want.Spec.Selector, want.Spec.PullSecrets, want.Spec.Parallelism
		return u, true, false
	},
}

func (r *RayClusterPrepullReconciler) parallelism(c *rayv1.RayCluster) int32 {
	if v, err := strconv.ParseInt(c.Annotations[AnnotationPrepullParallelism], 10, 32); err == nil && v >= 0 {
		return int32(v)
	}
	return r.opts.Parallelism
}

// PrepullJobName is the deterministic name of the prepull job of an image in a cluster.
func PrepullJobName(cluster, image string) string {
	sum := sha256.Sum256([]byte(image))
	prefix := cluster
	if len(prefix) > 40 {
		prefix = strings.TrimRight(prefix[:40], "-.")
	}
	return fmt.Sprintf("%s-prepull-%s", prefix, hex.EncodeToString(sum[:5]))
}

// DesiredPrepullJobs returns one ImagePullJob per distinct valid image of the cluster's head and worker pods
// (containers, init containers, the autoscaler image), each on the union of the nodes where the groups using that
// image can be scheduled. Images whose groups fit no node get no job. The jobs never complete (type Never) so nodes
// that join later are pulled too.
func DesiredPrepullJobs(c *rayv1.RayCluster, nodes []corev1.Node, parallelism int32) []*mantav1alpha1.ImagePullJob {
	type group struct {
		spec   *corev1.PodSpec
		images []string
	}
	head := &c.Spec.HeadGroupSpec.Template.Spec
	groups := []group{{spec: head, images: podImages(head)}}
	if ptr.Deref(c.Spec.EnableInTreeAutoscaling, false) && c.Spec.AutoscalerOptions != nil && ptr.Deref(c.Spec.AutoscalerOptions.Image, "") != "" {
		groups[0].images = append(groups[0].images, *c.Spec.AutoscalerOptions.Image)
	}
	for i := range c.Spec.WorkerGroupSpecs {
		s := &c.Spec.WorkerGroupSpecs[i].Template.Spec
		groups = append(groups, group{spec: s, images: podImages(s)})
	}
	nodesOf := map[string]sets.Set[string]{}
	secretsOf := map[string]sets.Set[string]{}
	for _, g := range groups {
		fit := sets.New[string]()
		for i := range nodes {
			if PodFitsNode(g.spec, &nodes[i]) {
				fit.Insert(nodes[i].Name)
			}
		}
		for _, img := range g.images {
			if !validation.Image(img) {
				continue
			}
			if nodesOf[img] == nil {
				nodesOf[img], secretsOf[img] = sets.New[string](), sets.New[string]()
			}
			nodesOf[img] = nodesOf[img].Union(fit)
			for _, s := range g.spec.ImagePullSecrets {
				if s.Name != "" {
					secretsOf[img].Insert(s.Name)
				}
			}
		}
	}
	var out []*mantav1alpha1.ImagePullJob
	for _, img := range sets.List(sets.KeySet(nodesOf)) {
		if nodesOf[img].Len() == 0 {
			continue
		}
		j := &mantav1alpha1.ImagePullJob{
			ObjectMeta: metav1.ObjectMeta{
				Name:        PrepullJobName(c.Name, img),
				Namespace:   c.Namespace,
				Annotations: map[string]string{AnnotationPrepullImage: img},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: rayv1.GroupVersion.String(), Kind: "RayCluster", Name: c.Name, UID: c.UID,
					Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
				}},
			},
			Spec: mantav1alpha1.ImagePullJobSpec{
				Image:            img,
				ImagePullPolicy:  mantav1alpha1.PullIfNotPresent,
				Selector:         &mantav1alpha1.ImagePullJobNodeSelector{Names: sets.List(nodesOf[img])},
				Parallelism:      ptr.To(parallelism),
				CompletionPolicy: mantav1alpha1.CompletionPolicy{Type: mantav1alpha1.CompleteNever},
			},
		}
		if len(c.Name) <= 63 {
			j.Labels = map[string]string{LabelPrepullCluster: c.Name}
		}
		if secrets := sets.List(secretsOf[img]); len(secrets) > 0 {
			j.Spec.PullSecrets = secrets
		}
		out = append(out, j)
	}
	return out
}

func podImages(s *corev1.PodSpec) []string {
	var out []string
	for _, c := range s.InitContainers {
		out = append(out, c.Image)
	}
	for _, c := range s.Containers {
		out = append(out, c.Image)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// PodFitsNode reports whether the scheduler could place a pod with this spec on the node, as far as labels and taints
// go: the node is Ready, matches spec.nodeSelector and the required node affinity, and every NoSchedule/NoExecute
// taint is tolerated. Resources are not considered: the question is where the group can land, not where it fits now.
func PodFitsNode(spec *corev1.PodSpec, node *corev1.Node) bool {
	if node.DeletionTimestamp != nil || !nodeReady(node) {
		return false
	}
	if spec.NodeName != "" && spec.NodeName != node.Name {
		return false
	}
	if !labels.SelectorFromSet(spec.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		if !matchesNodeSelectorTerms(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, node) {
			return false
		}
	}
	return toleratesNode(spec.Tolerations, node)
}

// matchesNodeSelectorTerms: terms are ORed, the requirements of a term ANDed; an empty term matches nothing.
func matchesNodeSelectorTerms(terms []corev1.NodeSelectorTerm, node *corev1.Node) bool {
	for _, t := range terms {
		if len(t.MatchExpressions) == 0 && len(t.MatchFields) == 0 {
			continue
		}
		ok := true
		for _, r := range t.MatchExpressions {
			v, has := node.Labels[r.Key]
			ok = ok && matchRequirement(r, v, has)
		}
		for _, r := range t.MatchFields {
			ok = ok && r.Key == "metadata.name" && matchRequirement(r, node.Name, true)
		}
		if ok {
			return true
		}
	}
	return false
}

func matchRequirement(r corev1.NodeSelectorRequirement, v string, has bool) bool {
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return has && slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return !has || !slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpExists:
		return has
	case corev1.NodeSelectorOpDoesNotExist:
		return !has
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !has || len(r.Values) != 1 {
			return false
		}
		got, err1 := strconv.ParseInt(v, 10, 64)
		want, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.Operator == corev1.NodeSelectorOpGt {
			return got > want
		}
		return got < want
	}
	return false
}
