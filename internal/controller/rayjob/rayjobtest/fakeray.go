// Package rayjobtest holds the in-memory Ray heads the RayJob controller's unit tests and envtests share: every
// transition and fault (an unreachable head, 503s, a submission accepted but answered with a timeout) can be set
// directly and deterministically. Real Ray is tested in test/ray.
package rayjobtest

import (
	"context"
	"fmt"
	"sync"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/ray"
)

// Ray is an in-memory Ray head per head Service, with faults to inject; it is the controller's ray.ClientFactory.
type Ray struct {
	mu    sync.Mutex
	heads map[string]*Head // key: namespace/head-svc
}

// Head is one fake head: what reached it, and the faults it plays. Read and set it inside Ray.With.
type Head struct {
	Jobs     map[string]*ray.JobInfo
	Requests []ray.JobSubmitRequest // every submit call that reached the head
	Gets     int                    // GetJob calls that reached the head
	Stops    []string
	// Down makes every call fail as unreachable.
	Down bool
	// AcceptThenTimeout makes the next submit be accepted but answered with a timeout.
	AcceptThenTimeout bool
	// Fail5xx makes the next calls fail as a 503 from the head would (the client reports ErrUnavailable).
	Fail5xx int
}

// NewRay is a set of fake heads, one per head Service, made on first use.
func NewRay() *Ray { return &Ray{heads: map[string]*Head{}} }

func (f *Ray) head(ns, svc string) *Head {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := ns + "/" + svc
	h := f.heads[key]
	if h == nil {
		h = &Head{Jobs: map[string]*ray.JobInfo{}}
		f.heads[key] = h
	}
	return h
}

// With runs fn on the head of cluster ns/name under the lock.
func (f *Ray) With(ns, cluster string, fn func(h *Head)) {
	h := f.head(ns, cluster+"-head-svc")
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(h)
}

func (f *Ray) DashboardFor(t ray.Target) (ray.Dashboard, error) {
	return &dashboard{f: f, h: f.head(t.Namespace, t.HeadServiceName), name: t.HeadServiceName}, nil
}

func (f *Ray) ServeProxyFor(ray.Target) (ray.ServeProxy, error) {
	return nil, fmt.Errorf("rayjobtest: no serve proxy")
}

func (f *Ray) InClusterDashboardURL(t ray.Target) string {
	return fmt.Sprintf("http://%s.%s.svc.cluster.local:%d", t.HeadServiceName, t.Namespace, t.DashboardPort)
}

type dashboard struct {
	f    *Ray
	h    *Head
	name string
}

func (d *dashboard) lock() (func(), error) {
	d.f.mu.Lock()
	if d.h.Down {
		d.f.mu.Unlock()
		return nil, fmt.Errorf("dial %s: %w", d.name, ray.ErrUnavailable)
	}
	if d.h.Fail5xx > 0 {
		d.h.Fail5xx--
		d.f.mu.Unlock()
		return nil, fmt.Errorf("%s: ray answered 503 (%w)", d.name, ray.ErrUnavailable)
	}
	return d.f.mu.Unlock, nil
}

func (d *dashboard) Endpoint() string { return "fake://" + d.name }

func (d *dashboard) SubmitJob(_ context.Context, req ray.JobSubmitRequest) (string, error) {
	unlock, err := d.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	d.h.Requests = append(d.h.Requests, req)
	if _, ok := d.h.Jobs[req.SubmissionID]; ok {
		return "", fmt.Errorf("submit: %w", ray.ErrAlreadySubmitted)
	}
	d.h.Jobs[req.SubmissionID] = &ray.JobInfo{Type: "SUBMISSION", SubmissionID: req.SubmissionID, Status: ray.JobStatusPending, Entrypoint: req.Entrypoint}
	if d.h.AcceptThenTimeout {
		d.h.AcceptThenTimeout = false
		return "", fmt.Errorf("submit: context deadline exceeded: %w", ray.ErrUnavailable)
	}
	return req.SubmissionID, nil
}

func (d *dashboard) GetJob(_ context.Context, id string) (*ray.JobInfo, error) {
	unlock, err := d.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	d.h.Gets++
	j, ok := d.h.Jobs[id]
	if !ok {
		return nil, fmt.Errorf("get job %s: %w", id, ray.ErrNotFound)
	}
	c := *j
	return &c, nil
}

func (d *dashboard) ListJobs(context.Context) ([]ray.JobInfo, error) { return nil, nil }
func (d *dashboard) GetJobLogs(context.Context, string) (string, error) {
	return "", nil
}

func (d *dashboard) StopJob(_ context.Context, id string) (bool, error) {
	unlock, err := d.lock()
	if err != nil {
		return false, err
	}
	defer unlock()
	d.h.Stops = append(d.h.Stops, id)
	j, ok := d.h.Jobs[id]
	if !ok {
		return false, fmt.Errorf("stop %s: %w", id, ray.ErrNotFound)
	}
	if j.Status.IsTerminal() {
		return false, nil
	}
	j.Status = ray.JobStatusStopped
	return true, nil
}

func (d *dashboard) DeleteJob(context.Context, string) (bool, error)   { return false, nil }
func (d *dashboard) CheckGCSHealth(context.Context) error              { return nil }
func (d *dashboard) DeployServeConfigV2(context.Context, string) error { return nil }
func (d *dashboard) GetServeDetails(context.Context) (*ray.ServeDetails, error) {
	return &ray.ServeDetails{}, nil
}
func (d *dashboard) DeleteServeApplications(context.Context) error { return nil }

// The RayJob controller reads no state API: the idle controller (internal/controller/idle) does.
func (d *dashboard) CountLiveActors(context.Context) (int, error) {
	return 0, fmt.Errorf("rayjobtest: the state API is not faked for the RayJob controller")
}

func (d *dashboard) CountActiveTasks(context.Context) (int, error) {
	return 0, fmt.Errorf("rayjobtest: the state API is not faked for the RayJob controller")
}

// SetJob sets the status of a job the head knows (or adds it, as a user or submitter would).
func (h *Head) SetJob(id string, st rayv1.JobStatus, startMs, endMs int64) {
	j := h.Jobs[id]
	if j == nil {
		j = &ray.JobInfo{Type: "SUBMISSION", SubmissionID: id}
		h.Jobs[id] = j
	}
	j.Status, j.StartTime, j.EndTime = ray.JobStatus(st), startMs, endMs
}
