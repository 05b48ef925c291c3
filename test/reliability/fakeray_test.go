package reliability

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/manta-dev/manta/internal/ray"
)

// fakeRay plays the Jobs and Serve APIs of every Ray head. The API proxy hands it the operator process's requests
// to the heads' proxy subresources (faultProxy.serveRay); the Host (<head-svc>.<ns>.svc.cluster.local) tells the
// heads apart. It records every submission that reaches it, accepted or refused, and can inject faults.
type fakeRay struct {
	mu    sync.Mutex
	heads map[string]*fakeHead
	// Jobs are PENDING for pendingFor after acceptance, RUNNING for runFor after that, then SUCCEEDED.
	pendingFor, runFor time.Duration
	faults             rayFaults
	rng                *rand.Rand
	injected           map[string]int // fault kind -> count
}

// longRunning in an entrypoint makes the fake job run for an hour.
const longRunning = "long_running"

// rayFaults are the shares of requests that meet each fault.
type rayFaults struct {
	// errorShare answers 500 or 503 without doing anything.
	errorShare float64
	// slowShare answers after slowDelay, past the operator's call timeout, without doing anything.
	slowShare float64
	slowDelay time.Duration
	// acceptThenTimeoutShare of submits are accepted, then answered only after slowDelay: the operator's call
	// times out although Ray runs the job.
	acceptThenTimeoutShare float64
}

type fakeHead struct {
	jobs map[string]*fakeJob
	// accepted counts submissions Ray ran, refused the second submissions of an ID it refused.
	accepted, refused int
	restarts          int
	// notFound counts reads of a job the head does not know.
	notFound int
	// serveConfig is the last Serve config deployed (JSON), serveDeploys how many deploys the head took.
	serveConfig  []byte
	serveDeploys int
}

type fakeJob struct {
	info     ray.JobInfo
	accepted time.Time
	stopped  bool
}

func newFakeRay(seed uint64) *fakeRay {
	return &fakeRay{heads: map[string]*fakeHead{}, pendingFor: time.Second, runFor: 2 * time.Second,
		rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), injected: map[string]int{}}
}

func (f *fakeRay) setFaults(fl rayFaults) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = fl
}

// headKey is the head Service host a request was meant for: <svc>.<ns>.
func headKey(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(host, ".svc.cluster.local")
}

// head returns the head of RayCluster ns/cluster; call with f.mu held.
func (f *fakeRay) head(key string) *fakeHead {
	h := f.heads[key]
	if h == nil {
		h = &fakeHead{jobs: map[string]*fakeJob{}}
		f.heads[key] = h
	}
	return h
}

// restartHead forgets every job of a head, as a head restarted without GCS fault tolerance does.
func (f *fakeRay) restartHead(ns, cluster string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.head(cluster + "-head-svc." + ns)
	h.jobs = map[string]*fakeJob{}
	h.serveConfig = nil
	h.restarts++
}

// submissions returns the accepted and refused submissions the head of RayCluster ns/cluster received, and the
// IDs of the jobs it holds.
func (f *fakeRay) submissions(ns, cluster string) (accepted, refused int, ids []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.heads[cluster+"-head-svc."+ns]
	if h == nil {
		return 0, 0, nil
	}
	for id := range h.jobs {
		ids = append(ids, id)
	}
	return h.accepted, h.refused, ids
}

// serveState returns how many Serve deploys the head of RayCluster ns/cluster took and the config it runs.
func (f *fakeRay) serveState(ns, cluster string) (deploys int, config []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.head(cluster + "-head-svc." + ns)
	return h.serveDeploys, h.serveConfig
}

// notFound returns how often the head of RayCluster ns/cluster was asked for a job it does not know.
func (f *fakeRay) notFound(ns, cluster string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.head(cluster + "-head-svc." + ns).notFound
}

func (f *fakeRay) injectedFaults() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.injected {
		out[k] = v
	}
	return out
}

// status moves a job along its schedule; call with f.mu held.
func (f *fakeRay) status(j *fakeJob, now time.Time) ray.JobInfo {
	info := j.info
	runFor := f.runFor
	if strings.Contains(info.Entrypoint, longRunning) {
		runFor = time.Hour
	}
	switch {
	case j.stopped:
		info.Status = ray.JobStatusStopped
	case now.Sub(j.accepted) < f.pendingFor:
		info.Status = ray.JobStatusPending
	case now.Sub(j.accepted) < f.pendingFor+runFor:
		info.Status, info.StartTime = ray.JobStatusRunning, j.accepted.Add(f.pendingFor).UnixMilli()
	default:
		info.Status, info.StartTime = ray.JobStatusSucceeded, j.accepted.Add(f.pendingFor).UnixMilli()
		info.EndTime = j.accepted.Add(f.pendingFor + f.runFor).UnixMilli()
		info.DriverExitCode = new(int)
	}
	return info
}

func (f *fakeRay) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	fl := f.faults
	roll := f.rng.Float64()
	var delay time.Duration
	switch {
	case roll < fl.errorShare:
		f.injected["ray 5xx"]++
		f.mu.Unlock()
		http.Error(w, "fake Ray: injected failure", []int{500, 503}[f.rngIntN(2)])
		return
	case roll < fl.errorShare+fl.slowShare:
		f.injected["ray timeout"]++
		f.mu.Unlock()
		sleepOrDone(r, fl.slowDelay)
		http.Error(w, "fake Ray: too late", http.StatusGatewayTimeout)
		return
	case r.Method == http.MethodPost && r.URL.Path == "/api/jobs/" && roll < fl.errorShare+fl.slowShare+fl.acceptThenTimeoutShare:
		f.injected["ray submit accepted then timed out"]++
		delay = fl.slowDelay
	}
	code, body := f.handle(r)
	f.mu.Unlock()
	if delay > 0 {
		sleepOrDone(r, delay)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

func (f *fakeRay) rngIntN(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.IntN(n)
}

func sleepOrDone(r *http.Request, d time.Duration) {
	select {
	case <-time.After(d):
	case <-r.Context().Done():
	}
}

// handle answers one Jobs API request as Ray 2.52 does; call with f.mu held.
func (f *fakeRay) handle(r *http.Request) (int, any) {
	h := f.head(headKey(r.Host))
	now := time.Now()
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/jobs/")
	if !ok {
		switch r.URL.Path {
		case "/api/gcs_healthz", "/-/healthz":
			// The Serve proxy of every pod answers here too.
			return http.StatusOK, "success"
		case "/api/serve/applications/":
			return f.handleServe(h, r)
		}
		return http.StatusNotFound, map[string]string{"error": "fake Ray: no route " + r.URL.Path}
	}
	id, action, _ := strings.Cut(rest, "/")
	switch {
	case r.Method == http.MethodPost && rest == "":
		var req ray.JobSubmitRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return http.StatusBadRequest, err.Error()
		}
		if _, exists := h.jobs[req.SubmissionID]; exists {
			h.refused++
			// Ray 2.52's answer, measured in test/ray.
			return http.StatusInternalServerError, fmt.Sprintf("Traceback ...\nValueError: Job with submission_id %s already exists. Please use a different submission_id.", req.SubmissionID)
		}
		h.accepted++
		h.jobs[req.SubmissionID] = &fakeJob{accepted: now, info: ray.JobInfo{Type: "SUBMISSION", JobID: "raysubmit_" + req.SubmissionID,
			SubmissionID: req.SubmissionID, Entrypoint: req.Entrypoint, Metadata: req.Metadata}}
		return http.StatusOK, map[string]string{"job_id": req.SubmissionID, "submission_id": req.SubmissionID}
	case r.Method == http.MethodGet && rest == "":
		var out []ray.JobInfo
		for _, j := range h.jobs {
			out = append(out, f.status(j, now))
		}
		return http.StatusOK, out
	}
	j := h.jobs[id]
	if j == nil {
		if r.Method == http.MethodGet {
			h.notFound++
		}
		return http.StatusNotFound, fmt.Sprintf("Job %s does not exist", id)
	}
	switch {
	case r.Method == http.MethodGet && action == "":
		return http.StatusOK, f.status(j, now)
	case r.Method == http.MethodGet && action == "logs":
		return http.StatusOK, map[string]string{"logs": "fake\n"}
	case r.Method == http.MethodPost && action == "stop":
		st := f.status(j, now).Status
		j.stopped = !st.IsTerminal() || j.stopped
		return http.StatusOK, map[string]bool{"stopped": !st.IsTerminal()}
	case r.Method == http.MethodDelete && action == "":
		if !f.status(j, now).Status.IsTerminal() {
			return http.StatusInternalServerError, fmt.Sprintf("RuntimeError: Attempted to delete job '%s', but it is in a non-terminal state.", id)
		}
		delete(h.jobs, id)
		return http.StatusOK, map[string]bool{"deleted": true}
	}
	return http.StatusNotFound, "fake Ray: no route"
}

// handleServe answers the Serve REST API: PUT deploys a config, GET reports every configured application
// RUNNING with a healthy deployment, DELETE shuts Serve down. Call with f.mu held.
func (f *fakeRay) handleServe(h *fakeHead, r *http.Request) (int, any) {
	switch r.Method {
	case http.MethodPut:
		var cfg struct {
			Applications []struct {
				Name string `json:"name"`
			} `json:"applications"`
		}
		raw, err := io.ReadAll(r.Body)
		if err == nil {
			err = json.Unmarshal(raw, &cfg)
		}
		if err != nil {
			return http.StatusBadRequest, err.Error()
		}
		h.serveConfig = raw
		h.serveDeploys++
		return http.StatusOK, map[string]string{}
	case http.MethodDelete:
		h.serveConfig = nil
		return http.StatusOK, map[string]string{}
	}
	apps := map[string]ray.ServeApplication{}
	if h.serveConfig != nil {
		var cfg struct {
			Applications []struct {
				Name string `json:"name"`
			} `json:"applications"`
		}
		_ = json.Unmarshal(h.serveConfig, &cfg)
		for _, a := range cfg.Applications {
			apps[a.Name] = ray.ServeApplication{Name: a.Name, Status: ray.ApplicationStatusRunning,
				Deployments: map[string]ray.ServeDeployment{"D": {Name: "D", Status: ray.DeploymentStatusHealthy}}}
		}
	}
	return http.StatusOK, ray.ServeDetails{Applications: apps}
}
