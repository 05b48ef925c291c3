package reliability

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
)

// fakeRay plays every Ray head with internal/testutil/fakeray (the fake test/ray holds to a real Ray head), and
// injects faults in front of it. The API proxy hands it the operator process's requests to the heads' proxy
// subresources (faultProxy.serveRay); the Host (<head-svc>.<ns>.svc.cluster.local) tells the heads apart.
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

// fakeHead is one head: the running Ray head, and what its earlier incarnations took before they restarted.
type fakeHead struct {
	ray *fakeray.Head
	// accepted, refused, notFound and deploys before the last restart.
	accepted, refused, notFound, deploys int
}

func newFakeRay(seed uint64) *fakeRay {
	return &fakeRay{heads: map[string]*fakeHead{}, pendingFor: time.Second, runFor: 2 * time.Second,
		rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), injected: map[string]int{}}
}

func (f *fakeRay) newHead() *fakeray.Head {
	short, long := fakeray.Scripted(f.runFor), fakeray.Scripted(time.Hour)
	return fakeray.New(fakeray.Options{PendingFor: f.pendingFor, Run: func(ctx context.Context, req ray.JobSubmitRequest, logs io.Writer) int {
		if strings.Contains(req.Entrypoint, longRunning) {
			return long(ctx, req, logs)
		}
		return short(ctx, req, logs)
	}})
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

// head returns the head of key (<svc>.<ns>); call with f.mu held.
func (f *fakeRay) head(key string) *fakeHead {
	h := f.heads[key]
	if h == nil {
		h = &fakeHead{ray: f.newHead()}
		f.heads[key] = h
	}
	return h
}

func (f *fakeRay) headOf(ns, cluster string) *fakeHead {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.head(cluster + "-head-svc." + ns)
}

// restartHead replaces a head by a new one that knows no job and no Serve application, as a head restarted
// without GCS fault tolerance does.
func (f *fakeRay) restartHead(ns, cluster string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.head(cluster + "-head-svc." + ns)
	accepted, refused := h.ray.Submissions()
	h.accepted, h.refused = h.accepted+accepted, h.refused+refused
	h.notFound += h.ray.NotFound()
	h.deploys += h.ray.ServeDeploys()
	old := h.ray
	h.ray = f.newHead()
	go old.Close()
}

// submissions returns the accepted and refused submissions the head of RayCluster ns/cluster received, and the
// IDs of the jobs it holds.
func (f *fakeRay) submissions(ns, cluster string) (accepted, refused int, ids []string) {
	h := f.headOf(ns, cluster)
	a, r := h.ray.Submissions()
	for _, j := range h.ray.Jobs() {
		ids = append(ids, j.SubmissionID)
	}
	return h.accepted + a, h.refused + r, ids
}

// serveState returns how many Serve deploys the head of RayCluster ns/cluster took and the config it runs.
func (f *fakeRay) serveState(ns, cluster string) (deploys int, config []byte) {
	h := f.headOf(ns, cluster)
	return h.deploys + h.ray.ServeDeploys(), h.ray.ServeConfig()
}

// notFound returns how often the head of RayCluster ns/cluster was asked for a job it does not know.
func (f *fakeRay) notFound(ns, cluster string) int {
	h := f.headOf(ns, cluster)
	return h.notFound + h.ray.NotFound()
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

func (f *fakeRay) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	fl := f.faults
	roll := f.rng.Float64()
	var delay time.Duration
	switch {
	case roll < fl.errorShare:
		f.injected["ray 5xx"]++
		code := []int{500, 503}[f.rng.IntN(2)]
		f.mu.Unlock()
		http.Error(w, "fake Ray: injected failure", code)
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
	if r.URL.Path == "/-/healthz" {
		// Every pod's Serve proxy (the Host is then a pod's name, no head's Service).
		f.mu.Unlock()
		_, _ = io.WriteString(w, "success")
		return
	}
	h := f.head(headKey(r.Host)).ray
	f.mu.Unlock()
	if delay > 0 {
		rec := &delayedWriter{header: http.Header{}}
		h.Dashboard().ServeHTTP(rec, r)
		sleepOrDone(r, delay)
		rec.flush(w)
		return
	}
	h.Dashboard().ServeHTTP(w, r)
}

// delayedWriter holds an answer back so it can be sent late.
type delayedWriter struct {
	header http.Header
	code   int
	body   []byte
}

func (d *delayedWriter) Header() http.Header { return d.header }
func (d *delayedWriter) WriteHeader(code int) {
	if d.code == 0 {
		d.code = code
	}
}
func (d *delayedWriter) Write(b []byte) (int, error) {
	d.WriteHeader(http.StatusOK)
	d.body = append(d.body, b...)
	return len(b), nil
}
func (d *delayedWriter) flush(w http.ResponseWriter) {
	for k, v := range d.header {
		w.Header()[k] = v
	}
	if d.code == 0 {
		d.code = http.StatusOK
	}
	w.WriteHeader(d.code)
	_, _ = w.Write(d.body)
}

func sleepOrDone(r *http.Request, d time.Duration) {
	select {
	case <-time.After(d):
	case <-r.Context().Done():
	}
}
