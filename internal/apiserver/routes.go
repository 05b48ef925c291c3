package apiserver

import (
	"net/http"
	"strconv"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// route is one operation: it registers the handler and describes itself for the OpenAPI document.
type route struct {
	method, pattern string
	op, summary     string
	tag             string
	// body is a pointer to the request model, nil when the operation takes no body.
	body any
	// resp is the response model.
	resp any
	// paging: "limit" (limit/continue) or "page" (v1 services: pageSize/pageToken and limit/continue).
	paging string
	// errs are the error statuses this operation answers with besides 401/403/500/503.
	errs []int
	// access is what this server asks SubjectAccessReview before handling; nil for v2 operations, which
	// Kubernetes authorises itself with the caller's own token.
	access func(r *http.Request) []access
	// reads are what the handler reads with this server's identity on the caller's behalf, beyond access (kinds
	// only: Group, Resource, Verb). Which objects it reads shows only from the body or the object, so the handler
	// asks checkRead for each as it reads it, and checkRead refuses a kind not declared here.
	reads  []access
	handle func(s *Server, w http.ResponseWriter, r *http.Request) (any, *apiError)
	// v2 marks the v2 resource API: proxy forwards the request to Kubernetes and writes Kubernetes' answer.
	v2    bool
	proxy func(s *Server, w http.ResponseWriter, r *http.Request) *apiError
	// undocumented leaves the operation out of the OpenAPI document: the services proxy, whose answers are a Ray
	// dashboard's pages, which no schema here describes.
	undocumented bool
}

const (
	pagingLimit = "limit"
	pagingPage  = "page"
)

const (
	groupRay   = "ray.io"
	groupManta = "manta.dev"
	// groupEvents is events.k8s.io, where the v1 API reads events and the v2 API lists them.
	groupEvents = "events.k8s.io"
)

// needs builds an access function for a verb on a resource, scoped to the path's namespace and name.
func needs(group, resource, verb string) func(*http.Request) []access {
	return func(r *http.Request) []access {
		return []access{{Group: group, Resource: resource, Verb: verb, Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}}
	}
}

// submissionAccess: job submissions read the RayCluster and talk to its dashboard, which RBAC expresses as the
// services/proxy subresource (the path the Kubernetes-proxy transport takes).
func submissionAccess(verb string) func(*http.Request) []access {
	return func(r *http.Request) []access {
		ns := r.PathValue("namespace")
		return []access{
			{Group: groupRay, Resource: "rayclusters", Verb: "get", Namespace: ns, Name: r.PathValue("clustername")},
			{Resource: "services", Subresource: "proxy", Verb: verb, Namespace: ns},
		}
	}
}

func routes() []*route {
	const ns = "/apis/v1/namespaces/{namespace}"
	var rs []*route
	type kind struct {
		path, tag, group, resource, singular string
		item, list                           any
		create, get, listNS, listAll, delete func(*Server, http.ResponseWriter, *http.Request) (any, *apiError)
		createErrs                           []int
		paging                               string
		createReads, getReads                []access
	}
	// Compute templates are ConfigMaps the caller names in the spec; events are listed into the answer (and left
	// out when the caller may not list them: KubeRay's clients treat them as optional).
	templatesRead := []access{{Resource: "configmaps", Verb: "get"}}
	eventsRead := []access{{Group: groupEvents, Resource: "events", Verb: "list"}}
	kinds := []kind{
		{path: "compute_templates", tag: "ComputeTemplateService", group: "", resource: "configmaps", singular: "compute template",
			item: &ComputeTemplate{}, list: ListComputeTemplatesResponse{}, paging: pagingLimit,
			create: (*Server).createTemplate, get: (*Server).getTemplate, listNS: (*Server).listTemplates, listAll: (*Server).listTemplates, delete: (*Server).deleteTemplate,
			createErrs: []int{400, 409, 413, 415, 422}},
		{path: "clusters", tag: "ClusterService", group: groupRay, resource: "rayclusters", singular: "cluster",
			item: &Cluster{}, list: ListClustersResponse{}, paging: pagingLimit,
			create: (*Server).createCluster, get: (*Server).getCluster, listNS: (*Server).listClusters, listAll: (*Server).listClusters, delete: (*Server).deleteCluster,
			createErrs: []int{400, 409, 413, 415, 422}, createReads: templatesRead, getReads: eventsRead},
		{path: "jobs", tag: "RayJobService", group: groupRay, resource: "rayjobs", singular: "job",
			item: &RayJob{}, list: ListRayJobsResponse{}, paging: pagingLimit,
			create: (*Server).createJob, get: (*Server).getJob, listNS: (*Server).listJobs, listAll: (*Server).listJobs, delete: (*Server).deleteJob,
			createErrs: []int{400, 409, 413, 415, 422}, createReads: templatesRead},
		{path: "services", tag: "RayServeService", group: groupRay, resource: "rayservices", singular: "service",
			item: &RayService{}, list: ListRayServicesResponse{}, paging: pagingPage,
			create: (*Server).createService, get: (*Server).getService, listNS: (*Server).listServices, listAll: (*Server).listServices, delete: (*Server).deleteService,
			createErrs: []int{400, 409, 413, 415, 422}, createReads: templatesRead, getReads: eventsRead},
		{path: "image_pull_jobs", tag: "ImagePullJobService", group: groupManta, resource: "imagepulljobs", singular: "image pull job",
			item: &ImagePullJob{}, list: ListImagePullJobsResponse{}, paging: pagingLimit,
			create: (*Server).createImagePullJob, get: (*Server).getImagePullJob, listNS: (*Server).listImagePullJobs, listAll: (*Server).listImagePullJobs, delete: (*Server).deleteImagePullJob,
			createErrs: []int{400, 409, 413, 415, 422}},
	}
	for _, k := range kinds {
		name := opName(k.path)
		rs = append(rs,
			&route{method: http.MethodPost, pattern: ns + "/" + k.path, op: "Create" + name, tag: k.tag,
				summary: "Create a " + k.singular + "; answers with the created " + k.singular + ".",
				body:    k.item, resp: k.item, errs: k.createErrs, access: needs(k.group, k.resource, "create"), reads: k.createReads, handle: k.create},
			&route{method: http.MethodGet, pattern: ns + "/" + k.path + "/{name}", op: "Get" + name, tag: k.tag,
				summary: "Get a " + k.singular + ".", resp: k.item, errs: []int{400, 404},
				access: needs(k.group, k.resource, "get"), reads: k.getReads, handle: k.get},
			&route{method: http.MethodGet, pattern: ns + "/" + k.path, op: "List" + name + "s", tag: k.tag,
				summary: "List the " + k.singular + "s of a namespace.", resp: k.list, paging: k.paging, errs: []int{400},
				access: needs(k.group, k.resource, "list"), handle: k.listNS},
			&route{method: http.MethodGet, pattern: "/apis/v1/" + k.path, op: "ListAll" + name + "s", tag: k.tag,
				summary: "List the " + k.singular + "s of all namespaces.", resp: k.list, paging: k.paging, errs: []int{400},
				access: needs(k.group, k.resource, "list"), handle: k.listAll},
			&route{method: http.MethodDelete, pattern: ns + "/" + k.path + "/{name}", op: "Delete" + name, tag: k.tag,
				summary: "Delete a " + k.singular + ".", resp: Empty{}, errs: []int{400, 404},
				access: needs(k.group, k.resource, "delete"), handle: k.delete},
		)
	}
	rs = append(rs, &route{method: http.MethodPut, pattern: ns + "/services/{name}", op: "UpdateRayService", tag: "RayServeService",
		summary: "Replace a service's spec; answers with the updated service.", body: &RayService{}, resp: &RayService{},
		errs: []int{400, 404, 409, 413, 415, 422}, access: needs(groupRay, "rayservices", "update"), reads: templatesRead, handle: (*Server).updateService})

	// A cluster with Ray token auth is reached with the token from its Secret.
	tokenRead := []access{{Resource: "secrets", Verb: "get"}}

	const sub = ns + "/jobsubmissions/{clustername}"
	const tag = "RayJobSubmissionService"
	rs = append(rs,
		&route{method: http.MethodPost, pattern: sub, op: "SubmitRayJob", tag: tag,
			summary: "Submit a job to the Ray dashboard of a running cluster.", body: &RayJobSubmission{}, resp: SubmitRayJobReply{},
			errs: []int{400, 404, 409, 413, 415, 502}, access: submissionAccess("create"), reads: tokenRead, handle: (*Server).submitJob},
		&route{method: http.MethodGet, pattern: sub, op: "ListJobDetails", tag: tag,
			summary: "List the jobs of a cluster's Ray dashboard.", resp: ListJobSubmissionInfo{},
			errs: []int{400, 404, 502}, access: submissionAccess("get"), reads: tokenRead, handle: (*Server).listSubmissions},
		&route{method: http.MethodGet, pattern: sub + "/{submissionid}", op: "GetJobDetails", tag: tag,
			summary: "Get a submitted job.", resp: JobSubmissionInfo{},
			errs: []int{400, 404, 502}, access: submissionAccess("get"), reads: tokenRead, handle: (*Server).getSubmission},
		&route{method: http.MethodGet, pattern: sub + "/log/{submissionid}", op: "GetJobLog", tag: tag,
			summary: "Get a submitted job's log from the beginning.", resp: GetJobLogReply{},
			errs: []int{400, 404, 502}, access: submissionAccess("get"), reads: tokenRead, handle: (*Server).getSubmissionLog},
		&route{method: http.MethodPost, pattern: sub + "/{submissionid}", op: "StopRayJob", tag: tag,
			summary: "Stop a submitted job.", resp: Empty{},
			errs: []int{400, 404, 502}, access: submissionAccess("create"), reads: tokenRead, handle: (*Server).stopSubmission},
		&route{method: http.MethodDelete, pattern: sub + "/{submissionid}", op: "DeleteRayJob", tag: tag,
			summary: "Delete a finished submitted job.", resp: Empty{},
			errs: []int{400, 404, 502}, access: submissionAccess("delete"), reads: tokenRead, handle: (*Server).deleteSubmission},
	)
	rs = append(rs, v2Routes()...)
	return append(rs, consoleRoutes()...)
}

func opName(path string) string {
	switch path {
	case "compute_templates":
		return "ComputeTemplate"
	case "clusters":
		return "Cluster"
	case "jobs":
		return "RayJob"
	case "services":
		return "RayService"
	default:
		return "ImagePullJob"
	}
}

// listOptions reads limit/continue (and v1 services' pageSize/pageToken) and scopes the list.
func listOptions(r *http.Request, labels map[string]string) ([]client.ListOption, *apiError) {
	q := r.URL.Query()
	opts := []client.ListOption{client.MatchingLabels(labels)}
	if ns := r.PathValue("namespace"); ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	var v violations
	for _, key := range []string{"limit", "pageSize"} {
		s := q.Get(key)
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			v.add(key, "must be a non-negative integer")
			continue
		}
		if n > 0 {
			opts = append(opts, client.Limit(n))
		}
	}
	for _, key := range []string{"continue", "pageToken"} {
		if s := q.Get(key); s != "" {
			opts = append(opts, client.Continue(s))
		}
	}
	if len(v) > 0 {
		return nil, invalid(v...)
	}
	return opts, nil
}
