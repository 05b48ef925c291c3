package devcluster

import (
	"net/http"
	"strings"
	"sync"
)

// RegistryRequest is one request the real node's registry answered.
type RegistryRequest struct {
	Method string
	Path   string // e.g. /v2/library/redis/manifests/7.4.0
	Status int
}

// Repo and Kind read a distribution API path: /v2/<repo>/manifests/<ref> and /v2/<repo>/blobs/<digest> give the
// repository and "manifests" or "blobs"; other paths give "", "".
func (r RegistryRequest) Repo() string { repo, _, _ := r.parse(); return repo }

// Kind is "manifests", "blobs" or "" (see Repo).
func (r RegistryRequest) Kind() string { _, kind, _ := r.parse(); return kind }

// Ref is the tag or digest of a manifest or blob request.
func (r RegistryRequest) Ref() string { _, _, ref := r.parse(); return ref }

func (r RegistryRequest) parse() (repo, kind, ref string) {
	p, ok := strings.CutPrefix(r.Path, "/v2/")
	if !ok {
		return "", "", ""
	}
	for _, k := range []string{"/manifests/", "/blobs/"} {
		if i := strings.LastIndex(p, k); i > 0 && !strings.Contains(p[i+len(k):], "/") {
			return p[:i], strings.Trim(k, "/"), p[i+len(k):]
		}
	}
	return "", "", ""
}

// requestLog records what the registry answers, so tests can tell whether the node pulled (containerd resolves a
// tag with a manifest HEAD or GET, then fetches the blobs it lacks) by counting, without reading logs.
type requestLog struct {
	mu   sync.Mutex
	reqs []RegistryRequest
}

func (l *requestLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		l.mu.Lock()
		l.reqs = append(l.reqs, RegistryRequest{Method: r.Method, Path: r.URL.Path, Status: sw.status})
		l.mu.Unlock()
	})
}

func (l *requestLog) snapshot() []RegistryRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]RegistryRequest(nil), l.reqs...)
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// RegistryRequests are the requests the real node's registry answered so far, oldest first (nil without a real
// node): the pushes of Start, then the node's pulls.
func (c *Cluster) RegistryRequests() []RegistryRequest {
	if c.node == nil {
		return nil
	}
	return c.node.requests.snapshot()
}
