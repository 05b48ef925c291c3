package rayjob

import (
	"context"
	"fmt"
	"sync"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/ray"
)

// fakeRay is an in-memory Ray head per head Service, with faults to inject. Real Ray is tested in test/ray; this
// one lets the envtest drive every transition and fault deterministically.
type fakeRay struct {
	mu    sync.Mutex
	heads map[string]*fakeHead // key: namespace/head-svc
}

type fakeHead struct {
	jobs     map[string]*ray.JobInfo
	requests []ray.JobSubmitRequest // every submit call that reached the head
	gets     int                    // GetJob calls that reached the head
	stops    []string
	// down makes every call fail as unreachable.
	down bool
	// acceptThenTimeout makes the next submit be accepted but answered with a timeout.
	acceptThenTimeout bool
	// fail5xx makes the next calls fail as a 503 from the head would (the client reports ErrUnavailable).
	fail5xx int
}

func newFakeRay() *fakeRay { return &fakeRay{heads: map[string]*fakeHead{}} }

func (f *fakeRay) head(ns, svc string) *fakeHead {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := ns + "/" + svc
	h := f.heads[key]
	if h == nil {
		h = &fakeHead{jobs: map[string]*ray.JobInfo{}}
		f.heads[key] = h
	}
	return h
}

// with runs fn on the head of cluster ns/name under the lock.
func (f *fakeRay) with(ns, cluster string, fn func(h *fakeHead)) {
	h := f.head(ns, cluster+"-head-svc")
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(h)
}

func (f *fakeRay) DashboardFor(t ray.Target) (ray.Dashboard, error) {
	return &fakeDash{f: f, h: f.head(t.Namespace, t.HeadServiceName), name: t.HeadServiceName}, nil
}

func (f *fakeRay) ServeProxyFor(ray.Target) (ray.ServeProxy, error) {
	return nil, fmt.Errorf("fakeRay: no serve proxy")
}

func (f *fakeRay) InClusterDashboardURL(t ray.Target) string {
	return fmt.Sprintf("http://%s.%s.svc.cluster.local:%d", t.HeadServiceName, t.Namespace, t.DashboardPort)
}

type fakeDash struct {
	f    *fakeRay
	h    *fakeHead
	name string
}

func (d *fakeDash) lock() (func(), error) {
	d.f.mu.Lock()
	if d.h.down {
		d.f.mu.Unlock()
		return nil, fmt.Errorf("dial %s: %w", d.name, ray.ErrUnavailable)
	}
	if d.h.fail5xx > 0 {
		d.h.fail5xx--
		d.f.mu.Unlock()
		return nil, fmt.Errorf("%s: ray answered 503 (%w)", d.name, ray.ErrUnavailable)
	}
	return d.f.mu.Unlock, nil
}

func (d *fakeDash) Endpoint() string { return "fake://" + d.name }

func (d *fakeDash) SubmitJob(_ context.Context, req ray.JobSubmitRequest) (string, error) {
	unlock, err := d.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	d.h.requests = append(d.h.requests, req)
	if _, ok := d.h.jobs[req.SubmissionID]; ok {
		return "", fmt.Errorf("submit: %w", ray.ErrAlreadySubmitted)
	}
	d.h.jobs[req.SubmissionID] = &ray.JobInfo{Type: "SUBMISSION", SubmissionID: req.SubmissionID, Status: ray.JobStatusPending, Entrypoint: req.Entrypoint}
	if d.h.acceptThenTimeout {
		d.h.acceptThenTimeout = false
		return "", fmt.Errorf("submit: context deadline exceeded: %w", ray.ErrUnavailable)
	}
	return req.SubmissionID, nil
}

func (d *fakeDash) GetJob(_ context.Context, id string) (*ray.JobInfo, error) {
	unlock, err := d.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	d.h.gets++
	j, ok := d.h.jobs[id]
	if !ok {
		return nil, fmt.Errorf("get job %s: %w", id, ray.ErrNotFound)
	}
	c := *j
	return &c, nil
}

func (d *fakeDash) ListJobs(context.Context) ([]ray.JobInfo, error) { return nil, nil }
func (d *fakeDash) GetJobLogs(context.Context, string) (string, error) {
	return "", nil
}

func (d *fakeDash) StopJob(_ context.Context, id string) (bool, error) {
	unlock, err := d.lock()
	if err != nil {
		return false, err
	}
	defer unlock()
	d.h.stops = append(d.h.stops, id)
	j, ok := d.h.jobs[id]
	if !ok {
		return false, fmt.Errorf("stop %s: %w", id, ray.ErrNotFound)
	}
	if j.Status.IsTerminal() {
		return false, nil
	}
	j.Status = ray.JobStatusStopped
	return true, nil
}

func (d *fakeDash) DeleteJob(context.Context, string) (bool, error)   { return false, nil }
func (d *fakeDash) CheckGCSHealth(context.Context) error              { return nil }
func (d *fakeDash) DeployServeConfigV2(context.Context, string) error { return nil }
func (d *fakeDash) GetServeDetails(context.Context) (*ray.ServeDetails, error) {
	return &ray.ServeDetails{}, nil
}
func (d *fakeDash) DeleteServeApplications(context.Context) error { return nil }

// The RayJob controller reads no state API: the idle controller (internal/controller/idle) does.
func (d *fakeDash) CountLiveActors(context.Context) (int, error) {
	return 0, fmt.Errorf("fakeDash: the state API is not faked for the RayJob controller")
}

func (d *fakeDash) CountActiveTasks(context.Context) (int, error) {
	return 0, fmt.Errorf("fakeDash: the state API is not faked for the RayJob controller")
}

// setJob sets the status of a job the head knows (or adds it, as a user or submitter would).
func (h *fakeHead) setJob(id string, st rayv1.JobStatus, startMs, endMs int64) {
	j := h.jobs[id]
	if j == nil {
		j = &ray.JobInfo{Type: "SUBMISSION", SubmissionID: id}
		h.jobs[id] = j
	}
	j.Status, j.StartTime, j.EndTime = ray.JobStatus(st), startMs, endMs
}
