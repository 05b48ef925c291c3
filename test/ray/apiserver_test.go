package ray_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestAPIServerJobSubmissions drives the REST API server's job submission endpoints
// (/apis/v1/namespaces/{ns}/jobsubmissions/{cluster}...) end to end: a RayCluster and its head Service live in a
// real kube-apiserver (envtest), the server resolves the head as <svc>.<ns>.svc.cluster.local:<dashboard port>
// through internal/ray's Factory and direct transport, and a dialer maps exactly that address to the real head on
// loopback. The seam is apiserver.Options.Dashboard, which the server already has for tests.
func TestAPIServerJobSubmissions(t *testing.T) {
	cfg, k := testutil.StartEnvtest(t)
	ctx := t.Context()

	const ns, cluster = "default", "raycluster-api"
	const svcDashboardPort = 8265 // what the Service publishes; the dialer maps it to the head's real port
	rc := testutil.MakeRayCluster(ns, cluster).Obj()
	if err := k.Create(ctx, rc); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster + "-head-svc", Labels: map[string]string{"ray.io/cluster": cluster}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"ray.io/cluster": cluster, "ray.io/node-type": "head"},
			Ports:    []corev1.ServicePort{{Name: ray.DashboardPortName, Port: svcDashboardPort}},
		},
	}
	if err := k.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}

	// The only address the server may dial is the head Service's cluster DNS name and dashboard port.
	wantAddr := net.JoinHostPort(cluster+"-head-svc."+ns+".svc."+ray.DefaultClusterDomain, strconv.Itoa(svcDashboardPort))
	var dialMu sync.Mutex
	var badDials []string
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	httpClient := &http.Client{Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != wantAddr {
				dialMu.Lock()
				badDials = append(badDials, addr)
				dialMu.Unlock()
				return nil, fmt.Errorf("test dialer: unexpected address %q (want %q)", addr, wantAddr)
			}
			return dialer.DialContext(ctx, network, "127.0.0.1:"+strconv.Itoa(head.DashboardPort))
		},
	}}
	t.Cleanup(httpClient.CloseIdleConnections)
	f, err := ray.NewFactory(ray.Options{ClusterDomain: ray.DefaultClusterDomain, HTTPClient: httpClient, Timeout: defaultCallTimeout})
	if err != nil {
		t.Fatal(err)
	}
	dash := func(_ context.Context, rc *rayv1.RayCluster, svc *corev1.Service) (apiserver.Dashboard, error) {
		if svc == nil {
			return nil, fmt.Errorf("cluster %s/%s: the server found no head Service", rc.Namespace, rc.Name)
		}
		return f.Dashboard(ray.Target{Namespace: rc.Namespace, HeadServiceName: svc.Name, DashboardPort: ray.DashboardPort(svc)})
	}
	s, err := apiserver.New(cfg, apiserver.Options{Auth: apiserver.AuthNone, Dashboard: dash, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		dialMu.Lock()
		defer dialMu.Unlock()
		if len(badDials) > 0 {
			t.Errorf("the server dialled unexpected addresses: %v", badDials)
		}
	})

	base := srv.URL + "/apis/v1/namespaces/" + ns + "/jobsubmissions/" + cluster
	api := &restClient{t: t, c: srv.Client()}
	suffix := randSuffix()

	// Submit a real entrypoint with a chosen submission id; it prints something we look for in the logs.
	okID := "manta-api-ok-" + suffix
	var reply apiserver.SubmitRayJobReply
	api.do(http.MethodPost, base, apiserver.RayJobSubmission{
		Entrypoint:   `python -c "import sys; print('hello from manta', 6*7); sys.stdout.flush()"`,
		SubmissionID: okID,
		Metadata:     map[string]string{"owner": "manta-test"},
		RuntimeEnv:   "env_vars:\n  MANTA_TEST: \"1\"\n",
	}, http.StatusOK, &reply)
	if reply.SubmissionID != okID {
		t.Fatalf("submit: submissionId %q, want %q", reply.SubmissionID, okID)
	}

	// Without a submission id, Ray chooses one and the server returns it.
	var genReply apiserver.SubmitRayJobReply
	api.do(http.MethodPost, base, apiserver.RayJobSubmission{Entrypoint: `python -c "print('generated id')"`}, http.StatusOK, &genReply)
	if genReply.SubmissionID == "" {
		t.Fatal("submit without an id: empty submissionId in the reply")
	}

	got := api.waitStatus(base+"/"+okID, jobTimeout, "SUCCEEDED")
	if got.Entrypoint == "" || !strings.Contains(got.Entrypoint, "hello from manta") {
		t.Errorf("entrypoint %q", got.Entrypoint)
	}
	if got.Metadata["owner"] != "manta-test" {
		t.Errorf("metadata %v, want owner=manta-test", got.Metadata)
	}
	if got.StartTime == 0 || got.EndTime < got.StartTime {
		t.Errorf("startTime %d, endTime %d", got.StartTime, got.EndTime)
	}
	if !strings.Contains(got.RuntimeEnv["env_vars"], "MANTA_TEST") {
		t.Errorf("runtimeEnv %v, want env_vars with MANTA_TEST", got.RuntimeEnv)
	}

	var logs apiserver.GetJobLogReply
	api.do(http.MethodGet, base+"/log/"+okID, nil, http.StatusOK, &logs)
	if !strings.Contains(logs.Log, "hello from manta 42") {
		t.Errorf("log %q, want it to contain %q", logs.Log, "hello from manta 42")
	}

	api.waitStatus(base+"/"+genReply.SubmissionID, jobTimeout, "SUCCEEDED")

	var list apiserver.ListJobSubmissionInfo
	api.do(http.MethodGet, base, nil, http.StatusOK, &list)
	seen := map[string]string{}
	for _, j := range list.Submissions {
		seen[j.SubmissionID] = j.Status
	}
	for _, id := range []string{okID, genReply.SubmissionID} {
		if seen[id] != "SUCCEEDED" {
			t.Errorf("list: %q has status %q, want SUCCEEDED (listed: %v)", id, seen[id], seen)
		}
	}

	// The same submission id again: 409 with a JSON error naming it, and nothing new runs.
	e := api.doError(http.MethodPost, base, apiserver.RayJobSubmission{Entrypoint: `python -c "print('again')"`, SubmissionID: okID}, http.StatusConflict)
	if e.Code != 6 || !strings.Contains(e.Message, okID) {
		t.Errorf("resubmit: error %+v, want code 6 (AlreadyExists) naming %q", e, okID)
	}
	api.do(http.MethodGet, base+"/log/"+okID, nil, http.StatusOK, &logs)
	if strings.Contains(logs.Log, "again") {
		t.Errorf("the resubmission ran: log %q", logs.Log)
	}

	// A long job: deleting it while it runs is refused, stopping it ends it as STOPPED.
	longID := "manta-api-long-" + suffix
	api.do(http.MethodPost, base, apiserver.RayJobSubmission{
		Entrypoint: `python -c "import time; print('long job started', flush=True); time.sleep(600)"`, SubmissionID: longID,
	}, http.StatusOK, &reply)
	api.waitStatus(base+"/"+longID, jobTimeout, "RUNNING")
	e = api.doError(http.MethodDelete, base+"/"+longID, nil, http.StatusBadRequest)
	if e.Message == "" {
		t.Errorf("delete while running: empty error message")
	}
	api.do(http.MethodPost, base+"/"+longID, nil, http.StatusOK, nil)
	stopped := api.waitStatus(base+"/"+longID, jobTimeout, "STOPPED")
	if stopped.EndTime == 0 {
		t.Errorf("stopped job has no endTime: %+v", stopped)
	}

	// Delete the finished jobs: each answers {} and is gone right away (404 with a JSON error). The list is not
	// checked afterwards: Ray 2.52's job monitor can write a deleted job back (FAILED "Entrypoint not found.",
	// "Job supervisor actor died") when the delete comes soon after the job ended, even before the GET that
	// follows the delete; see README.md. Such a record is Ray's, not the job: it is deleted again.
	for _, id := range []string{okID, genReply.SubmissionID, longID} {
		api.deleteJob(base + "/" + id)
	}

	// Unknown submission and unknown cluster: 404s that say which.
	if e := api.doError(http.MethodGet, base+"/no-such-submission-"+suffix, nil, http.StatusNotFound); !strings.Contains(e.Message, "no-such-submission") {
		t.Errorf("unknown submission: %+v", e)
	}
	if e := api.doError(http.MethodGet, srv.URL+"/apis/v1/namespaces/"+ns+"/jobsubmissions/no-such-cluster", nil, http.StatusNotFound); !strings.Contains(e.Message, "no-such-cluster") {
		t.Errorf("unknown cluster: %+v", e)
	}
}

func randSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// restClient makes JSON calls to the REST API server and fails the test on unexpected answers.
type restClient struct {
	t *testing.T
	c *http.Client
}

func (r *restClient) call(method, url string, body any) (int, http.Header, []byte) {
	r.t.Helper()
	var in io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			r.t.Fatal(err)
		}
		in = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(r.t.Context(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, in)
	if err != nil {
		r.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.c.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	return resp.StatusCode, resp.Header, out
}

// do expects status want and decodes the JSON answer into out (when not nil).
func (r *restClient) do(method, url string, body any, want int, out any) {
	r.t.Helper()
	code, h, raw := r.call(method, url, body)
	if code != want {
		r.t.Fatalf("%s %s: %d %s, want %d", method, url, code, raw, want)
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		r.t.Errorf("%s %s: Content-Type %q, want application/json", method, url, ct)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			r.t.Fatalf("%s %s: decoding %s: %v", method, url, raw, err)
		}
	}
}

// doError expects status want with a JSON error body (google.rpc.Status shape) and returns it.
func (r *restClient) doError(method, url string, body any, want int) apiserver.Status {
	r.t.Helper()
	code, h, raw := r.call(method, url, body)
	if code != want {
		r.t.Fatalf("%s %s: %d %s, want %d", method, url, code, raw, want)
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		r.t.Errorf("%s %s: Content-Type %q, want application/json", method, url, ct)
	}
	var s apiserver.Status
	if err := json.Unmarshal(raw, &s); err != nil || s.Code == 0 || s.Message == "" {
		r.t.Fatalf("%s %s: error body %s is not a JSON status (%v)", method, url, raw, err)
	}
	return s
}

// deleteJob deletes the submission at url, which answers {}, and checks that GET then answers 404 (NotFound). A
// record Ray's job monitor wrote back after the delete (see README.md) is deleted again, at most twice.
func (r *restClient) deleteJob(url string) {
	r.t.Helper()
	for try := 0; ; try++ {
		r.do(http.MethodDelete, url, nil, http.StatusOK, nil)
		code, _, raw := r.call(http.MethodGet, url, nil)
		var back apiserver.JobSubmissionInfo
		if code == http.StatusOK && try < 2 && json.Unmarshal(raw, &back) == nil && back.Status == "FAILED" &&
			back.Entrypoint == "Entrypoint not found." && strings.Contains(back.Message, "Job supervisor actor died") {
			r.t.Logf("GET %s after delete: Ray's job monitor wrote the job back (%s); deleting again", url, raw)
			continue
		}
		if code != http.StatusNotFound {
			r.t.Fatalf("GET %s after delete: %d %s, want 404", url, code, raw)
		}
		var s apiserver.Status
		if err := json.Unmarshal(raw, &s); err != nil || s.Code != 5 {
			r.t.Errorf("GET %s after delete: %s, want a JSON status with code 5 (NotFound) (%v)", url, raw, err)
		}
		return
	}
}

// waitStatus polls GET url until the submission has status want; a terminal status other than want fails.
func (r *restClient) waitStatus(url string, timeout time.Duration, want string) apiserver.JobSubmissionInfo {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	var last apiserver.JobSubmissionInfo
	for {
		// A 503 (the head did not answer in time, as on a loaded machine) says to try again, as waitJob does.
		code, h, raw := r.call(http.MethodGet, url, nil)
		if code == http.StatusServiceUnavailable && time.Now().Before(deadline) {
			r.t.Logf("GET %s: 503 %s; trying again", url, raw)
			time.Sleep(time.Second)
			continue
		}
		if code != http.StatusOK {
			r.t.Fatalf("GET %s: %d %s, want 200", url, code, raw)
		}
		if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			r.t.Errorf("GET %s: Content-Type %q, want application/json", url, ct)
		}
		last = apiserver.JobSubmissionInfo{}
		if err := json.Unmarshal(raw, &last); err != nil {
			r.t.Fatalf("GET %s: decoding %s: %v", url, raw, err)
		}
		if last.Status == want {
			return last
		}
		if ray.JobStatus(last.Status).IsTerminal() {
			r.t.Fatalf("GET %s: status %s (%s), want %s", url, last.Status, last.Message, want)
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("GET %s: still %s after %s, want %s", url, last.Status, timeout, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
