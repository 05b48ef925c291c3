package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/ray"
)

// dashboard finds the cluster named by the path and a client for its Ray dashboard.
func (s *Server) dashboard(r *http.Request) (Dashboard, *apiError) {
	ns, name := r.PathValue("namespace"), r.PathValue("clustername")
	var rc rayv1.RayCluster
	if err := s.c.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, &rc); err != nil {
		return nil, fromKubernetes(err, fmt.Sprintf("cluster %q in namespace %q", name, ns))
	}
	// The name becomes the dashboard's host name or API server path: one a tenant wrote (the status is writable
	// by whoever may update it, and objects may predate the schema's rule) must not be able to point elsewhere.
	svcName, svcField := headServiceName(&rc)
	if err := ray.CheckHeadServiceName(svcName); err != nil {
		return nil, fieldError(http.StatusBadRequest, codeFailedPrecondition, []FieldViolation{{Field: svcField,
			Description: fmt.Sprintf("cluster %q: the head service name %q is not a DNS-1035 label", name, svcName)}})
	}
	var svc *corev1.Service
	var got corev1.Service
	switch err := s.c.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: svcName}, &got); {
	case err == nil:
		svc = &got
	case !apierrors.IsNotFound(err):
		return nil, fromKubernetes(err, fmt.Sprintf("head service of cluster %q", name))
	}
	// The dashboard client authenticates with the cluster's Ray token, read as this server: the caller must be
	// allowed to read that Secret, or the API would hand them a credential RBAC keeps from them.
	if name, ok := rayTokenSecretName(&rc); ok {
		if e := s.checkRead(r, access{Resource: "secrets", Verb: "get", Namespace: ns, Name: name}); e != nil {
			return nil, e
		}
	}
	d, err := s.opts.Dashboard(r.Context(), &rc, svc)
	if err != nil {
		return nil, fromDashboardSetup(err, name)
	}
	return d, nil
}

// fromDashboardSetup maps a failure to build a cluster's dashboard client (reading its Ray token Secret, most
// often) to an answer; Kubernetes' message may name this server's identity, so it goes to the log only.
func fromDashboardSetup(err error, cluster string) *apiError {
	if apierrors.IsNotFound(err) {
		return internalError(http.StatusServiceUnavailable, codeUnavailable, err, "cannot reach the Ray dashboard of cluster %q: its Ray auth token Secret does not exist", cluster)
	}
	return internalError(http.StatusServiceUnavailable, codeUnavailable, err, "cannot reach the Ray dashboard of cluster %q (details in the API server's log)", cluster)
}

// fromRay maps a Ray dashboard error to an answer.
func fromRay(err error, what string) *apiError {
	var ae *ray.APIError
	switch {
	case errors.Is(err, ray.ErrNotFound):
		return notFound("%s not found", what)
	case errors.Is(err, ray.ErrAlreadySubmitted):
		return newError(http.StatusConflict, codeAlreadyExists, "%s already exists", what)
	case errors.Is(err, ray.ErrJobNotTerminal):
		return newError(http.StatusBadRequest, codeFailedPrecondition, "%s has not finished; stop it first", what)
	case errors.Is(err, ray.ErrUnavailable):
		// The error names the dashboard's in-cluster URL: logged, not told.
		return internalError(http.StatusServiceUnavailable, codeUnavailable, err, "the Ray dashboard is not reachable now, retry later")
	case errors.As(err, &ae) && ae.StatusCode == http.StatusBadRequest && !ae.FromProxy:
		return newError(http.StatusBadRequest, codeFailedPrecondition, "ray refused: %s", ae.Body)
	case errors.As(err, &ae) && !ae.FromProxy:
		return internalError(http.StatusBadGateway, codeInternal, err, "the Ray dashboard failed with HTTP %d", ae.StatusCode)
	default:
		// Through the Kubernetes proxy the answer may be Kubernetes' own, naming this server's identity.
		return internalError(http.StatusBadGateway, codeInternal, err, "the Ray dashboard failed (details in the API server's log)")
	}
}

func (s *Server) submitJob(w http.ResponseWriter, r *http.Request) (any, *apiError) {
	var sub RayJobSubmission
	if e := decodeBody(w, r, &sub); e != nil {
		return nil, e
	}
	if v := validateSubmission(&sub); len(v) > 0 {
		return nil, invalid(v...)
	}
	req := ray.JobSubmitRequest{
		Entrypoint:        sub.Entrypoint,
		SubmissionID:      sub.SubmissionID,
		Metadata:          sub.Metadata,
		EntrypointNumCPUs: float64(sub.EntrypointNumCpus),
		EntrypointNumGPUs: float64(sub.EntrypointNumGpus),
	}
	env, err := ray.RuntimeEnvFromYAML(sub.RuntimeEnv)
	if err != nil {
		return nil, invalid(FieldViolation{Field: "runtimeEnv", Description: err.Error()})
	}
	req.RuntimeEnv = env
	if len(sub.EntrypointResources) > 0 {
		req.EntrypointResources = map[string]float64{}
		for k, v := range sub.EntrypointResources {
			f, _ := strconv.ParseFloat(v, 64) // validated
			req.EntrypointResources[k] = f
		}
	}
	d, e := s.dashboard(r)
	if e != nil {
		return nil, e
	}
	id, err := d.SubmitJob(r.Context(), req)
	if err != nil {
		return nil, fromRay(err, fmt.Sprintf("job submission %q", sub.SubmissionID))
	}
	return SubmitRayJobReply{SubmissionID: id}, nil
}

func submissionInfo(j *ray.JobInfo) JobSubmissionInfo {
	out := JobSubmissionInfo{
		Entrypoint: j.Entrypoint, JobID: j.JobID, SubmissionID: j.SubmissionID, Status: string(j.Status),
		Message: j.Message, ErrorType: j.ErrorType, Metadata: j.Metadata,
	}
	if j.StartTime > 0 {
		out.StartTime = uint64(j.StartTime)
	}
	if j.EndTime > 0 {
		out.EndTime = uint64(j.EndTime)
	}
	if len(j.RuntimeEnv) > 0 {
		out.RuntimeEnv = map[string]string{}
		for k, v := range j.RuntimeEnv {
			if s, ok := v.(string); ok {
				out.RuntimeEnv[k] = s
				continue
			}
			b, _ := json.Marshal(v)
			out.RuntimeEnv[k] = string(b)
		}
	}
	return out
}

func submissionWhat(r *http.Request) string {
	return fmt.Sprintf("job submission %q on cluster %q", r.PathValue("submissionid"), r.PathValue("clustername"))
}

func (s *Server) getSubmission(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	d, e := s.dashboard(r)
	if e != nil {
		return nil, e
	}
	j, err := d.GetJob(r.Context(), r.PathValue("submissionid"))
	if err != nil {
		return nil, fromRay(err, submissionWhat(r))
	}
	return submissionInfo(j), nil
}

func (s *Server) listSubmissions(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	d, e := s.dashboard(r)
	if e != nil {
		return nil, e
	}
	jobs, err := d.ListJobs(r.Context())
	if err != nil {
		return nil, fromRay(err, fmt.Sprintf("jobs of cluster %q", r.PathValue("clustername")))
	}
	out := ListJobSubmissionInfo{}
	for i := range jobs {
		out.Submissions = append(out.Submissions, submissionInfo(&jobs[i]))
	}
	return out, nil
}

func (s *Server) getSubmissionLog(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	d, e := s.dashboard(r)
	if e != nil {
		return nil, e
	}
	logs, err := d.GetJobLogs(r.Context(), r.PathValue("submissionid"))
	if err != nil {
		return nil, fromRay(err, submissionWhat(r))
	}
	return GetJobLogReply{Log: logs}, nil
}

func (s *Server) stopSubmission(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	d, e := s.dashboard(r)
	if e != nil {
		return nil, e
	}
	if _, err := d.StopJob(r.Context(), r.PathValue("submissionid")); err != nil {
		return nil, fromRay(err, submissionWhat(r))
	}
	return Empty{}, nil
}

func (s *Server) deleteSubmission(_ http.ResponseWriter, r *http.Request) (any, *apiError) {
	d, e := s.dashboard(r)
	if e != nil {
		return nil, e
	}
	if _, err := d.DeleteJob(r.Context(), r.PathValue("submissionid")); err != nil {
		return nil, fromRay(err, submissionWhat(r))
	}
	return Empty{}, nil
}
