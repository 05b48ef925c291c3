package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// The console's live data: every open console page holds one server-sent-events stream, and the server keeps a
// Kubernetes list+watch per kind (and per namespace, for a caller who may list only some) behind it, with the
// caller's own token. Kubernetes authorises every list and watch itself, so the console shows exactly what the
// caller may list; what it may not list is an error line in the stream, never data.

// consoleKind is one kind the console lists.
type consoleKind struct {
	plural, kind, group string
	newList             func() client.ObjectList
	summarize           func(client.Object) consoleItem
}

var consoleKinds = []consoleKind{
	{plural: "rayclusters", kind: "RayCluster", group: groupRay, newList: func() client.ObjectList { return &rayv1.RayClusterList{} }, summarize: summarizeCluster},
	{plural: "rayjobs", kind: "RayJob", group: groupRay, newList: func() client.ObjectList { return &rayv1.RayJobList{} }, summarize: summarizeJob},
	{plural: "rayservices", kind: "RayService", group: groupRay, newList: func() client.ObjectList { return &rayv1.RayServiceList{} }, summarize: summarizeService},
	{plural: "raycronjobs", kind: "RayCronJob", group: groupRay, newList: func() client.ObjectList { return &rayv1.RayCronJobList{} }, summarize: summarizeCronJob},
	{plural: "imagepulljobs", kind: "ImagePullJob", group: groupManta, newList: func() client.ObjectList { return &mantav1alpha1.ImagePullJobList{} }, summarize: summarizeImagePullJob},
}

func consoleKindByPlural(p string) (consoleKind, bool) {
	for _, k := range consoleKinds {
		if k.plural == p {
			return k, true
		}
	}
	return consoleKind{}, false
}

// consoleItem is what a list row and a detail page's header show: status in words, not the object.
type consoleItem struct {
	Kind      string    `json:"kind"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Created   time.Time `json:"created"`
	// State is one word or two (ready, RUNNING/SUCCEEDED, Running); Summary is a sentence a person reads.
	State   string `json:"state"`
	Summary string `json:"summary"`
	// Suspend is the object's spec.suspend, for kinds that have one (nil otherwise).
	Suspend    *bool              `json:"suspend,omitempty"`
	Conditions []consoleCondition `json:"conditions,omitempty"`
	// Clusters are the RayClusters the object runs on, whose pods its page shows.
	Clusters []string `json:"clusters,omitempty"`
	// Dashboard is the path of the Ray dashboard through this server's services proxy (Kubernetes'), when known.
	Dashboard string `json:"dashboard,omitempty"`
	// Phases are the times the object entered each state, as Manta records them (RayCluster stateTransitionTimes).
	Phases []consolePhase `json:"phases,omitempty"`
}

type consoleCondition struct {
	Type    string    `json:"type"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
	Since   time.Time `json:"since"`
}

type consolePhase struct {
	State string    `json:"state"`
	At    time.Time `json:"at"`
}

func baseItem(kind string, o client.Object) consoleItem {
	return consoleItem{Kind: kind, Namespace: o.GetNamespace(), Name: o.GetName(), Created: o.GetCreationTimestamp().Time}
}

func conditions(cs []metav1.Condition) []consoleCondition {
	out := make([]consoleCondition, 0, len(cs))
	for _, c := range cs {
		out = append(out, consoleCondition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message, Since: c.LastTransitionTime.Time})
	}
	return out
}

// dashboardPath is the services-proxy path of a head Service's dashboard port; Kubernetes authorises it against the
// caller's services/proxy rights when the browser follows it.
func dashboardPath(ns, svc string) string {
	if svc == "" {
		return ""
	}
	return fmt.Sprintf("/api/v1/namespaces/%s/services/%s:dashboard/proxy/", ns, svc)
}

func summarizeCluster(o client.Object) consoleItem {
	c := o.(*rayv1.RayCluster)
	it := baseItem("RayCluster", c)
	it.State = string(c.Status.State)
	if it.State == "" {
		it.State = "pending"
	}
	it.Summary = fmt.Sprintf("%d of %d workers ready", c.Status.ReadyWorkerReplicas, c.Status.DesiredWorkerReplicas)
	if c.Status.Reason != "" {
		it.Summary += "; " + c.Status.Reason
	}
	it.Suspend = ptr.To(ptr.Deref(c.Spec.Suspend, false))
	it.Conditions = conditions(c.Status.Conditions)
	it.Clusters = []string{c.Name}
	if c.Status.Head.ServiceName != "" {
		it.Dashboard = dashboardPath(c.Namespace, c.Status.Head.ServiceName)
	}
	for s, t := range c.Status.StateTransitionTimes {
		if t != nil {
			it.Phases = append(it.Phases, consolePhase{State: string(s), At: t.Time})
		}
	}
	sort.Slice(it.Phases, func(i, j int) bool { return it.Phases[i].At.Before(it.Phases[j].At) })
	return it
}

func summarizeJob(o client.Object) consoleItem {
	j := o.(*rayv1.RayJob)
	it := baseItem("RayJob", j)
	it.State = string(j.Status.JobDeploymentStatus)
	if it.State == "" {
		it.State = "New"
	}
	if j.Status.JobStatus != "" {
		it.State += " / " + string(j.Status.JobStatus)
	}
	it.Summary = j.Status.Message
	if j.Status.Reason != "" {
		it.Summary = strings.TrimPrefix(string(j.Status.Reason)+": "+it.Summary, ": ")
	}
	if it.Summary == "" {
		it.Summary = "entrypoint: " + j.Spec.Entrypoint
	}
	it.Suspend = ptr.To(j.Spec.Suspend)
	if n := j.Status.RayClusterName; n != "" {
		it.Clusters = []string{n}
		if svc := j.Status.RayClusterStatus.Head.ServiceName; svc != "" {
			it.Dashboard = dashboardPath(j.Namespace, svc)
		}
	}
	return it
}

func summarizeService(o client.Object) consoleItem {
	s := o.(*rayv1.RayService)
	it := baseItem("RayService", s)
	it.State = string(s.Status.ServiceStatus)
	if it.State == "" {
		it.State = "pending"
	}
	var apps []string
	for name, a := range s.Status.ActiveServiceStatus.Applications {
		apps = append(apps, name+" "+a.Status)
	}
	sort.Strings(apps)
	it.Summary = fmt.Sprintf("%d serve endpoints", s.Status.NumServeEndpoints)
	if len(apps) > 0 {
		it.Summary += "; applications: " + strings.Join(apps, ", ")
	}
	it.Conditions = conditions(s.Status.Conditions)
	for _, st := range []rayv1.RayServiceStatus{s.Status.ActiveServiceStatus, s.Status.PendingServiceStatus} {
		if st.RayClusterName != "" {
			it.Clusters = append(it.Clusters, st.RayClusterName)
		}
	}
	if svc := s.Status.ActiveServiceStatus.RayClusterStatus.Head.ServiceName; svc != "" {
		it.Dashboard = dashboardPath(s.Namespace, svc)
	}
	return it
}

func summarizeCronJob(o client.Object) consoleItem {
	c := o.(*rayv1.RayCronJob)
	it := baseItem("RayCronJob", c)
	suspended := ptr.Deref(c.Spec.Suspend, false)
	it.Suspend = &suspended
	it.State = "scheduled"
	if suspended {
		it.State = "suspended"
	}
	it.Summary = "schedule " + c.Spec.Schedule
	if t := c.Status.LastScheduleTime; t != nil {
		it.Summary += "; last run " + t.UTC().Format(time.RFC3339)
	}
	it.Conditions = conditions(c.Status.Conditions)
	return it
}

func summarizeImagePullJob(o client.Object) consoleItem {
	j := o.(*mantav1alpha1.ImagePullJob)
	it := baseItem("ImagePullJob", j)
	switch {
	case j.Status.CompletionTime != nil:
		it.State = "complete"
	case j.Status.Failed > 0:
		it.State = "failing"
	default:
		it.State = "pulling"
	}
	it.Summary = fmt.Sprintf("%s: %d of %d nodes pulled, %d failed", j.Spec.Image, j.Status.Succeeded, j.Status.Desired, j.Status.Failed)
	if j.Status.Message != "" {
		it.Summary += "; " + j.Status.Message
	}
	return it
}

// consolePod is one row of a detail page's pod table.
type consolePod struct {
	Name       string    `json:"name"`
	Role       string    `json:"role"`
	Group      string    `json:"group,omitempty"`
	Phase      string    `json:"phase"`
	Ready      string    `json:"ready"`
	Restarts   int32     `json:"restarts"`
	Node       string    `json:"node,omitempty"`
	Containers []string  `json:"containers"`
	Created    time.Time `json:"created"`
}

func summarizePod(p *corev1.Pod) consolePod {
	out := consolePod{Name: p.Name, Phase: string(p.Status.Phase), Node: p.Spec.NodeName, Created: p.CreationTimestamp.Time,
		Role: p.Labels[rayv1.LabelNodeType], Group: p.Labels[rayv1.LabelGroup]}
	if out.Role == "" {
		out.Role = "submitter"
	}
	if p.DeletionTimestamp != nil {
		out.Phase = "Terminating"
	}
	ready := 0
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Ready {
			ready++
		}
		out.Restarts += cs.RestartCount
		if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" && out.Phase != "Terminating" {
			out.Phase = cs.State.Waiting.Reason
		}
	}
	out.Ready = fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers))
	for _, c := range p.Spec.Containers {
		out.Containers = append(out.Containers, c.Name)
	}
	return out
}

// consoleEvent is one row of a detail page's events.
type consoleEvent struct {
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Object  string    `json:"object"`
	Message string    `json:"message"`
	Count   int32     `json:"count"`
	Last    time.Time `json:"last"`
}

func summarizeEvent(e *corev1.Event) consoleEvent {
	last := e.LastTimestamp.Time
	if last.IsZero() {
		last = e.EventTime.Time
	}
	if last.IsZero() {
		last = e.CreationTimestamp.Time
	}
	return consoleEvent{Type: e.Type, Reason: e.Reason, Object: e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name,
		Message: e.Message, Count: max(e.Count, 1), Last: last}
}

// callerClient is a Kubernetes client that acts as the caller: with their token, or under auth none with this
// server's identity. It shares the server's REST mapper, so making one costs no discovery.
func (s *Server) callerClient(token string) (client.WithWatch, error) {
	cfg := rest.CopyConfig(s.cfg)
	if token != "" {
		cfg = rest.AnonymousClientConfig(s.cfg)
		cfg.BearerToken = token
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: s.c.Scheme(), Mapper: s.c.RESTMapper(), HTTPClient: hc})
}

// watchUpdate is what a watcher reports: a fresh list (reset), one change, or the error that stopped it.
type watchUpdate struct {
	src   int
	reset []client.Object
	typ   watch.EventType
	obj   client.Object
	err   error
}

// listWatch lists, then watches from the list's resourceVersion, and lists again when Kubernetes ends the watch
// (its timeout) or says the version is gone (410); it stops on ctx or on an error, which it reports. It never
// polls: between lists it only waits on the watch. The server's console-watches gauge counts it while it runs.
func (s *Server) listWatch(ctx context.Context, c client.WithWatch, src int, newList func() client.ObjectList, opts client.ListOptions, out chan<- watchUpdate) {
	s.consoleWatches.Inc()
	defer s.consoleWatches.Dec()
	send := func(u watchUpdate) bool {
		u.src = src
		select {
		case out <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		l := newList()
		if err := c.List(ctx, l, &opts); err != nil {
			if ctx.Err() == nil {
				send(watchUpdate{err: err})
			}
			return
		}
		objs, err := meta.ExtractList(l)
		if err != nil {
			send(watchUpdate{err: err})
			return
		}
		items := make([]client.Object, 0, len(objs))
		for _, o := range objs {
			items = append(items, o.(client.Object))
		}
		if !send(watchUpdate{reset: items}) {
			return
		}
		rv := l.(metav1.ListInterface).GetResourceVersion()
		for ctx.Err() == nil {
			wo := opts
			wo.Raw = &metav1.ListOptions{ResourceVersion: rv, TimeoutSeconds: ptr.To[int64](maxWatchSeconds), AllowWatchBookmarks: true}
			w, err := c.Watch(ctx, newList(), &wo)
			if err != nil {
				if ctx.Err() == nil {
					send(watchUpdate{err: err})
				}
				return
			}
			gone := false
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					// 410 Gone or another watch error: list again from now.
					gone = true
					break
				}
				o, ok := ev.Object.(client.Object)
				if !ok {
					continue
				}
				rv = o.GetResourceVersion()
				if ev.Type == watch.Bookmark {
					continue
				}
				if !send(watchUpdate{typ: ev.Type, obj: o}) {
					w.Stop()
					return
				}
			}
			w.Stop()
			if gone {
				break
			}
		}
	}
}

// sseWriter writes server-sent events, one at a time.
type sseWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startSSE answers with an event stream that may last maxWatchSeconds; the browser's EventSource reconnects after.
func startSSE(w http.ResponseWriter) *sseWriter {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(maxWatchSeconds*time.Second + writeTimeout))
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	return &sseWriter{w: w, rc: rc}
}

func (s *sseWriter) send(event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return err
	}
	return s.rc.Flush()
}

// streamError is what the stream says when one list or watch stops: which, and Kubernetes' reason in words.
type streamError struct {
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Section   string `json:"section,omitempty"`
	Message   string `json:"message"`
	Forbidden bool   `json:"forbidden,omitempty"`
}

func newStreamError(err error) streamError {
	return streamError{Message: err.Error(), Forbidden: apierrors.IsForbidden(err)}
}
