package apiserver

import (
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

var managedLabels = map[string]string{labelManagedBy: managedByAPIServer}

var templateLabels = map[string]string{labelConfigType: configTypeTemplate}

func describe(kind string, r *http.Request) string {
	return fmt.Sprintf("%s %q in namespace %q", kind, r.PathValue("name"), r.PathValue("namespace"))
}

// getOwned reads the object named by the path and answers 404 unless this API manages it (owned says so).
func (s *Server) getOwned(r *http.Request, kind string, obj client.Object, owned func() bool) *apiError {
	key := client.ObjectKey{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	if err := s.c.Get(r.Context(), key, obj); err != nil {
		return fromKubernetes(err, describe(kind, r))
	}
	if !owned() {
		return notFound("%s not found", describe(kind, r))
	}
	return nil
}

// deleteOwned deletes the object named by the path if this API manages it; dependents go in the background.
func (s *Server) deleteOwned(r *http.Request, kind string, obj client.Object, owned func() bool) (any, *apiError) {
	if e := s.getOwned(r, kind, obj, owned); e != nil {
		return nil, e
	}
	err := s.c.Delete(r.Context(), obj, client.Preconditions{UID: ptrUID(obj)}, client.PropagationPolicy("Background"))
	if err != nil {
		return nil, fromKubernetes(err, describe(kind, r))
	}
	return Empty{}, nil
}

// lookupTemplates reads the compute templates a spec names; a missing one is a 422 naming the field. The caller
// must be allowed to get each one: otherwise a spec would copy a ConfigMap RBAC keeps from them into a cluster.
func (s *Server) lookupTemplates(r *http.Request, ns string, spec *ClusterSpec, field string) (templates, *apiError) {
	ctx := r.Context()
	ts := templates{}
	var missing []FieldViolation
	for _, ref := range templateNames(spec, field) {
		name := ref.Description
		if _, ok := ts[name]; ok {
			continue
		}
		if e := s.checkRead(r, access{Resource: "configmaps", Verb: "get", Namespace: ns, Name: name}); e != nil {
			return nil, e
		}
		var cm corev1.ConfigMap
		err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cm)
		switch {
		case err == nil && isComputeTemplate(&cm):
			t := templateFromConfigMap(&cm)
			ts[name] = &t
		case err == nil || apierrors.IsNotFound(err) || apierrors.IsBadRequest(err) || apierrors.IsInvalid(err):
			missing = append(missing, FieldViolation{Field: ref.Field, Description: fmt.Sprintf("compute template %q does not exist in namespace %q; create it first", name, ns)})
		default:
			return nil, fromKubernetes(err, fmt.Sprintf("compute template %q", name))
		}
	}
	// A second reference to a missing template names its field too.
	if len(missing) > 0 {
		seen := map[string]bool{}
		for _, m := range missing {
			seen[m.Field] = true
		}
		for _, ref := range templateNames(spec, field) {
			if _, ok := ts[ref.Description]; !ok && !seen[ref.Field] {
				missing = append(missing, FieldViolation{Field: ref.Field, Description: fmt.Sprintf("compute template %q does not exist in namespace %q; create it first", ref.Description, ns)})
			}
		}
		return nil, fieldError(http.StatusUnprocessableEntity, codeFailedPrecondition, missing)
	}
	return ts, nil
}

// --- compute templates

func (s *Server) createTemplate(w http.ResponseWriter, r *http.Request) (any, *apiError) {
	var t ComputeTemplate
	if e := decodeBody(w, r, &t); e != nil {
		return nil, e
	}
	if v := validateComputeTemplate(&t, r.PathValue("namespace")); len(v) > 0 {
		return nil, invalid(v...)
	}
	cm := templateToConfigMap(&t)
	if err := s.c.Create(r.Context(), cm); err != nil {
		return nil, fromKubernetes(err, fmt.Sprintf("compute template %q in namespace %q", t.Name, t.Namespace))
	}
	return templateFromConfigMap(cm), nil
}

func (s *Server) getTemplate(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	var cm corev1.ConfigMap
	if e := s.getOwned(r, "compute template", &cm, func() bool { return isComputeTemplate(&cm) }); e != nil {
		return nil, e
	}
	return templateFromConfigMap(&cm), nil
}

func (s *Server) listTemplates(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	opts, e := listOptions(r, templateLabels)
	if e != nil {
		return nil, e
	}
	var l corev1.ConfigMapList
	if err := s.c.List(r.Context(), &l, opts...); err != nil {
		return nil, fromKubernetes(err, "compute templates")
	}
	out := ListComputeTemplatesResponse{ComputeTemplates: []ComputeTemplate{}, Continue: l.Continue}
	for i := range l.Items {
		out.ComputeTemplates = append(out.ComputeTemplates, templateFromConfigMap(&l.Items[i]))
	}
	return out, nil
}

func (s *Server) deleteTemplate(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	var cm corev1.ConfigMap
	return s.deleteOwned(r, "compute template", &cm, func() bool { return isComputeTemplate(&cm) })
}

// --- clusters

func (s *Server) createCluster(w http.ResponseWriter, r *http.Request) (any, *apiError) {
	var c Cluster
	if e := decodeBody(w, r, &c); e != nil {
		return nil, e
	}
	if v := validateCluster(&c, r.PathValue("namespace")); len(v) > 0 {
		return nil, invalid(v...)
	}
	ts, e := s.lookupTemplates(r, c.Namespace, c.ClusterSpec, "clusterSpec")
	if e != nil {
		return nil, e
	}
	rc := clusterToRay(&c, ts)
	if err := s.c.Create(r.Context(), rc); err != nil {
		return nil, fromKubernetes(err, fmt.Sprintf("cluster %q in namespace %q", c.Name, c.Namespace))
	}
	return clusterFromRay(rc), nil
}

func (s *Server) getCluster(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	var rc rayv1.RayCluster
	if e := s.getOwned(r, "cluster", &rc, func() bool { return isManaged(&rc) }); e != nil {
		return nil, e
	}
	c := clusterFromRay(&rc)
	c.Events = s.events(r, "RayCluster", rc.Namespace, rc.Name)
	return c, nil
}

// events lists the events about an object from events.k8s.io/v1, as KubeRay v1.7's API server reads them (the
// operators write them there; core/v1 events are the same objects seen through the older API). Events are a
// convenience, so failing to list them, or the caller not being allowed to, is not an error: the answer has none.
func (s *Server) events(r *http.Request, kind, ns, name string) []ClusterEvent {
	if e := s.checkRead(r, access{Group: groupEvents, Resource: "events", Verb: "list", Namespace: ns}); e != nil {
		return nil
	}
	var l eventsv1.EventList
	err := s.c.List(r.Context(), &l, client.InNamespace(ns),
		client.MatchingFields{"regarding.name": name, "regarding.kind": kind})
	if err != nil {
		return nil
	}
	var out []ClusterEvent
	for i := range l.Items {
		out = append(out, eventFromKube(&l.Items[i]))
	}
	return out
}

// eventFromKube is the v1 model of an events.k8s.io/v1 Event: first seen at eventTime (an event written through
// core/v1 has its deprecated first timestamp instead), last seen at its series' last observation (else the
// deprecated last timestamp, else eventTime), counted by its series (else the deprecated count).
func eventFromKube(e *eventsv1.Event) ClusterEvent {
	first := e.EventTime.Time
	if first.IsZero() {
		first = e.DeprecatedFirstTimestamp.Time
	}
	last, count := e.EventTime.Time, e.DeprecatedCount
	switch {
	case e.Series != nil:
		last, count = e.Series.LastObservedTime.Time, e.Series.Count
	case !e.DeprecatedLastTimestamp.IsZero():
		last = e.DeprecatedLastTimestamp.Time
	}
	return ClusterEvent{
		ID: string(e.UID), Name: e.Name, CreatedAt: timePtr(e.CreationTimestamp),
		FirstTimestamp: timePtr(metav1.NewTime(first)), LastTimestamp: timePtr(metav1.NewTime(last)),
		Reason: e.Reason, Message: e.Note, Type: e.Type, Count: count,
	}
}

func (s *Server) listClusters(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	opts, e := listOptions(r, managedLabels)
	if e != nil {
		return nil, e
	}
	var l rayv1.RayClusterList
	if err := s.c.List(r.Context(), &l, opts...); err != nil {
		return nil, fromKubernetes(err, "clusters")
	}
	out := ListClustersResponse{Clusters: []Cluster{}, Continue: l.Continue}
	for i := range l.Items {
		out.Clusters = append(out.Clusters, clusterFromRay(&l.Items[i]))
	}
	return out, nil
}

func (s *Server) deleteCluster(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	var rc rayv1.RayCluster
	return s.deleteOwned(r, "cluster", &rc, func() bool { return isManaged(&rc) })
}

// --- jobs

func (s *Server) createJob(w http.ResponseWriter, r *http.Request) (any, *apiError) {
	var j RayJob
	if e := decodeBody(w, r, &j); e != nil {
		return nil, e
	}
	if v := validateJob(&j, r.PathValue("namespace")); len(v) > 0 {
		return nil, invalid(v...)
	}
	var ts templates
	if len(j.ClusterSelector) == 0 {
		var e *apiError
		if ts, e = s.lookupTemplates(r, j.Namespace, j.ClusterSpec, "clusterSpec"); e != nil {
			return nil, e
		}
	}
	rj := jobToRay(&j, ts)
	if err := s.c.Create(r.Context(), rj); err != nil {
		return nil, fromKubernetes(err, fmt.Sprintf("job %q in namespace %q", j.Name, j.Namespace))
	}
	return jobFromRay(rj), nil
}

func (s *Server) getJob(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	var rj rayv1.RayJob
	if e := s.getOwned(r, "job", &rj, func() bool { return isManaged(&rj) }); e != nil {
		return nil, e
	}
	return jobFromRay(&rj), nil
}

func (s *Server) listJobs(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	opts, e := listOptions(r, managedLabels)
	if e != nil {
		return nil, e
	}
	var l rayv1.RayJobList
	if err := s.c.List(r.Context(), &l, opts...); err != nil {
		return nil, fromKubernetes(err, "jobs")
	}
	out := ListRayJobsResponse{Jobs: []RayJob{}, Continue: l.Continue}
	for i := range l.Items {
		out.Jobs = append(out.Jobs, jobFromRay(&l.Items[i]))
	}
	return out, nil
}

func (s *Server) deleteJob(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	var rj rayv1.RayJob
	return s.deleteOwned(r, "job", &rj, func() bool { return isManaged(&rj) })
}

// --- services

func (s *Server) decodeService(w http.ResponseWriter, r *http.Request, pathName string) (*rayv1.RayService, *apiError) {
	var svc RayService
	if e := decodeBody(w, r, &svc); e != nil {
		return nil, e
	}
	if v := validateService(&svc, r.PathValue("namespace"), pathName); len(v) > 0 {
		return nil, invalid(v...)
	}
	ts, e := s.lookupTemplates(r, svc.Namespace, svc.ClusterSpec, "clusterSpec")
	if e != nil {
		return nil, e
	}
	return serviceToRay(&svc, ts), nil
}

func (s *Server) createService(w http.ResponseWriter, r *http.Request) (any, *apiError) {
	rs, e := s.decodeService(w, r, "")
	if e != nil {
		return nil, e
	}
	if err := s.c.Create(r.Context(), rs); err != nil {
		return nil, fromKubernetes(err, fmt.Sprintf("service %q in namespace %q", rs.Name, rs.Namespace))
	}
	return serviceFromRay(rs), nil
}

func (s *Server) updateService(w http.ResponseWriter, r *http.Request) (any, *apiError) {
	want, e := s.decodeService(w, r, r.PathValue("name"))
	if e != nil {
		return nil, e
	}
	var cur rayv1.RayService
	if e := s.getOwned(r, "service", &cur, func() bool { return isManaged(&cur) }); e != nil {
		return nil, e
	}
	cur.Spec = want.Spec
	for k, v := range want.Labels {
		cur.Labels[k] = v
	}
	if err := s.c.Update(r.Context(), &cur); err != nil {
		return nil, fromKubernetes(err, describe("service", r))
	}
	return serviceFromRay(&cur), nil
}

func (s *Server) getService(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	var rs rayv1.RayService
	if e := s.getOwned(r, "service", &rs, func() bool { return isManaged(&rs) }); e != nil {
		return nil, e
	}
	out := serviceFromRay(&rs)
	ev := s.events(r, "RayService", rs.Namespace, rs.Name)
	if active := rs.Status.ActiveServiceStatus.RayClusterName; active != "" {
		// As KubeRay: the events of the cluster serving follow the RayService's own.
		ev = append(ev, s.events(r, "RayCluster", rs.Namespace, active)...)
	}
	if len(ev) > 0 {
		if out.RayServiceStatus == nil {
			out.RayServiceStatus = &RayServiceStatus{}
		}
		out.RayServiceStatus.RayServiceEvents = ev
	}
	return out, nil
}

func (s *Server) listServices(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	opts, e := listOptions(r, managedLabels)
	if e != nil {
		return nil, e
	}
	var l rayv1.RayServiceList
	if err := s.c.List(r.Context(), &l, opts...); err != nil {
		return nil, fromKubernetes(err, "services")
	}
	out := ListRayServicesResponse{Services: []RayService{}, NextPageToken: l.Continue, Continue: l.Continue, TotalSize: int32(len(l.Items))}
	for i := range l.Items {
		out.Services = append(out.Services, serviceFromRay(&l.Items[i]))
	}
	return out, nil
}

func (s *Server) deleteService(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	var rs rayv1.RayService
	return s.deleteOwned(r, "service", &rs, func() bool { return isManaged(&rs) })
}

// --- image pull jobs

func (s *Server) createImagePullJob(w http.ResponseWriter, r *http.Request) (any, *apiError) {
	var j ImagePullJob
	if e := decodeBody(w, r, &j); e != nil {
		return nil, e
	}
	if v := validateImagePullJob(&j, r.PathValue("namespace")); len(v) > 0 {
		return nil, invalid(v...)
	}
	o := imagePullJobToK8s(&j)
	if err := s.c.Create(r.Context(), o); err != nil {
		return nil, fromKubernetes(err, fmt.Sprintf("image pull job %q in namespace %q", j.Name, j.Namespace))
	}
	return imagePullJobFromK8s(o), nil
}

func (s *Server) getImagePullJob(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	var o mantav1alpha1.ImagePullJob
	if e := s.getOwned(r, "image pull job", &o, func() bool { return isManaged(&o) }); e != nil {
		return nil, e
	}
	return imagePullJobFromK8s(&o), nil
}

func (s *Server) listImagePullJobs(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	opts, e := listOptions(r, managedLabels)
	if e != nil {
		return nil, e
	}
	var l mantav1alpha1.ImagePullJobList
	if err := s.c.List(r.Context(), &l, opts...); err != nil {
		return nil, fromKubernetes(err, "image pull jobs")
	}
	out := ListImagePullJobsResponse{ImagePullJobs: []ImagePullJob{}, Continue: l.Continue}
	for i := range l.Items {
		out.ImagePullJobs = append(out.ImagePullJobs, imagePullJobFromK8s(&l.Items[i]))
	}
	return out, nil
}

func (s *Server) deleteImagePullJob(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	var o mantav1alpha1.ImagePullJob
	return s.deleteOwned(r, "image pull job", &o, func() bool { return isManaged(&o) })
}
