// Package fakeray plays one Ray head's HTTP surface for tests: the dashboard's Jobs API (submit, get, list, stop,
// delete, logs), its Serve API (PUT, GET and DELETE /api/serve/applications/) and GCS health check, the dashboard
// agent's raylet health check, and the Serve HTTP proxy's health check and routes. Answers follow Ray 2.52 as
// test/ray measures it: the conformance suite there runs the same assertions against a real head and this fake.
//
// Jobs end as their entrypoint says (see Scripted) or as Options.Run decides, or, under Options.Manual, as the test
// moves them (SetJob); Serve applications go DEPLOYING, then RUNNING with every deployment HEALTHY, unless the test
// says otherwise (SetServeStatus). A Fleet is a head per head Service, reached in process through the operator's own
// Ray clients, with faults on the way to each (Remote).
package fakeray

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/manta-dev/manta/internal/ray"
)

// RunFunc runs a job's entrypoint and returns its exit code; what it writes to logs is the job's log. ctx ends
// when the job is stopped (the return value is then ignored). It runs once the job's resources are free.
type RunFunc func(ctx context.Context, req ray.JobSubmitRequest, logs io.Writer) int

// Options shape a head.
type Options struct {
	// Resources are the head's logical resources (CPU, custom ones); a job waits PENDING until its entrypoint
	// resources are free. Nil means unlimited.
	Resources map[string]float64
	// Run runs each job; nil means Scripted(time.Second).
	Run RunFunc
	// PendingFor keeps each job PENDING at least this long after its submission (a runtime environment set up).
	PendingFor time.Duration
	// ServeDeploying is how long an application stays DEPLOYING after a PUT before it is RUNNING.
	ServeDeploying time.Duration
	// RouteReply answers a request to an application's route on the Serve proxy; nil answers 200 "<app name>".
	RouteReply func(app string, r *http.Request) string
	// Manual leaves every job PENDING until SetJob moves it: the test plays Ray's scheduler and the job's driver, so
	// each transition happens when the test says and never on a timer (Run is not called).
	Manual bool
}

// Head is one fake Ray head. Its handlers are safe for concurrent use.
type Head struct {
	opts Options

	mu      sync.Mutex
	jobs    map[string]*job
	order   []string // submission IDs in submission order, as Ray lists them
	nextJob int
	used    map[string]float64
	serve   *serveState
	// serveStatus, when set, is the status every application reports (SetServeStatus).
	serveStatus string
	state       stateAPI
	// submissions counts accepted submissions, refused the repeated submission IDs, notFound the requests for a
	// job the head does not hold, deploys the Serve PUTs.
	submissions, refused, notFound, deploys int
	// calls counts the dashboard's requests by route (Calls); stops are the job IDs of the stop requests, in order.
	calls  map[string]int
	stops  []string
	closed bool
	wg     sync.WaitGroup
}

type job struct {
	info   ray.JobInfo
	req    ray.JobSubmitRequest
	logs   bytes.Buffer
	cancel context.CancelFunc
	// stopping: a stop was asked while the job was PENDING or RUNNING.
	stopping bool
	started  bool
	// set: the test moved the job (SetJob, Restart) while its runner ran; the runner's end no longer counts.
	set       bool
	submitted time.Time
	done      chan struct{}
	// history is every status the job has had, in order: a test reads the short ones no poll is sure to see.
	history []ray.JobStatus
}

type serveState struct {
	raw      []byte // the last config deployed, as sent
	apps     []serveApp
	deployed time.Time
	reads    int // the GETs of the applications
	// readsRunning counts the GETs that found the applications RUNNING (ServeUnread).
	readsRunning int
}

type serveApp struct {
	Name        string `json:"name"`
	RoutePrefix string `json:"route_prefix"`
	Deployments []struct {
		Name string `json:"name"`
	} `json:"deployments"`
}

// New returns a head with opts.
func New(opts Options) *Head {
	if opts.Run == nil {
		opts.Run = Scripted(time.Second)
	}
	return &Head{opts: opts, jobs: map[string]*job{}, used: map[string]float64{}, calls: map[string]int{}}
}

// Close stops every job still running and waits for their runners.
func (h *Head) Close() {
	h.mu.Lock()
	h.closed = true
	for _, j := range h.jobs {
		if j.cancel != nil {
			j.cancel()
		}
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// Job returns the current info of a job, false when the head does not hold it.
func (h *Head) Job(id string) (ray.JobInfo, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	j, ok := h.jobs[id]
	if !ok {
		return ray.JobInfo{}, false
	}
	return j.info, true
}

// History is every status job id has had, in order (nil for an unknown job).
func (h *Head) History(id string) []ray.JobStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	if j, ok := h.jobs[id]; ok {
		return slices.Clone(j.history)
	}
	return nil
}

// Jobs returns every job's info in submission order.
func (h *Head) Jobs() []ray.JobInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]ray.JobInfo, 0, len(h.order))
	for _, id := range h.order {
		out = append(out, h.jobs[id].info)
	}
	return out
}

// Submissions returns how many submissions the head accepted and how many it refused as repeated.
func (h *Head) Submissions() (accepted, refused int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.submissions, h.refused
}

// NotFound returns how many requests named a job the head does not hold.
func (h *Head) NotFound() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.notFound
}

// ServeDeploys returns how many Serve configs were PUT.
func (h *Head) ServeDeploys() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deploys
}

// ServeUnread says whether the applications of the last Serve config are DEPLOYING, or turned RUNNING and have
// been read fewer than servePollsSeen times since: they turn on a timer, which no request to the head shows, and a
// test waits until the operator has seen the change and written what it saw (a barrier).
func (h *Head) ServeUnread() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.serve == nil || len(h.serve.apps) == 0 {
		return false
	}
	return h.appStatusLocked() != ray.ApplicationStatusRunning || h.serve.readsRunning < servePollsSeen
}

// servePollsSeen is how many reads that find the applications RUNNING prove the operator wrote what the first one
// found: an operator reads a head's applications once per reconcile and never reconciles one RayService twice at
// once, so the second read comes from a reconcile that began after the first one's had ended, status write
// included. One read is not enough: the settle could pass between that read and its reconcile's write.
const servePollsSeen = 2

// ServeReads counts the GETs of the applications since the last Serve config was deployed; -1 when none is.
func (h *Head) ServeReads() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.serve == nil {
		return -1
	}
	return h.serve.reads
}

// ProxyHealthy says whether the Serve proxy's /-/healthz answers healthy: once a Serve config was deployed.
func (h *Head) ProxyHealthy() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.serve != nil && h.serve.apps != nil
}

// ServeConfig returns the last Serve config deployed (the request body), nil when none is.
func (h *Head) ServeConfig() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.serve == nil {
		return nil
	}
	return h.serve.raw
}

// Submit submits a job as POST /api/jobs/ does (a submitter pod's `ray job submit`, played by a test).
func (h *Head) Submit(req ray.JobSubmitRequest) (string, error) {
	code, body := h.submit(req)
	if code != http.StatusOK {
		return "", fmt.Errorf("submit %s: %d %v", req.SubmissionID, code, body)
	}
	return req.SubmissionID, nil
}

// Dashboard serves the dashboard's port; Calls counts its requests.
func (h *Head) Dashboard() http.Handler {
	mux := h.dashboardMux()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.calls[Route(r.Method, r.URL.Path)]++
		h.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
}

// Route names a dashboard request as Calls counts it: the method and the path, a job's ID in it as {id}
// ("GET /api/jobs/{id}", "POST /api/jobs/{id}/stop", "GET /api/serve/applications/").
func Route(method, path string) string {
	if rest, ok := strings.CutPrefix(path, "/api/jobs/"); ok && rest != "" {
		path = "/api/jobs/{id}"
		if _, action, ok := strings.Cut(rest, "/"); ok {
			path += "/" + action
		}
	}
	return method + " " + path
}

// Calls is how many requests of route (see Route) the dashboard answered.
func (h *Head) Calls(route string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[route]
}

// Stops are the job IDs of every stop request the dashboard answered, in order, whether it held the job or not.
func (h *Head) Stops() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.stops)
}

func (h *Head) dashboardMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/gcs_healthz", func(w http.ResponseWriter, r *http.Request) { text(w, http.StatusOK, "success") })
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": "4", "ray_version": "2.52.0", "ray_commit": "fake"})
	})
	mux.HandleFunc("/api/jobs/", h.serveJobs)
	mux.HandleFunc("/api/serve/applications/", h.serveApplications)
	mux.HandleFunc("GET /api/v0/actors", h.serveStateList(func(s *stateAPI) []string { return s.actors }))
	mux.HandleFunc("GET /api/v0/tasks", h.serveStateList(func(s *stateAPI) []string { return s.tasks }))
	mux.HandleFunc("GET /api/v0/nodes", h.serveNodes)
	return mux
}

// Agent serves the dashboard agent's port (the raylet health check the pods' probes call).
func (h *Head) Agent() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/local_raylet_healthz", func(w http.ResponseWriter, r *http.Request) { text(w, http.StatusOK, "success") })
	mux.HandleFunc("GET /api/healthz", func(w http.ResponseWriter, r *http.Request) { text(w, http.StatusOK, "success") })
	return mux
}

// ServeProxy serves the Serve HTTP proxy's port: /-/healthz once Serve runs an application, /-/routes, and each
// RUNNING application's route prefix.
func (h *Head) ServeProxy() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		var apps []serveApp
		running := false
		if h.serve != nil {
			apps = h.serve.apps
			running = h.appStatusLocked() == ray.ApplicationStatusRunning
		}
		h.mu.Unlock()
		switch r.URL.Path {
		case "/-/healthz":
			if apps == nil {
				// No proxy actor runs before Serve starts: nothing listens on a real head.
				text(w, http.StatusServiceUnavailable, "This node is being drained.")
				return
			}
			text(w, http.StatusOK, "success")
			return
		case "/-/routes":
			routes := map[string]string{}
			for _, a := range apps {
				if running {
					routes[a.route()] = a.Name
				}
			}
			writeJSON(w, http.StatusOK, routes)
			return
		}
		best := -1
		for i, a := range apps {
			p := a.route()
			if running && (r.URL.Path == p || strings.HasPrefix(r.URL.Path, strings.TrimSuffix(p, "/")+"/")) && (best < 0 || len(p) > len(apps[best].route())) {
				best = i
			}
		}
		if best < 0 {
			text(w, http.StatusNotFound, fmt.Sprintf("Path '%s' not found. Ping http://.../-/routes for available routes.", r.URL.Path))
			return
		}
		reply := apps[best].Name
		if h.opts.RouteReply != nil {
			reply = h.opts.RouteReply(apps[best].Name, r)
		}
		text(w, http.StatusOK, reply)
	})
}

func (a serveApp) route() string {
	if a.RoutePrefix == "" {
		return "/"
	}
	return a.RoutePrefix
}

func text(w http.ResponseWriter, code int, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, s)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// traceback is how Ray's dashboard answers an exception in a job route: 500 with the traceback as text.
func traceback(w http.ResponseWriter, err string) {
	text(w, http.StatusInternalServerError, "Traceback (most recent call last):\n  File \"fakeray\", line 1, in <module>\n"+err)
}

func (h *Head) serveJobs(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/api/jobs/")
	if rest == "" {
		switch r.Method {
		case http.MethodPost:
			var req ray.JobSubmitRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				text(w, http.StatusBadRequest, "Failed to parse request body: "+err.Error())
				return
			}
			code, body := h.submit(req)
			if s, ok := body.(string); ok {
				if code == http.StatusInternalServerError {
					traceback(w, s)
				} else {
					text(w, code, s)
				}
				return
			}
			writeJSON(w, code, body)
		case http.MethodGet:
			writeJSON(w, http.StatusOK, h.Jobs())
		default:
			text(w, http.StatusMethodNotAllowed, "405: Method Not Allowed")
		}
		return
	}
	id, action, _ := strings.Cut(rest, "/")
	if u, err := url.PathUnescape(id); err == nil {
		id = u
	}
	h.mu.Lock()
	if r.Method == http.MethodPost && action == "stop" {
		h.stops = append(h.stops, id)
	}
	j := h.jobs[id]
	if j == nil {
		h.notFound++
	}
	h.mu.Unlock()
	if j == nil {
		text(w, http.StatusNotFound, fmt.Sprintf("Job %s does not exist", id))
		return
	}
	switch {
	case r.Method == http.MethodGet && action == "":
		info, _ := h.Job(id)
		writeJSON(w, http.StatusOK, info)
	case r.Method == http.MethodGet && action == "logs":
		h.mu.Lock()
		logs := j.logs.String()
		h.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]string{"logs": logs})
	case r.Method == http.MethodPost && action == "stop":
		writeJSON(w, http.StatusOK, map[string]bool{"stopped": h.stop(j)})
	case r.Method == http.MethodDelete && action == "":
		h.mu.Lock()
		st := j.info.Status
		if st.IsTerminal() {
			delete(h.jobs, id)
			for i, o := range h.order {
				if o == id {
					h.order = append(h.order[:i], h.order[i+1:]...)
					break
				}
			}
		}
		h.mu.Unlock()
		if !st.IsTerminal() {
			traceback(w, fmt.Sprintf("RuntimeError: Attempted to delete job '%s', but it is in a non-terminal state %s.", id, st))
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"deleted": true})
	default:
		text(w, http.StatusMethodNotAllowed, "405: Method Not Allowed")
	}
}

// submit accepts a job, or refuses a repeated submission ID as Ray 2.52 does.
func (h *Head) submit(req ray.JobSubmitRequest) (int, any) {
	if strings.TrimSpace(req.Entrypoint) == "" {
		return http.StatusBadRequest, "Failed to parse request body: entrypoint must not be empty"
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return http.StatusServiceUnavailable, "the head is shut down"
	}
	if req.SubmissionID == "" {
		h.nextJob++
		req.SubmissionID = fmt.Sprintf("raysubmit_fake%012d", h.nextJob)
	}
	if _, ok := h.jobs[req.SubmissionID]; ok {
		h.refused++
		return http.StatusInternalServerError, fmt.Sprintf("ValueError: Job with submission_id %s already exists. Please use a different submission_id.", req.SubmissionID)
	}
	h.submissions++
	j := &job{req: req, submitted: time.Now(), done: make(chan struct{}), info: ray.JobInfo{
		Type: "SUBMISSION", SubmissionID: req.SubmissionID, Status: ray.JobStatusPending, Entrypoint: req.Entrypoint,
		Metadata: req.Metadata, RuntimeEnv: req.RuntimeEnv, StartTime: time.Now().UnixMilli(),
		EntrypointNumCPUs: req.EntrypointNumCPUs, EntrypointNumGPUs: req.EntrypointNumGPUs,
		EntrypointMemory: req.EntrypointMemory, EntrypointResources: req.EntrypointResources,
	}, history: []ray.JobStatus{ray.JobStatusPending}}
	if j.info.Metadata == nil {
		j.info.Metadata = map[string]string{}
	}
	j.info.Message = pendingMessage(req)
	h.jobs[req.SubmissionID] = j
	h.order = append(h.order, req.SubmissionID)
	h.schedule()
	if h.opts.PendingFor > 0 {
		time.AfterFunc(h.opts.PendingFor, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if !h.closed {
				h.schedule()
			}
		})
	}
	return http.StatusOK, map[string]string{"job_id": req.SubmissionID, "submission_id": req.SubmissionID}
}

func pendingMessage(req ray.JobSubmitRequest) string {
	m := "Job has not started yet."
	if req.EntrypointNumCPUs > 0 || req.EntrypointNumGPUs > 0 || req.EntrypointMemory > 0 || len(req.EntrypointResources) > 0 {
		m += " It may be waiting for resources (CPUs, GPUs, memory, custom resources) to become available."
	}
	if len(req.RuntimeEnv) > 0 {
		m += " It may be waiting for the runtime environment to be set up."
	}
	return m
}

// demand is what a job holds while it runs.
func demand(req ray.JobSubmitRequest) map[string]float64 {
	d := map[string]float64{}
	for k, v := range req.EntrypointResources {
		d[k] += v
	}
	if req.EntrypointNumCPUs > 0 {
		d["CPU"] += req.EntrypointNumCPUs
	}
	if req.EntrypointNumGPUs > 0 {
		d["GPU"] += req.EntrypointNumGPUs
	}
	return d
}

// schedule starts every PENDING job whose resources are free, in submission order (none under Options.Manual);
// call with h.mu held.
func (h *Head) schedule() {
	if h.opts.Manual {
		return
	}
	for _, id := range h.order {
		j := h.jobs[id]
		if j.started || j.info.Status != ray.JobStatusPending || j.stopping || time.Since(j.submitted) < h.opts.PendingFor {
			continue
		}
		need := demand(j.req)
		fits := true
		if h.opts.Resources != nil {
			for k, v := range need {
				if h.used[k]+v > h.opts.Resources[k]+1e-9 {
					fits = false
				}
			}
		}
		if !fits {
			continue
		}
		for k, v := range need {
			h.used[k] += v
		}
		h.nextJob++
		j.started = true
		j.info.Status, j.info.Message = ray.JobStatusRunning, "Job is currently running."
		j.history = append(j.history, j.info.Status)
		j.info.JobID = fmt.Sprintf("%02x000000", h.nextJob%256)
		j.info.DriverInfo = &ray.DriverInfo{ID: j.info.JobID, NodeIPAddress: "127.0.0.1", PID: fmt.Sprint(10000 + h.nextJob)}
		ctx, cancel := context.WithCancel(context.Background())
		j.cancel = cancel
		h.wg.Add(1)
		go h.run(ctx, j, need)
	}
}

// lockedWriter appends to a job's log under the head's lock.
type lockedWriter struct {
	h *Head
	j *job
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	return w.j.logs.Write(p)
}

func (h *Head) run(ctx context.Context, j *job, held map[string]float64) {
	defer h.wg.Done()
	defer close(j.done)
	code := h.opts.Run(ctx, j.req, lockedWriter{h, j})
	h.mu.Lock()
	defer h.mu.Unlock()
	j.cancel()
	if h.jobs[j.info.SubmissionID] == j {
		for k, v := range held {
			h.used[k] -= v
		}
	}
	if j.set {
		if !h.closed {
			h.schedule()
		}
		return
	}
	j.info.EndTime = time.Now().UnixMilli()
	switch {
	case j.stopping:
		j.info.Status, j.info.Message = ray.JobStatusStopped, "Job was intentionally stopped."
	case code == 0:
		j.info.Status, j.info.Message = ray.JobStatusSucceeded, "Job finished successfully."
		j.info.DriverExitCode = &code
	default:
		j.info.Status = ray.JobStatusFailed
		j.info.ErrorType = "JOB_ENTRYPOINT_COMMAND_ERROR"
		j.info.DriverExitCode = &code
		if tail := lastLines(j.logs.String(), 20000); tail != "" {
			j.info.Message = fmt.Sprintf("Job entrypoint command failed with exit code %d, last available logs (truncated to 20,000 chars):\n%s", code, tail)
		} else {
			j.info.Message = fmt.Sprintf("Job entrypoint command failed with exit code %d. No logs available.", code)
		}
	}
	j.history = append(j.history, j.info.Status)
	if !h.closed {
		h.schedule()
	}
}

func lastLines(s string, max int) string {
	if len(s) > max {
		s = s[len(s)-max:]
	}
	return s
}

// stop asks a job to stop; true while it was PENDING or RUNNING (Ray's answer while the supervisor lives). A
// PENDING job stays PENDING, as on a real head where it waits for resources.
func (h *Head) stop(j *job) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if j.info.Status.IsTerminal() {
		return false
	}
	j.stopping = true
	switch {
	case j.cancel != nil:
		j.cancel()
	case j.info.Status == ray.JobStatusRunning:
		// Moved to RUNNING by SetJob, with no runner: its driver ends now, as a runner's would.
		j.info.Status, j.info.Message, j.info.EndTime = ray.JobStatusStopped, "Job was intentionally stopped.", time.Now().UnixMilli()
		j.history = append(j.history, j.info.Status)
	}
	return true
}

// SetJob moves job id to status, with the message Ray gives it and these start and end times (Unix milliseconds),
// as the head would report it from then on; a job the head does not hold is added, as one submitted another way
// (a user's own `ray job submit`). A job whose runner is running is cut off from it: only SetJob moves it now.
func (h *Head) SetJob(id string, status ray.JobStatus, startMs, endMs int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	j := h.jobs[id]
	if j == nil {
		j = &job{submitted: time.Now(), done: make(chan struct{}), info: ray.JobInfo{Type: "SUBMISSION", SubmissionID: id, Metadata: map[string]string{}}}
		h.jobs[id] = j
		h.order = append(h.order, id)
	}
	if j.cancel != nil {
		j.set = true
		j.cancel()
	}
	j.started = j.started || status != ray.JobStatusPending
	j.info.Status, j.info.StartTime, j.info.EndTime = status, startMs, endMs
	j.info.ErrorType, j.info.DriverExitCode = "", nil
	switch status {
	case ray.JobStatusPending:
		j.info.Message = pendingMessage(j.req)
	case ray.JobStatusRunning:
		j.info.Message = "Job is currently running."
	case ray.JobStatusStopped:
		j.info.Message = "Job was intentionally stopped."
	case ray.JobStatusSucceeded:
		j.info.Message, j.info.DriverExitCode = "Job finished successfully.", ptrTo(0)
	case ray.JobStatusFailed:
		j.info.Message, j.info.ErrorType, j.info.DriverExitCode = "Job entrypoint command failed with exit code 1. No logs available.", "JOB_ENTRYPOINT_COMMAND_ERROR", ptrTo(1)
	}
	j.history = append(j.history, status)
}

func ptrTo[T any](v T) *T { return &v }

// Restart plays the head restarted without GCS fault tolerance: its jobs and its Serve applications are gone. What
// it counted of the requests it answered stays.
func (h *Head) Restart() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, j := range h.jobs {
		if j.cancel != nil {
			j.set = true
			j.cancel()
		}
	}
	h.jobs, h.order, h.used, h.serve = map[string]*job{}, nil, map[string]float64{}, nil
}

// SetServeStatus makes every application report status (DEPLOYING, UNHEALTHY, DEPLOY_FAILED, ...) and its
// deployments the matching one, from the next read on, whatever the config deployed; "" goes back to the
// applications' own course.
func (h *Head) SetServeStatus(status string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.serveStatus = status
}

func (h *Head) serveApplications(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPut:
		raw, err := io.ReadAll(r.Body)
		var cfg struct {
			Applications []serveApp `json:"applications"`
		}
		if err == nil {
			err = json.Unmarshal(raw, &cfg)
		}
		if err != nil {
			text(w, http.StatusBadRequest, "Invalid request body: "+err.Error())
			return
		}
		for i := range cfg.Applications {
			if cfg.Applications[i].Name == "" {
				// ServeApplicationSchema's default name.
				cfg.Applications[i].Name = "default"
			}
		}
		h.mu.Lock()
		h.deploys++
		if h.serve == nil || !bytes.Equal(h.serve.raw, raw) {
			h.serve = &serveState{raw: raw, apps: cfg.Applications, deployed: time.Now()}
		}
		h.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	case http.MethodDelete:
		h.mu.Lock()
		h.serve = nil
		h.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	case http.MethodGet:
		writeJSON(w, http.StatusOK, h.serveDetails(true))
	default:
		text(w, http.StatusMethodNotAllowed, "405: Method Not Allowed")
	}
}

// serveDetails is what GET /api/serve/applications/ answers; read says an operator reads it (ServeUnread).
func (h *Head) serveDetails(read bool) ray.ServeDetails {
	h.mu.Lock()
	defer h.mu.Unlock()
	if read && h.serve != nil {
		h.serve.reads++
		if h.appStatusLocked() == ray.ApplicationStatusRunning {
			h.serve.readsRunning++
		}
	}
	d := ray.ServeDetails{ProxyLocation: "EveryNode", DeployMode: "MULTI_APP", Applications: map[string]ray.ServeApplication{},
		ControllerInfo: map[string]json.RawMessage{}}
	if h.serve == nil {
		return d
	}
	d.HTTPOptions = &ray.ServeHTTPOptions{Host: "0.0.0.0", Port: 8000}
	d.Proxies = map[string]ray.ServeProxyDetails{"fake-node": {NodeID: "fake-node", NodeIP: "127.0.0.1", Status: "HEALTHY"}}
	appStatus := h.appStatusLocked()
	running := appStatus == ray.ApplicationStatusRunning
	status := deploymentStatus(appStatus)
	for _, a := range h.serve.apps {
		app := ray.ServeApplication{Name: a.Name, RoutePrefix: a.route(), Status: appStatus,
			LastDeployedTimeS: float64(h.serve.deployed.UnixMilli()) / 1000, Source: "declarative", Deployments: map[string]ray.ServeDeployment{}}
		for _, name := range a.deploymentNames() {
			sd := ray.ServeDeployment{Name: name, Status: status, StatusTrigger: "CONFIG_UPDATE_STARTED", TargetNumReplicas: 1}
			if running {
				sd.StatusTrigger = "CONFIG_UPDATE_COMPLETED"
				sd.Replicas = []ray.ServeReplica{{ReplicaID: name + "-fake", State: "RUNNING", NodeID: "fake-node", NodeIP: "127.0.0.1"}}
			}
			app.Deployments[name] = sd
		}
		d.Applications[a.Name] = app
	}
	return d
}

// appStatusLocked is the status the applications report now: SetServeStatus's, or DEPLOYING for
// Options.ServeDeploying after a deploy and RUNNING from then on. Call with h.mu held and a config deployed.
func (h *Head) appStatusLocked() string {
	switch {
	case h.serveStatus != "":
		return h.serveStatus
	case time.Since(h.serve.deployed) < h.opts.ServeDeploying:
		return ray.ApplicationStatusDeploying
	}
	return ray.ApplicationStatusRunning
}

// deploymentStatus is what an application's deployments report while it is in status.
func deploymentStatus(appStatus string) string {
	switch appStatus {
	case ray.ApplicationStatusRunning:
		return ray.DeploymentStatusHealthy
	case ray.ApplicationStatusDeploying:
		return ray.DeploymentStatusUpdating
	case ray.ApplicationStatusDeployFailed:
		return ray.DeploymentStatusDeployFailed
	}
	return ray.DeploymentStatusUnhealthy
}

// deploymentNames are the deployments an application reports: those its config lists or, when it lists none, one
// named after the application, first letter upper-cased. Serve names a deployment after the class or function
// the import path leads to, code the fake does not have; an application never has none.
func (a serveApp) deploymentNames() []string {
	if len(a.Deployments) == 0 {
		return []string{strings.ToUpper(a.Name[:1]) + a.Name[1:]}
	}
	names := make([]string, len(a.Deployments))
	for i, d := range a.Deployments {
		names[i] = d.Name
	}
	return names
}

// Servers are a head's three ports on loopback.
type Servers struct {
	Dashboard, Agent, ServeProxy *httptest.Server
}

// Start serves h's ports on loopback until Close.
func Start(h *Head) *Servers {
	return &Servers{Dashboard: httptest.NewServer(h.Dashboard()), Agent: httptest.NewServer(h.Agent()), ServeProxy: httptest.NewServer(h.ServeProxy())}
}

// Close stops the servers.
func (s *Servers) Close() {
	s.Dashboard.Close()
	s.Agent.Close()
	s.ServeProxy.Close()
}
