package reliability

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/apiserver"
)

// The load generator runs as a second process: the test binary started with these variables.
const (
	loadURLEnv     = "MANTA_RELIABILITY_LOAD_URL"
	loadClientsEnv = "MANTA_RELIABILITY_LOAD_CLIENTS"
	loadSecondsEnv = "MANTA_RELIABILITY_LOAD_SECONDS"
)

// restLoadSeconds is how long TestRESTLoad holds its load in make test; MANTA_RELIABILITY_LOAD_SECONDS=30 gives
// the full 30 s.
const restLoadSeconds = 10

// loadReport is what the load process prints, as one JSON line, when it is done.
type loadReport struct {
	Requests int                `json:"requests"`
	Errors   []string           `json:"errors"`
	ErrorN   int                `json:"errorCount"`
	P50      map[string]float64 `json:"p50"`
	P99      map[string]float64 `json:"p99"`
	// Kept are the names acknowledged as created and never deleted, by kind; Deleted, acknowledged as deleted.
	Kept, Deleted map[string][]string
}

// startREST serves Manta's REST API on loopback against the dev cluster, as `manta apiserver --auth=none` does
// (client-side rate limiting off, as ctrl.GetConfig leaves it).
func startREST(t *testing.T, dcCfgHost func() *apiserver.Server) string {
	t.Helper()
	s := dcCfgHost()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(t.Context(), ln) }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("REST server: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// TestRESTLoad holds 50 concurrent clients in a second process against the REST API for restLoadSeconds, each
// creating compute templates and clusters, reading them back and deleting half the clusters. No request may
// fail, every acknowledged create that was not deleted must exist afterwards and every acknowledged delete be
// gone; p50 and p99 latencies are reported.
func TestRESTLoad(t *testing.T) {
	dc, cl := devCluster(t)
	ns := namespace(t, cl, "restload")
	base := startREST(t, func() *apiserver.Server {
		cfg := dc.RESTConfig()
		cfg.QPS = -1
		s, err := apiserver.New(cfg, apiserver.Options{Auth: apiserver.AuthNone})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
	seconds := restLoadSeconds
	if v := os.Getenv(loadSecondsEnv); v != "" {
		seconds, _ = strconv.Atoi(v)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), loadURLEnv+"="+base+"/apis/v1/namespaces/"+ns, loadClientsEnv+"=50", loadSecondsEnv+"="+strconv.Itoa(seconds))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("load process: %v\n%s", err, stderr.String())
	}
	var rep loadReport
	if err := json.Unmarshal(bytes.TrimSpace(out), &rep); err != nil {
		t.Fatalf("load report %q: %v", out, err)
	}
	if rep.ErrorN > 0 {
		t.Errorf("%d of %d requests failed, first ones: %s", rep.ErrorN, rep.Requests, strings.Join(rep.Errors, "\n"))
	}

	// No lost writes: what was acknowledged is there, what was deleted is gone.
	cms := &corev1.ConfigMapList{}
	rcs := &rayv1.RayClusterList{}
	if err := cl.List(t.Context(), cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if err := cl.List(t.Context(), rcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	have := map[string]map[string]bool{"template": {}, "cluster": {}}
	for _, c := range cms.Items {
		have["template"][c.Name] = true
	}
	for _, c := range rcs.Items {
		have["cluster"][c.Name] = true
	}
	for kind, names := range rep.Kept {
		for _, n := range names {
			if !have[kind][n] {
				t.Errorf("%s %s was acknowledged as created but is not there", kind, n)
			}
		}
	}
	for _, n := range rep.Deleted["cluster"] {
		if have["cluster"][n] {
			t.Errorf("cluster %s was acknowledged as deleted but is there", n)
		}
	}
	t.Logf("50 clients for %d s from a second process: %d requests (%.0f/s), %d errors; %d templates and %d clusters kept, %d clusters deleted; latency p50/p99 in ms: %s",
		seconds, rep.Requests, float64(rep.Requests)/float64(seconds), rep.ErrorN, len(rep.Kept["template"]), len(rep.Kept["cluster"]), len(rep.Deleted["cluster"]), formatLatencies(rep))
}

func formatLatencies(rep loadReport) string {
	var parts []string
	for _, op := range sortedKeys(rep.P50) {
		parts = append(parts, fmt.Sprintf("%s %.1f/%.1f", op, rep.P50[op], rep.P99[op]))
	}
	return strings.Join(parts, ", ")
}

// runLoadProcess is the second process of TestRESTLoad.
func runLoadProcess() int {
	base := os.Getenv(loadURLEnv)
	clients, _ := strconv.Atoi(os.Getenv(loadClientsEnv))
	seconds, _ := strconv.Atoi(os.Getenv(loadSecondsEnv))
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients, Proxy: nil}}
	ns := base[strings.LastIndex(base, "/")+1:]
	var mu sync.Mutex
	rep := loadReport{Kept: map[string][]string{}, Deleted: map[string][]string{}}
	lat := map[string][]time.Duration{}
	do := func(op, method, url string, body any) bool {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, url, rd)
		req.Header.Set("Content-Type", "application/json")
		began := time.Now()
		resp, err := hc.Do(req)
		took := time.Since(began)
		var msg string
		if err == nil {
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				msg = fmt.Sprintf("%s %s: %d %s", method, url, resp.StatusCode, truncateMsg(string(raw), 200))
			}
		} else {
			msg = fmt.Sprintf("%s %s: %v", method, url, err)
		}
		mu.Lock()
		defer mu.Unlock()
		rep.Requests++
		lat[op] = append(lat[op], took)
		if msg != "" {
			rep.ErrorN++
			if len(rep.Errors) < 10 {
				rep.Errors = append(rep.Errors, msg)
			}
		}
		return msg == ""
	}
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(deadline); n++ {
				tmpl, rc := fmt.Sprintf("t-%02d-%d", w, n), fmt.Sprintf("c-%02d-%d", w, n)
				if !do("create template", http.MethodPost, base+"/compute_templates", map[string]any{"name": tmpl, "namespace": ns, "cpu": 1, "memory": 2}) {
					continue
				}
				mu.Lock()
				rep.Kept["template"] = append(rep.Kept["template"], tmpl)
				mu.Unlock()
				do("get template", http.MethodGet, base+"/compute_templates/"+tmpl, nil)
				if !do("create cluster", http.MethodPost, base+"/clusters", map[string]any{
					"name": rc, "namespace": ns, "user": "load", "version": "2.52.0",
					"clusterSpec": map[string]any{"headGroupSpec": map[string]any{"computeTemplate": tmpl, "rayStartParams": map[string]string{"dashboard-host": "0.0.0.0"}}},
				}) {
					continue
				}
				do("get cluster", http.MethodGet, base+"/clusters/"+rc, nil)
				kind := "Kept"
				if n%2 == 0 && do("delete cluster", http.MethodDelete, base+"/clusters/"+rc, nil) {
					kind = "Deleted"
				}
				mu.Lock()
				if kind == "Kept" {
					rep.Kept["cluster"] = append(rep.Kept["cluster"], rc)
				} else {
					rep.Deleted["cluster"] = append(rep.Deleted["cluster"], rc)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rep.P50, rep.P99 = map[string]float64{}, map[string]float64{}
	for op, ds := range lat {
		slices.Sort(ds)
		rep.P50[op] = float64(ds[len(ds)/2]) / float64(time.Millisecond)
		rep.P99[op] = float64(ds[min(len(ds)-1, len(ds)*99/100)]) / float64(time.Millisecond)
	}
	w := bufio.NewWriter(os.Stdout)
	_ = json.NewEncoder(w).Encode(rep)
	_ = w.Flush()
	return 0
}

// TestRESTFuzz sends random requests to every route of the REST API (mutated valid bodies, wrong types, junk
// bytes, odd names and methods) against the dev cluster: none may be answered 5xx, every 4xx has a JSON body
// with a message, and the server still answers afterwards. One 5xx is the API's answer to a real state, not to the
// request: a job submission call to a cluster the fuzz created, whose head on a kwok node runs no Ray dashboard, is
// 503 with code 14 (Unavailable), as for any cluster whose head does not answer.
func TestRESTFuzz(t *testing.T) {
	dc, cl := devCluster(t)
	ns := namespace(t, cl, "restfuzz")
	base := startREST(t, func() *apiserver.Server {
		cfg := dc.RESTConfig()
		cfg.QPS = -1
		s, err := apiserver.New(cfg, apiserver.Options{Auth: apiserver.AuthNone})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 400))
	root := base + "/apis/v1/namespaces/" + ns
	valid := map[string]map[string]any{
		"compute_templates": {"name": "small", "namespace": ns, "cpu": 1, "memory": 2},
		"clusters": {"name": "c", "namespace": ns, "user": "u", "version": "2.52.0",
			"clusterSpec": map[string]any{"headGroupSpec": map[string]any{"computeTemplate": "small", "rayStartParams": map[string]string{}},
				"workerGroupSpec": []any{map[string]any{"groupName": "w", "computeTemplate": "small", "replicas": 1, "minReplicas": 0, "maxReplicas": 2}}}},
		"jobs": {"name": "j", "namespace": ns, "user": "u", "entrypoint": "python -c 1", "version": "2.52.0",
			"clusterSpec": map[string]any{"headGroupSpec": map[string]any{"computeTemplate": "small", "rayStartParams": map[string]string{}}}},
		"services": {"name": "s", "namespace": ns, "user": "u", "version": "2.52.0", "serveConfigV2": "applications: []\n",
			"clusterSpec": map[string]any{"headGroupSpec": map[string]any{"computeTemplate": "small", "rayStartParams": map[string]string{}}}},
		"image_pull_jobs": {"name": "p", "namespace": ns, "image": "busybox", "nodeNames": []any{"kwok-node-0"}},
	}
	// The template the others name exists, so their bodies get past that check.
	post(t, root+"/compute_templates", valid["compute_templates"])
	names := []string{"c", "x", "", "UPPER", "a..b", "%2e%2e", strings.Repeat("n", 300), "%00", "🙂"}
	kinds := sortedKeys(valid)
	const n = 600
	codes := map[int]int{}
	for i := range n {
		kind := kinds[rng.IntN(len(kinds))]
		name := names[rng.IntN(len(names))]
		var method, url string
		var body []byte
		switch rng.IntN(6) {
		case 0, 1, 2:
			method, url = http.MethodPost, root+"/"+kind
			obj := jsonCopy(valid[kind])
			for range 1 + rng.IntN(3) {
				mutate(rng, obj)
			}
			if name != "c" {
				obj["name"] = fmt.Sprint(i) + name
			}
			body, _ = json.Marshal(obj)
		case 3:
			method, url = http.MethodPost, root+"/"+kind
			body = make([]byte, rng.IntN(64))
			for k := range body {
				body[k] = byte(rng.IntN(256))
			}
		case 4:
			method, url = []string{http.MethodGet, http.MethodDelete}[rng.IntN(2)], root+"/"+kind+"/"+name
		default:
			method = []string{http.MethodPut, http.MethodPatch, http.MethodGet, http.MethodPost}[rng.IntN(4)]
			url = root + "/" + []string{"jobsubmissions/" + name, "services/" + name, kind + "/" + name + "/x", "clusters?limit=-1"}[rng.IntN(4)]
			body = []byte(`{"entrypoint":` + []string{`1`, `""`, `"echo"`, `null`}[rng.IntN(4)] + `}`)
		}
		req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(body))
		if err != nil {
			codes[-1]++ // a URL Go itself refuses to build
			continue
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
		if resp.StatusCode >= 500 && !dashboardUnreachable(url, resp.StatusCode, raw) {
			t.Errorf("%s %s %s: %d %s", method, url, truncateMsg(string(body), 200), resp.StatusCode, truncateMsg(string(raw), 300))
		} else if resp.StatusCode >= 400 && !json.Valid(raw) {
			t.Errorf("%s %s: %d with a body that is not JSON: %q", method, url, resp.StatusCode, truncateMsg(string(raw), 200))
		}
	}
	resp, err := http.Get(base + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz after the fuzz: %v %v", resp, err)
	}
	resp.Body.Close()
	t.Logf("seed %d: %d random requests, answers by status: %v", seed, n, codes)
}

// dashboardUnreachable says whether an answer is the job submission API's 503 for a cluster whose Ray dashboard
// does not answer: code 14 (Unavailable) in a JSON body.
func dashboardUnreachable(url string, status int, body []byte) bool {
	var e struct {
		Code int `json:"code"`
	}
	return status == http.StatusServiceUnavailable && strings.Contains(url, "/jobsubmissions/") &&
		json.Unmarshal(body, &e) == nil && e.Code == 14
}

func post(t *testing.T, url string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
}

func jsonCopy(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}
