package imagepulljob

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	"github.com/manta-dev/manta/internal/controller/shared/createbackoff"
	"github.com/manta-dev/manta/internal/controller/shared/ownerqueue"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/metrics"
)

// Options configure the ImagePullJob controller.
type Options struct {
	// PullerImage is Manta's own image, which holds the puller binary. Default DefaultPullerImage.
	PullerImage string
	// PullerBinaryPath is the puller binary inside PullerImage. Default DefaultPullerBinaryPath.
	PullerBinaryPath string
	// RetryBackoff is the pause before the first retry on a node; it doubles per attempt up to 5 minutes.
	// Default 10s.
	RetryBackoff time.Duration
	// PodSelectorResync is how often jobs with spec.podSelector re-read the pods they follow (those pods are not
	// watched, to keep the cache to puller pods). Default 30s.
	PodSelectorResync time.Duration
	// MaxConcurrentReconciles defaults to 4.
	MaxConcurrentReconciles int
	// StatusWriter writes the ImagePullJobs' status (reconcile.ClientStatus of the manager's client when nil).
	StatusWriter reconcile.StatusWriter
	// CreateBackoffBase and CreateBackoffMax time the retries of puller creates the API server refused (a
	// ResourceQuota, an admission webhook): the first waits Base, each next one twice as long, up to Max (defaults
	// 1 s and 5 minutes, as for RayCluster pods).
	CreateBackoffBase, CreateBackoffMax time.Duration
	// Clock is the controller's time (reconcile.RealClock when nil).
	Clock reconcile.Clock
	// Policy bounds every job's pullers: the nodes they may go to, their tolerations and priority class.
	Policy Policy
}

// Reconciler reconciles ImagePullJobs.
type Reconciler struct {
	client    client.Client
	apiReader client.Reader
	// cache holds only puller pods (label selector) and trimmed Nodes, whatever the manager's cache holds.
	cache    cache.Cache
	recorder events.EventRecorder
	opts     Options
	exp      *expectations
	backoff  *createbackoff.Backoff
	life     *reconcile.Lifecycle[*mantav1alpha1.ImagePullJob, mantav1alpha1.ImagePullJobStatus]
}

// NewReconciler builds the controller from the manager's client, config and scheme. Register it with
// SetupWithManager.
func NewReconciler(mgr ctrl.Manager, opts Options) (*Reconciler, error) {
	if opts.RetryBackoff <= 0 {
		opts.RetryBackoff = defaultRetryBackoff
	}
	if opts.PodSelectorResync <= 0 {
		opts.PodSelectorResync = defaultSelectorResync
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = 4
	}
	if opts.Clock == nil {
		opts.Clock = reconcile.RealClock
	}
	if opts.StatusWriter == nil {
		opts.StatusWriter = reconcile.ClientStatus(mgr.GetClient())
	}
	c, err := newPullerCache(mgr)
	if err != nil {
		return nil, err
	}
	r := &Reconciler{
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		cache:     c,
		recorder:  mgr.GetEventRecorder("imagepulljob-controller"),
		opts:      opts,
		exp:       newExpectations(opts.Clock.Now),
		backoff:   createbackoff.New(opts.CreateBackoffBase, opts.CreateBackoffMax),
	}
	r.life = r.lifecycle()
	return r, nil
}

func newPullerCache(mgr ctrl.Manager) (cache.Cache, error) {
	puller, err := labels.NewRequirement(LabelImagePuller, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	return cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(),
		Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:  {Label: labels.NewSelector().Add(*puller), Transform: cache.TransformStripManagedFields()},
			&corev1.Node{}: {Transform: trimNode},
		},
	})
}

// trimNode keeps what node selection reads, so a large cluster's Nodes cost little memory.
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{
		TypeMeta: n.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels,
			CreationTimestamp: n.CreationTimestamp, DeletionTimestamp: n.DeletionTimestamp,
		},
		Spec: corev1.NodeSpec{Taints: n.Spec.Taints, Unschedulable: n.Spec.Unschedulable},
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	for _, img := range n.Status.Images {
		out.Status.Images = append(out.Status.Images, corev1.ContainerImage{Names: img.Names})
	}
	return out, nil
}

// SetupWithManager registers the controller, its pod and node cache, and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.Add(r.cache); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("imagepulljob").
		For(&mantav1alpha1.ImagePullJob{}, builder.WithPredicates(predicate.Funcs{
			// Our own status writes come back as updates; they are needed (pods are deleted once their node's
			// outcome is stored), so only deletions are filtered out.
			DeleteFunc: func(e event.DeleteEvent) bool {
				r.exp.Forget(e.Object.GetUID())
				return false
			},
		})).
		WatchesRawSource(source.Kind(r.cache, &corev1.Pod{},
			ownerqueue.TypedController[*corev1.Pod](schema.GroupKind{Group: mantav1alpha1.GroupVersion.Group, Kind: "ImagePullJob"}))).
		WatchesRawSource(source.Kind(r.cache, &corev1.Node{},
			handler.TypedEnqueueRequestsFromMapFunc(r.jobsForNode), nodeChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles}).
		Complete(r)
}

// nodeChanged passes node events that can change a job's node set or an IfNotPresent decision; heartbeats do not.
func nodeChanged() predicate.TypedPredicate[*corev1.Node] {
	return predicate.TypedFuncs[*corev1.Node]{
		UpdateFunc: func(e event.TypedUpdateEvent[*corev1.Node]) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return !equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
				!equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
				!equality.Semantic.DeepEqual(o.Status.Images, n.Status.Images) ||
				nodeReady(o) != nodeReady(n) ||
				(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
		},
	}
}

// jobsForNode enqueues every unfinished job: any of them may select the node.
func (r *Reconciler) jobsForNode(ctx context.Context, _ *corev1.Node) []ctrlreconcile.Request {
	var jobs mantav1alpha1.ImagePullJobList
	if err := r.client.List(ctx, &jobs); err != nil {
		log.FromContext(ctx).Error(err, "listing ImagePullJobs for a node event")
		return nil
	}
	var out []ctrlreconcile.Request
	for i := range jobs.Items {
		if jobs.Items[i].Status.CompletionTime == nil {
			out = append(out, ctrlreconcile.Request{NamespacedName: client.ObjectKeyFromObject(&jobs.Items[i])})
		}
	}
	return out
}

// +kubebuilder:rbac:groups=manta.dev,resources=imagepulljobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=manta.dev,resources=imagepulljobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile runs the shared skeleton (reconcile.Lifecycle) with the ImagePullJob's live part; a deleted job needs
// nothing (its pullers go with it through their owner reference).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.life.Reconcile(ctx, req)
}

func (r *Reconciler) lifecycle() *reconcile.Lifecycle[*mantav1alpha1.ImagePullJob, mantav1alpha1.ImagePullJobStatus] {
	return &reconcile.Lifecycle[*mantav1alpha1.ImagePullJob, mantav1alpha1.ImagePullJobStatus]{
		Client:       r.client,
		Recorder:     r.recorder,
		New:          func() *mantav1alpha1.ImagePullJob { return &mantav1alpha1.ImagePullJob{} },
		Forget:       r.backoff.Succeeded,
		Live:         r.live,
		Status:       func(job *mantav1alpha1.ImagePullJob) *mantav1alpha1.ImagePullJobStatus { return &job.Status },
		CopyStatus:   (*mantav1alpha1.ImagePullJobStatus).DeepCopy,
		StatusWriter: r.opts.StatusWriter,
	}
}

// live reads the job's puller pods and the nodes, plans (computePlan, pure), writes the pod differences and leaves
// the planned status in job.
func (r *Reconciler) live(ctx context.Context, job *mantav1alpha1.ImagePullJob, _ *mantav1alpha1.ImagePullJobStatus, res *reconcile.Result) (reconcile.StatusStep, error) {
	var step reconcile.StatusStep
	key := client.ObjectKeyFromObject(job)
	now := r.opts.Clock.Now()

	if expiry, ok := ttlExpiry(job); ok && !now.Before(expiry) {
		log.FromContext(ctx).V(1).Info("deleting finished ImagePullJob after ttlSecondsAfterFinished", "imagePullJob", klog.KObj(job))
		uid := job.UID
		err := r.client.Delete(ctx, job, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
		return step, client.IgnoreNotFound(err)
	}

	var pods corev1.PodList
	if err := r.cache.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{LabelJobUID: string(job.UID)}); err != nil {
		return step, err
	}
	var nodes corev1.NodeList
	// The planner only reads nodes; skipping the copy matters with thousands of them.
	if err := r.cache.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return step, err
	}
	var selectorPods []corev1.Pod
	if job.Spec.PodSelector != nil && job.Status.CompletionTime == nil {
		sel, err := metav1.LabelSelectorAsSelector(job.Spec.PodSelector)
		if err != nil {
			invalid(job, fmt.Sprintf("spec.podSelector is invalid: %v", err), res)
			return step, nil
		}
		var list corev1.PodList
		if err := r.apiReader.List(ctx, &list, client.InNamespace(job.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return step, err
		}
		selectorPods = list.Items
	}

	pending, _ := r.exp.Observe(job.UID, pods.Items)
	p, err := computePlan(observed{
		job:             job,
		nodes:           nodes.Items,
		pods:            pods.Items,
		pendingCreates:  pending,
		podSelectorPods: selectorPods,
		now:             now,
		retryBase:       r.opts.RetryBackoff,
		podOptions:      PodOptions{PullerImage: r.opts.PullerImage, PullerBinaryPath: r.opts.PullerBinaryPath, Policy: r.opts.Policy},
	})
	if err != nil {
		invalid(job, fmt.Sprintf("spec.selector is invalid: %v", err), res)
		return step, nil
	}

	r.createPullers(ctx, key, job, p.create, now, &p)
	podErr := r.deletePods(ctx, job, p.delete)

	if !equality.Semantic.DeepEqual(job.Status, p.status) {
		job.Status = p.status
		statusEvents(job, &p)
		step.Stored = func() {
			for _, pull := range p.pulls {
				metrics.ObservePull(pull.outcome, pull.duration)
			}
		}
	}
	if expiry, ok := ttlExpiry(job); ok {
		p.Requeue(expiry.Sub(now))
	}
	if r.exp.Outstanding(job.UID) {
		// A delete whose pod event never comes would otherwise hold its slot until something else woke the job.
		p.Requeue(expectationsTimeout)
	}
	if job.Spec.PodSelector != nil && job.Status.CompletionTime == nil {
		p.Requeue(r.opts.PodSelectorResync)
	}
	res.Merge(&p.Result, len(res.Events))
	return step, podErr
}

// invalid records a spec problem the schema cannot catch (e.g. a malformed label selector value) in the status, and
// reports it once.
func invalid(job *mantav1alpha1.ImagePullJob, msg string, res *reconcile.Result) {
	if job.Status.Message == msg {
		return
	}
	job.Status.Message = msg
	job.Status.ObservedGeneration = job.Generation
	res.StatusEventf(corev1.EventTypeWarning, ReasonInvalidSpec, "Validate", "%s", msg)
}

func (r *Reconciler) deletePods(ctx context.Context, job *mantav1alpha1.ImagePullJob, pods []*corev1.Pod) error {
	var todo []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil && ptr.Deref(p.DeletionGracePeriodSeconds, -1) == 0 {
			continue // already deleted with no grace: a second delete changes nothing
		}
		if r.exp.ExpectDelete(job.UID, p.UID) {
			todo = append(todo, p)
		}
	}
	errs := make([]error, len(todo))
	workqueue.ParallelizeUntil(ctx, createParallelism, len(todo), func(i int) {
		p := todo[i]
		uid := p.UID
		// Grace 0: a puller holds no state, and the slot should free at once.
		err := r.client.Delete(ctx, p, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid})
		// Only NotFound says the pod is gone. A Conflict is no proof: besides a failed UID precondition (the pod
		// was replaced) it is what a refused write looks like, with the pod still there. Kept, its expectation
		// would stop every later reconcile from sending the delete again while the pod holds a parallelism slot
		// and no event comes to wake the job (issue 39). Forgotten and retried, a replaced pod's delete ends in
		// NotFound or in a cache that no longer lists it.
		if err != nil && !apierrors.IsNotFound(err) {
			r.exp.DeleteFailed(job.UID, p.UID)
			errs[i] = fmt.Errorf("deleting pod %s: %w", p.Name, err)
		}
	})
	return errors.Join(errs...)
}

// createPullers creates the planned puller pods unless an earlier refusal's backoff still holds them, and asks p to
// look again when creates wait or were refused. A refused create is reported once per streak
// (a FailedCreate event with the API server's reason) and logged each time; the retries wait 1 s, 2 s, 4 s … (the
// work queue's own limiter would start at 5 ms). Only a reconcile whose creates all went through ends the backoff.
// A pod not created is taken out of status.active.
func (r *Reconciler) createPullers(ctx context.Context, key types.NamespacedName, job *mantav1alpha1.ImagePullJob, pods []*corev1.Pod, now time.Time, p *plan) {
	if len(pods) == 0 {
		return
	}
	if w := r.backoff.Wait(key, job.Generation, r.opts.Clock.Now()); w > 0 {
		notCreated(pods, &p.status)
		p.Requeue(w)
		return
	}
	errs := make([]error, len(pods))
	workqueue.ParallelizeUntil(ctx, createParallelism, len(pods), func(i int) {
		p := pods[i]
		if err := r.client.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
			errs[i] = err
			return
		}
		r.exp.ExpectCreate(job.UID, p.Name, pendingPod{name: p.Name, node: p.Spec.NodeName, attempt: podAttempt(p), created: now})
	})
	var refused []*corev1.Pod
	var first error
	var firstPod *corev1.Pod
	for i, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first, firstPod = err, pods[i]
		}
		refused = append(refused, pods[i])
	}
	if len(refused) == 0 {
		r.backoff.Succeeded(key)
		return
	}
	notCreated(refused, &p.status)
	delay, report := r.backoff.Failed(key, job.Generation, r.opts.Clock.Now(), ReasonFailedCreate)
	if report {
		p.Eventf(corev1.EventTypeWarning, ReasonFailedCreate, "Create", "failed to create %d puller pod(s): %s",
			len(refused), createbackoff.StableMessage(first, firstPod))
	}
	log.FromContext(ctx).Info("puller pod create refused; retrying after a backoff", "refused", len(refused), "retryAfter", delay, "error", first.Error())
	p.Requeue(delay)
}

// notCreated takes pods that were planned but not created out of status.active (a retry's pod was already counted
// as failed on its node, not active).
func notCreated(pods []*corev1.Pod, st *mantav1alpha1.ImagePullJobStatus) {
	for _, p := range pods {
		if podAttempt(p) == 1 {
			st.Active--
		}
	}
}

// statusEvents reports the status changes of the plan, once job.Status holds the plan's status.
func statusEvents(job *mantav1alpha1.ImagePullJob, p *plan) {
	if p.excludedChanged {
		if c := meta.FindStatusCondition(job.Status.Conditions, ConditionNodesExcluded); c != nil {
			p.StatusEventf(corev1.EventTypeNormal, ConditionNodesExcluded, "Select", "%s", c.Message)
		}
	}
	if p.priorityClassChanged {
		if c := meta.FindStatusCondition(job.Status.Conditions, ConditionPriorityClassNotUsed); c != nil {
			p.StatusEventf(corev1.EventTypeWarning, ConditionPriorityClassNotUsed, "Create", "%s", c.Message)
		}
	}
	if n := len(p.newlyFailed); n > 0 && !(p.completed && job.Status.Message == MessageDeadlineExceeded) {
		var parts []string
		for i, f := range p.newlyFailed {
			if i == 5 {
				parts = append(parts, fmt.Sprintf("and %d more", n-5))
				break
			}
			parts = append(parts, fmt.Sprintf("%s (%s)", f.Name, f.Reason))
		}
		p.StatusEventf(corev1.EventTypeWarning, "PullFailed", "Pull",
			"image %s could not be pulled on %d node(s): %s", job.Spec.Image, n, strings.Join(parts, ", "))
	}
	if p.completed {
		if job.Status.Message == MessageDeadlineExceeded {
			p.StatusEventf(corev1.EventTypeWarning, ReasonDeadlineExceeded, "Complete",
				"job exceeded activeDeadlineSeconds: %d of %d nodes have the image", job.Status.Succeeded, job.Status.Desired)
		} else {
			p.StatusEventf(corev1.EventTypeNormal, ReasonCompleted, "Complete",
				"%d of %d nodes have the image, %d failed", job.Status.Succeeded, job.Status.Desired, job.Status.Failed)
		}
	}
}

var _ ctrlreconcile.Reconciler = &Reconciler{}
