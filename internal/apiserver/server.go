package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/rayauth"
)

// Server timeouts. Requests are small and every handler makes a few Kubernetes or Ray calls, each bounded by the
// request context, so a minute is generous; slow clients cannot hold connections open.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 60 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 64 << 10
	// requestTimeout bounds every handler's Kubernetes and Ray calls, shorter than writeTimeout so a slow backend
	// gets a JSON 503 instead of a connection closed mid-answer.
	requestTimeout = 50 * time.Second
)

// shutdownTimeout is how long in-flight requests get after the server is told to stop; then their connections are
// closed, which cancels their contexts. A variable for tests.
var shutdownTimeout = 15 * time.Second

// Options configure a Server.
type Options struct {
	// Auth is AuthKubernetes (default) or AuthNone.
	Auth AuthMode
	// UseKubernetesProxy reaches Ray dashboards through the API server's services/proxy.
	UseKubernetesProxy bool
	// ClusterDomain is the cluster DNS domain for direct dashboard URLs; default cluster.local.
	ClusterDomain string
	// Log receives request logs; default discards.
	Log logr.Logger
	// Dashboard, when set, replaces how job submission endpoints reach a cluster's Ray dashboard.
	Dashboard DashboardFunc
	// FieldValidation is what happens to unknown fields of request bodies: Warn (default) or Strict. Requests can
	// ask for Strict with ?fieldValidation=Strict; under Strict they cannot ask for Warn.
	FieldValidation FieldValidation
	// TLSCertFile and TLSKeyFile, both or neither, make Serve speak HTTPS (TLS 1.2 or later); the files are read
	// again when they change, so a renewed certificate (cert-manager, a rotated Secret) needs no restart.
	TLSCertFile, TLSKeyFile string
	// InsecureHTTP allows plain HTTP on a non-loopback address, for a TLS-terminating proxy or mesh in front.
	InsecureHTTP bool
	// MaxRequestsInflight bounds the requests handled at once; more are answered 429 with Retry-After. Default
	// DefaultMaxRequestsInflight. /healthz and /metrics are not counted, so probes and scrapes see an overload.
	MaxRequestsInflight int
	// CORSAllowOrigin lets browser pages from this origin call the API (KubeRay's --cors-allow-origin; see
	// cors.go); empty: no CORS headers, as KubeRay without the flag.
	CORSAllowOrigin string
	// AnonymousAs, "<namespace>:<serviceaccount>", makes requests without an Authorization header act as that
	// ServiceAccount (see anonymous.go); empty: they are refused with 401. Needs AuthKubernetes, and serves only
	// on loopback or over TLS (CheckServing).
	AnonymousAs string
}

// DefaultMaxRequestsInflight bounds concurrent requests when Options do not say: each holds a few Kubernetes or Ray
// calls of up to requestTimeout, so a flood must not pile up goroutines, memory and load on kube-apiserver.
const DefaultMaxRequestsInflight = 100

// Dashboard is what job submission endpoints need from a Ray head; *ray.DashboardClient implements it.
type Dashboard interface {
	SubmitJob(ctx context.Context, req ray.JobSubmitRequest) (string, error)
	GetJob(ctx context.Context, id string) (*ray.JobInfo, error)
	ListJobs(ctx context.Context) ([]ray.JobInfo, error)
	GetJobLogs(ctx context.Context, id string) (string, error)
	StopJob(ctx context.Context, id string) (bool, error)
	DeleteJob(ctx context.Context, id string) (bool, error)
}

// DashboardFunc returns a client for the dashboard of a cluster whose head Service is svc (nil when missing).
type DashboardFunc func(ctx context.Context, rc *rayv1.RayCluster, svc *corev1.Service) (Dashboard, error)

// Server serves the REST API.
type Server struct {
	opts     Options
	cfg      *rest.Config
	c        client.Client
	kube     *kubeProxy
	auth     *kubeAuth
	handler  http.Handler
	registry *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// consoleWatches counts the list+watch loops open behind console streams: zero once every page has left.
	consoleWatches prometheus.Gauge
	// certs serves the TLS certificate; nil for plain HTTP.
	certs *certReloader
}

// Scheme holds every type the server reads and writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = rayv1.AddToScheme(s)
	_ = mantav1alpha1.AddToScheme(s)
	return s
}

// New builds a server that talks to Kubernetes with cfg. Reads are not cached: every list is a paginated read
// from the API server, so limit/continue behave as in Kubernetes.
func New(cfg *rest.Config, opts Options) (*Server, error) {
	if opts.Auth == "" {
		opts.Auth = AuthKubernetes
	}
	if opts.Auth != AuthKubernetes && opts.Auth != AuthNone {
		return nil, fmt.Errorf("auth mode %q: must be kubernetes or none", opts.Auth)
	}
	if opts.FieldValidation == "" {
		opts.FieldValidation = FieldValidationWarn
	}
	if _, ok := parseFieldValidation(string(opts.FieldValidation)); !ok {
		return nil, fmt.Errorf("field validation %q: must be Warn or Strict", opts.FieldValidation)
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	if opts.MaxRequestsInflight == 0 {
		opts.MaxRequestsInflight = DefaultMaxRequestsInflight
	}
	if opts.MaxRequestsInflight < 0 {
		return nil, fmt.Errorf("max requests in flight %d: must be positive", opts.MaxRequestsInflight)
	}
	if err := CheckCORSOrigin(opts.CORSAllowOrigin); err != nil {
		return nil, err
	}
	if opts.AnonymousAs != "" {
		if opts.Auth != AuthKubernetes {
			return nil, errors.New("--anonymous-as needs --auth kubernetes: under auth none every request already acts with this server's own identity")
		}
		if _, _, err := ParseAnonymousAs(opts.AnonymousAs); err != nil {
			return nil, err
		}
	}
	var certs *certReloader
	if opts.TLSCertFile != "" || opts.TLSKeyFile != "" {
		if opts.TLSCertFile == "" || opts.TLSKeyFile == "" {
			return nil, errors.New("a TLS certificate file and key file go together: give both or neither")
		}
		var err error
		if certs, err = newCertReloader(opts.TLSCertFile, opts.TLSKeyFile, opts.Log); err != nil {
			return nil, err
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if opts.Dashboard == nil {
		f, err := ray.NewFactory(ray.Options{UseKubernetesProxy: opts.UseKubernetesProxy, RESTConfig: cfg, ClusterDomain: opts.ClusterDomain})
		if err != nil {
			return nil, err
		}
		opts.Dashboard = factoryDashboard(c, f)
	}
	kube, err := newKubeProxy(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, cfg: cfg, c: c, kube: kube, registry: prometheus.NewRegistry(), certs: certs}
	if opts.Auth == AuthKubernetes {
		s.auth = &kubeAuth{c: c}
		if opts.AnonymousAs != "" {
			ns, name, _ := ParseAnonymousAs(opts.AnonymousAs)
			s.auth.anonymous = &anonymousIdentity{c: c, namespace: ns, name: name}
			opts.Log.Info("requests without a token act as a ServiceAccount (--anonymous-as)", "serviceAccount", opts.AnonymousAs)
		}
	} else {
		// Said by the server itself, so every embedding (manta apiserver, tests, tools) warns.
		opts.Log.Info("WARNING: authentication is off (auth=none): every caller can do whatever this server's Kubernetes identity may do; serve on loopback only")
	}
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "manta_apiserver_requests_total", Help: "REST API requests by operation and HTTP status code.",
	}, []string{"operation", "code"})
	s.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "manta_apiserver_request_duration_seconds", Help: "REST API request latency by operation.",
		Buckets: prometheus.DefBuckets,
	}, []string{"operation"})
	s.consoleWatches = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "manta_apiserver_console_watches", Help: "Kubernetes list+watch loops held open for the console's event streams.",
	})
	s.registry.MustRegister(s.requests, s.duration, s.consoleWatches, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.handler = s.buildMux()
	return s, nil
}

// factoryDashboard reaches the head through internal/ray, with the cluster's Ray auth token when it has one.
func factoryDashboard(c client.Client, f *ray.Factory) DashboardFunc {
	return func(ctx context.Context, rc *rayv1.RayCluster, svc *corev1.Service) (Dashboard, error) {
		svcName, _ := headServiceName(rc)
		t := ray.Target{Namespace: rc.Namespace, HeadServiceName: svcName, DashboardPort: ray.DashboardPort(svc)}
		var err error
		if t.AuthToken, err = rayauth.Token(ctx, c, rc); err != nil {
			return nil, err
		}
		return f.Dashboard(t)
	}
}

// rayTokenSecretName is the Secret holding a cluster's Ray auth token, when it uses one: where the operator puts
// it, as KubeRay names it, or authOptions.secretName.
func rayTokenSecretName(rc *rayv1.RayCluster) (string, bool) {
	if !clusterbuild.AuthEnabled(&rc.Spec) || clusterbuild.K8sTokenAuth(&rc.Spec) {
		return "", false
	}
	return clusterbuild.AuthSecretName(rc), true
}

// headServiceName is the name of the cluster's head Service and the field it was read from.
func headServiceName(rc *rayv1.RayCluster) (name, field string) {
	if n := rc.Status.Head.ServiceName; n != "" {
		return n, "status.head.serviceName"
	}
	if hs := rc.Spec.HeadGroupSpec.HeadService; hs != nil && hs.Name != "" {
		return hs.Name, "spec.headGroupSpec.headService.metadata.name"
	}
	return rc.Name + "-head-svc", "metadata.name"
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on ln until ctx is done, then shuts down gracefully: in-flight requests get shutdownTimeout. It
// refuses a TCP listener that CheckServing refuses, and speaks HTTPS when the options give a certificate.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		if err := CheckServing(a.String(), s.opts); err != nil {
			_ = ln.Close()
			return err
		}
	}
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	if s.certs != nil {
		srv.TLSConfig = s.certs.tlsConfig()
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		// Requests still running past the grace period: closing their connections cancels their contexts, so no
		// handler outlives Serve.
		err = errors.Join(fmt.Errorf("graceful shutdown: %w", err), srv.Close())
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// ListenAndServe listens on addr and serves until ctx is done.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	if err := CheckServing(addr, s.opts); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// statusRecorder remembers the status code for logs and metrics, and the inside cause of an error answer for the
// log.
type statusRecorder struct {
	http.ResponseWriter
	code  int
	cause error
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection: watches flush each event and move the write deadline.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

type ctxKey int

const (
	keyOp ctxKey = iota
	keyUser
)

// requestInfo is filled in by inner handlers for the outer logging and metrics wrapper.
type requestInfo struct {
	op   string
	user string
	// fieldValidation is the request's mode for unknown body fields (set for operations that take a body).
	fieldValidation FieldValidation
	// route is the operation, caller the authenticated caller (nil under auth none): checkRead needs both.
	route  *route
	caller *userInfo
	// token is the caller's bearer token (or --anonymous-as's), which v2 requests carry to Kubernetes; empty under
	// auth none. Never logged.
	token string
}

func info(r *http.Request) *requestInfo {
	if i, ok := r.Context().Value(keyOp).(*requestInfo); ok {
		return i
	}
	return &requestInfo{}
}

// observe logs each request (method, path, status, duration, operation and caller; never headers, bodies or
// query strings, which may carry tokens) and records metrics with bounded labels.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ri := &requestInfo{op: "unmatched"}
		r = r.WithContext(context.WithValue(r.Context(), keyOp, ri))
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			p := recover()
			if p == http.ErrAbortHandler {
				// A stream (a watch) whose client went away: not a bug; net/http closes the connection quietly.
				defer panic(p)
			} else if p != nil {
				s.opts.Log.Error(fmt.Errorf("panic: %v", p), "handler panicked", "operation", ri.op, "stack", string(debug.Stack()))
				if rec.code == 0 {
					writeError(rec, newError(http.StatusInternalServerError, codeInternal, "internal error"))
				}
			}
			code := rec.code
			if code == 0 {
				code = http.StatusOK
			}
			d := time.Since(start)
			s.requests.WithLabelValues(ri.op, strconv.Itoa(code)).Inc()
			s.duration.WithLabelValues(ri.op).Observe(d.Seconds())
			kv := []any{"method", r.Method, "path", r.URL.Path, "status", code,
				"duration", d.Round(time.Microsecond).String(), "operation", ri.op, "user", ri.user}
			if rec.cause != nil {
				kv = append(kv, "error", rec.cause.Error())
			}
			s.opts.Log.Info("request", kv...)
		}()
		next.ServeHTTP(rec, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	if rec, ok := w.(*statusRecorder); ok && e.cause != nil {
		rec.cause = e.cause
	}
	if e.httpStatus == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="manta"`)
	}
	writeJSON(w, e.httpStatus, e.Status)
}

// buildMux routes every path of the route table to a dispatcher that picks the operation by method, so wrong
// methods get a JSON 405 with Allow, and unknown paths a JSON 404.
func (s *Server) buildMux() http.Handler {
	mux := http.NewServeMux()
	byPattern := map[string][]*route{}
	var patterns []string
	for _, rt := range routes() {
		if _, ok := byPattern[rt.pattern]; !ok {
			patterns = append(patterns, rt.pattern)
		}
		byPattern[rt.pattern] = append(byPattern[rt.pattern], rt)
	}
	for _, p := range patterns {
		rs := byPattern[p]
		mux.Handle(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.dispatch(w, r, rs) }))
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		info(r).op = "healthz"
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, []string{http.MethodGet, http.MethodHead})
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	metrics := promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		ri := info(r)
		ri.op = "metrics"
		if r.Method != http.MethodGet {
			methodNotAllowed(w, []string{http.MethodGet})
			return
		}
		// Metrics describe the callers' traffic: scrapers authenticate as for kube-apiserver's /metrics (a token
		// whose RBAC allows get on the non-resource URL /metrics).
		if s.auth != nil {
			u, _, e := s.auth.authenticate(r.Context(), r)
			if e != nil {
				writeError(w, e)
				return
			}
			ri.user = u.Name
			if e := s.auth.authorize(r.Context(), u, []access{{Verb: "get", Path: "/metrics"}}); e != nil {
				writeError(w, e)
				return
			}
		}
		metrics.ServeHTTP(w, r)
	})
	doc, _ := json.Marshal(OpenAPI())
	mux.HandleFunc("/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		info(r).op = "openapi"
		if r.Method != http.MethodGet {
			methodNotAllowed(w, []string{http.MethodGet})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
	handleConsolePages(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("no such path: %s", r.URL.Path))
	})
	return s.observe(withCORS(s.opts.CORSAllowOrigin, limitInflight(s.opts.MaxRequestsInflight, withRequestTimeout(mux))))
}

// limitInflight answers 429 with Retry-After once n requests are being handled. /healthz and /metrics pass: a
// probe failing under load would restart a server that is only busy, and the scrape is how one sees the load.
// Watches (and the console's streams and followed logs, isLongRunning) are long-lived, so they have n slots of their own (as kube-apiserver keeps long-running requests out of
// its in-flight limit): open dashboards cannot starve ordinary requests, nor the other way round.
func limitInflight(n int, next http.Handler) http.Handler {
	slots, watchSlots := make(chan struct{}, n), make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/metrics" {
			next.ServeHTTP(w, r)
			return
		}
		slots := slots
		if isLongRunning(r) {
			slots = watchSlots
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			next.ServeHTTP(w, r)
		default:
			info(r).op = "throttled"
			w.Header().Set("Retry-After", "1")
			writeError(w, newError(http.StatusTooManyRequests, codeResourceExhausted, "too many requests in flight (%d); retry later", n))
		}
	})
}

// withRequestTimeout gives every request a deadline, except watches and the console's streams (isLongRunning),
// which end themselves after at most maxWatchSeconds (proxyV2 bounds timeoutSeconds) or when their client goes away.
func withRequestTimeout(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isLongRunning(r) {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func methodNotAllowed(w http.ResponseWriter, allowed []string) {
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	writeError(w, newError(http.StatusMethodNotAllowed, codeUnimplemented, "method not allowed; use %s", strings.Join(allowed, ", ")))
}

// dispatch runs one operation: method, authentication, path parameters, body rules, authorisation, handler.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, rs []*route) {
	var rt *route
	var allowed []string
	for _, c := range rs {
		allowed = append(allowed, c.method)
		if c.method == r.Method {
			rt = c
		}
	}
	if rt == nil {
		slices.Sort(allowed)
		methodNotAllowed(w, allowed)
		return
	}
	ri := info(r)
	ri.op, ri.route = rt.op, rt
	var user *userInfo
	if s.auth != nil {
		u, tok, e := s.auth.authenticate(r.Context(), r)
		if e != nil {
			writeError(w, e)
			return
		}
		user, ri.user, ri.caller, ri.token = u, u.Name, u, tok
	}
	if e := checkPathParams(r, rt.pattern); e != nil {
		writeError(w, e)
		return
	}
	if rt.proxy != nil {
		// Kubernetes authorises what is forwarded; access, when a proxy route has it, is what this server checks
		// before it reads anything with its own identity for the request.
		if s.auth != nil && rt.access != nil {
			if e := s.auth.authorize(r.Context(), user, rt.access(r)); e != nil {
				writeError(w, e)
				return
			}
		}
		if e := rt.proxy(s, w, r); e != nil {
			writeError(w, e)
		}
		return
	}
	if rt.body != nil {
		mode, e := requestFieldValidation(r, s.opts.FieldValidation)
		if e != nil {
			writeError(w, e)
			return
		}
		ri.fieldValidation = mode
	}
	if rt.body == nil && r.Method == http.MethodDelete && (r.ContentLength != 0 || len(r.TransferEncoding) > 0) {
		writeError(w, invalid(FieldViolation{Field: "body", Description: "DELETE takes no body; the object is named by the path"}))
		return
	}
	if s.auth != nil {
		if e := s.auth.authorize(r.Context(), user, rt.access(r)); e != nil {
			writeError(w, e)
			return
		}
	}
	out, e := rt.handle(s, w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// checkRead asks whether the caller may do a (a read of a declared kind that the handler does with this server's
// identity on the caller's behalf). Asking for an undeclared kind is a bug: the route table would not say
// what the operation reads.
func (s *Server) checkRead(r *http.Request, a access) *apiError {
	ri := info(r)
	if ri.route == nil || !slices.ContainsFunc(ri.route.reads, func(d access) bool {
		return d.Group == a.Group && d.Resource == a.Resource && d.Verb == a.Verb
	}) {
		return internalError(http.StatusInternalServerError, codeInternal, fmt.Errorf("operation %s reads %s, which its route does not declare", ri.op, a), "internal error")
	}
	if s.auth == nil {
		return nil
	}
	return s.auth.authorize(r.Context(), ri.caller, []access{a})
}

// checkPathParams refuses path parameters that cannot name a Kubernetes object before anything reaches
// Kubernetes.
func checkPathParams(r *http.Request, pattern string) *apiError {
	var v violations
	for _, p := range pathParams(pattern) {
		val := r.PathValue(p)
		if p == "submissionid" {
			if !submissionID.MatchString(val) {
				v.add(p, "must be 1-128 letters, digits, '_', '.', ':' or '-'")
			}
			continue
		}
		if p == "path" {
			// The rest of a services proxy path is the proxied server's (a Ray dashboard's) to judge.
			continue
		}
		if p == "service" {
			if _, bad := serviceRefName(val); bad != "" {
				v.add(p, "%s", bad)
			}
			continue
		}
		v.name(p, val)
	}
	if len(v) > 0 {
		return invalid(v...)
	}
	return nil
}

func pathParams(pattern string) []string {
	var out []string
	for _, seg := range strings.Split(pattern, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			out = append(out, strings.TrimSuffix(strings.Trim(seg, "{}"), "..."))
		}
	}
	return out
}
