package metawrite

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// scriptedAnswer is one answer of a scriptedServer, with headers.
type scriptedAnswer struct {
	code        int
	contentType string
	header      map[string]string
	body        []byte
}

// scriptedServer answers each request with the next of its answers and records what it was sent.
type scriptedServer struct {
	mu      sync.Mutex
	answers []scriptedAnswer
	got     []string // method, path, and the headers that say who asks and in what
}

func (s *scriptedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, strings.Join([]string{r.Method, r.URL.Path, "ua=" + r.UserAgent(), "accept=" + r.Header.Get("Accept"),
		"type=" + r.Header.Get("Content-Type"), "auth=" + r.Header.Get("Authorization")}, " "))
	a := s.answers[0]
	s.answers = s.answers[1:]
	if a.contentType != "" {
		w.Header().Set("Content-Type", a.contentType)
	}
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(a.code)
	_, _ = w.Write(a.body)
}

// warningsSeen records the warnings a write reported.
type warningsSeen struct {
	mu   sync.Mutex
	seen []string
}

func (w *warningsSeen) HandleWarningHeaderWithContext(_ context.Context, code int, _, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

// requestsCounted is rest_client_requests_total for host, by code and method.
func requestsCounted(t *testing.T, host string) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "rest_client_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["host"] == host {
				out[labels["code"]+" "+labels["method"]] = counterValue(m)
			}
		}
	}
	return out
}

func counterValue(m *dto.Metric) float64 { return m.GetCounter().GetValue() }

// protobufStatus is the API server's protobuf Status refusing a write.
func protobufStatus(t *testing.T, err *apierrors.StatusError) scriptedAnswer {
	t.Helper()
	st := err.Status()
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	b, eerr := runtime.Encode(codecs.WithoutConversion().EncoderForVersion(info.Serializer, schema.GroupVersion{Version: "v1"}), &st)
	if eerr != nil {
		t.Fatal(eerr)
	}
	return scriptedAnswer{code: int(st.Code), contentType: runtime.ContentTypeProtobuf, body: b}
}

// jsonStatus is statusAnswer as a scriptedAnswer.
func jsonStatus(t *testing.T, err *apierrors.StatusError) scriptedAnswer {
	t.Helper()
	a := statusAnswer(t, err)
	return scriptedAnswer{code: a.code, contentType: a.contentType, body: a.body}
}

// outcome is what one write did, as the tests compare it between the two paths.
type outcome struct {
	err      string
	reason   metav1.StatusReason
	code     int32
	status   string // the whole Status of an API error, its details and causes included
	sent     []string
	waits    int
	counted  map[string]float64
	warnings []string
	name     string
}

// A write sent by the endpoint itself does what the same write sent through rest.Request.Stream does (the path
// taken with client-go's backoff set in the environment): the same requests and headers, the same waits on the
// token bucket, the same retries on Retry-After, the same rest_client_requests_total counts, the same warnings,
// and the same error. Each case also states what it expects, so that two paths wrong alike fail too.
func TestEndpointSendsAsStreamDoes(t *testing.T) {
	podsGR := schema.GroupResource{Resource: "pods"}
	longHTML := "<html>" + strings.Repeat("x", 3000) + "</html>"
	retryNow := map[string]string{"Retry-After": "0"}
	type write func(ctx context.Context, cfg *rest.Config, hc *http.Client) (string, error)
	createPod := func(ctx context.Context, cfg *rest.Config, hc *http.Client) (string, error) {
		pods, err := NewPods(cfg, hc)
		if err != nil {
			return "", err
		}
		if pods.ep.slow != (envBackoff() != "") {
			return "", errors.New("the endpoint's path is not the one the environment asks for")
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", GenerateName: "rc-"}}
		err = pods.Create(ctx, pod)
		return pod.Name, err
	}
	writeStatus := func(ctx context.Context, cfg *rest.Config, hc *http.Client) (string, error) {
		status, err := NewStatus(cfg, hc)
		if err != nil {
			return "", err
		}
		rc := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rc", ResourceVersion: "8"}}
		err = status.UpdateStatus(ctx, rc)
		return rc.ResourceVersion, err
	}
	patchEvent := func(ctx context.Context, cfg *rest.Config, hc *http.Client) (string, error) {
		events, err := NewEvents(cfg, hc)
		if err != nil {
			return "", err
		}
		return "", events.MergePatch(ctx, "ns", "e", []byte(`{}`))
	}
	deleteCluster := func(ctx context.Context, cfg *rest.Config, hc *http.Client) (string, error) {
		creates, err := NewCreates(cfg, hc)
		if err != nil {
			return "", err
		}
		return "", creates.Delete(ctx, &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rc"}}, &metav1.DeleteOptions{})
	}
	createCluster := func(ctx context.Context, cfg *rest.Config, hc *http.Client) (string, error) {
		creates, err := NewCreates(cfg, hc)
		if err != nil {
			return "", err
		}
		rc := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rc"}}
		err = creates.Create(ctx, rc)
		return string(rc.UID) + rc.Name, err
	}
	statusOK := scriptedAnswer{code: 200, contentType: runtime.ContentTypeJSON, body: []byte(`{"kind":"PartialObjectMetadata","metadata":{"resourceVersion":"9"}}`)}
	many429 := make([]scriptedAnswer, maxRetries+1)
	for i := range many429 {
		many429[i] = scriptedAnswer{code: 429, contentType: "text/plain", header: retryNow, body: []byte("slow down")}
	}
	cases := []struct {
		name    string
		write   write
		answers func(t *testing.T) []scriptedAnswer
		want    func(t *testing.T, o outcome)
	}{{
		name:  "a 429 with Retry-After is sent again",
		write: createPod,
		answers: func(t *testing.T) []scriptedAnswer {
			m := metadataAnswer(t, "rc-1")
			return []scriptedAnswer{{code: 429, contentType: "text/plain", header: retryNow, body: []byte("slow down")},
				{code: m.code, contentType: m.contentType, body: m.body}}
		},
		want: func(t *testing.T, o outcome) {
			if o.err != "" || o.name != "rc-1" || len(o.sent) != 2 || o.waits != 2 || o.counted["429 POST"] != 1 || o.counted["201 POST"] != 1 {
				t.Errorf("%+v: want the pod created on the second attempt, two waits, one 429 and one 201 counted", o)
			}
		},
	}, {
		name:    "retries end after maxRetries",
		write:   createPod,
		answers: func(*testing.T) []scriptedAnswer { return many429 },
		want: func(t *testing.T, o outcome) {
			if o.reason != metav1.StatusReasonTooManyRequests || len(o.sent) != maxRetries+1 || o.counted["429 POST"] != maxRetries+1 {
				t.Errorf("%+v: want TooManyRequests after %d attempts", o, maxRetries+1)
			}
		},
	}, {
		name:  "a 503 with Retry-After is sent again, a 500 without is an error quoting its text",
		write: writeStatus,
		answers: func(*testing.T) []scriptedAnswer {
			return []scriptedAnswer{{code: 503, header: retryNow}, {code: 500, contentType: "text/plain", body: []byte("  etcd is gone \n")}}
		},
		want: func(t *testing.T, o outcome) {
			if o.reason != metav1.StatusReasonInternalError || !strings.Contains(o.err, "etcd is gone") || len(o.sent) != 2 {
				t.Errorf("%+v: want an internal error quoting the body after two attempts", o)
			}
		},
	}, {
		name:  "a JSON Status is the error",
		write: patchEvent,
		answers: func(t *testing.T) []scriptedAnswer {
			return []scriptedAnswer{jsonStatus(t, apierrors.NewNotFound(podsGR, "e"))}
		},
		want: func(t *testing.T, o outcome) {
			if o.reason != metav1.StatusReasonNotFound || o.code != 404 {
				t.Errorf("%+v: want NotFound", o)
			}
		},
	}, {
		name:  "a protobuf Status is the error",
		write: writeStatus,
		answers: func(t *testing.T) []scriptedAnswer {
			return []scriptedAnswer{protobufStatus(t, apierrors.NewConflict(schema.GroupResource{Group: "ray.io", Resource: "rayclusters"}, "rc", errors.New("stale")))}
		},
		want: func(t *testing.T, o outcome) {
			if o.reason != metav1.StatusReasonConflict || !strings.Contains(o.err, "stale") {
				t.Errorf("%+v: want the Conflict", o)
			}
		},
	}, {
		name:  "an HTML page is quoted, cut at 2 KiB",
		write: deleteCluster,
		answers: func(*testing.T) []scriptedAnswer {
			return []scriptedAnswer{{code: 502, contentType: "text/html", body: []byte(longHTML)}}
		},
		want: func(t *testing.T, o outcome) {
			if o.code != 502 || !strings.Contains(o.err, "<html>xxx") || strings.Contains(o.err, "</html>") {
				t.Errorf("%+v: want a 502 quoting the page's first 2 KiB", o)
			}
		},
	}, {
		name:  "a body in an unknown type is not quoted",
		write: patchEvent,
		answers: func(*testing.T) []scriptedAnswer {
			return []scriptedAnswer{{code: 400, contentType: "application/x-unknown", body: []byte("secret")}}
		},
		want: func(t *testing.T, o outcome) {
			if o.code != 400 || strings.Contains(o.err, "secret") || strings.Contains(o.status, "secret") || !strings.Contains(o.status, "unknown") {
				t.Errorf("%+v: want a 400 that quotes nothing", o)
			}
		},
	}, {
		name:  "warnings reach the config's handler",
		write: writeStatus,
		answers: func(*testing.T) []scriptedAnswer {
			a := statusOK
			a.header = map[string]string{"Warning": `299 - "the field is deprecated"`}
			return []scriptedAnswer{a}
		},
		want: func(t *testing.T, o outcome) {
			if o.err != "" || o.name != "9" || len(o.warnings) != 1 || o.warnings[0] != "the field is deprecated" {
				t.Errorf("%+v: want the status written and its warning reported", o)
			}
		},
	}, {
		name:  "a JSON custom resource is created with its kind",
		write: createCluster,
		answers: func(*testing.T) []scriptedAnswer {
			return []scriptedAnswer{{code: 201, contentType: runtime.ContentTypeJSON,
				body: []byte(`{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"rc","uid":"u1"}}`)}}
		},
		want: func(t *testing.T, o outcome) {
			if o.err != "" || o.name != "u1rc" || len(o.sent) != 1 || !strings.Contains(o.sent[0], "type=application/json") {
				t.Errorf("%+v: want the cluster created in JSON", o)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]outcome
			for i, path := range []string{"direct", "stream"} {
				if path == "stream" {
					t.Setenv("KUBE_CLIENT_BACKOFF_BASE", "0")
					t.Setenv("KUBE_CLIENT_BACKOFF_DURATION", "0")
				}
				srv := &scriptedServer{answers: tc.answers(t)}
				ts := httptest.NewServer(srv)
				limiter := &countingLimiter{}
				warned := &warningsSeen{}
				cfg := &rest.Config{Host: ts.URL, RateLimiter: limiter, UserAgent: "manta/test", WarningHandlerWithContext: warned, BearerToken: "t0ken"}
				hc, err := rest.HTTPClientFor(cfg)
				if err != nil {
					t.Fatal(err)
				}
				u, _ := url.Parse(ts.URL)
				before := requestsCounted(t, u.Host)
				name, werr := tc.write(context.Background(), cfg, hc)
				ts.Close()
				o := outcome{sent: srv.got, waits: limiter.count(), counted: map[string]float64{}, warnings: warned.seen, name: name}
				for k, v := range requestsCounted(t, u.Host) {
					if d := v - before[k]; d != 0 {
						o.counted[k] = d
					}
				}
				if werr != nil {
					o.err, o.reason = werr.Error(), apierrors.ReasonForError(werr)
					var st apierrors.APIStatus
					if errors.As(werr, &st) {
						o.code, o.status = st.Status().Code, fmt.Sprintf("%+v", st.Status())
					}
				}
				got[i] = o
			}
			direct, stream := got[0], got[1]
			tc.want(t, direct)
			if !equalOutcomes(direct, stream) {
				t.Errorf("sent directly:\n%+v\nthrough rest.Request.Stream:\n%+v", direct, stream)
			}
		})
	}
}

// equalOutcomes compares two outcomes field by field as printed (fmt prints maps sorted by key).
func equalOutcomes(a, b outcome) bool { return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b) }

// envBackoff is client-go's backoff setting in the environment, which sends every write through Stream.
func envBackoff() string { return os.Getenv("KUBE_CLIENT_BACKOFF_BASE") }

// A write that cannot reach the API server fails as http.Client words it, naming the method and URL, on both paths;
// the config's timeout ends a write whose answer does not come.
func TestEndpointTransportErrors(t *testing.T) {
	for _, path := range []string{"direct", "stream"} {
		t.Run(path, func(t *testing.T) {
			if path == "stream" {
				t.Setenv("KUBE_CLIENT_BACKOFF_BASE", "0")
				t.Setenv("KUBE_CLIENT_BACKOFF_DURATION", "0")
			}
			ts := httptest.NewServer(http.NotFoundHandler())
			ts.Close() // nothing listens there now
			cfg := &rest.Config{Host: ts.URL}
			hc, err := rest.HTTPClientFor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			events, err := NewEvents(cfg, hc)
			if err != nil {
				t.Fatal(err)
			}
			err = events.MergePatch(context.Background(), "ns", "e", []byte(`{}`))
			var ue *url.Error
			if !errors.As(err, &ue) || ue.Op != "Patch" || ue.URL != ts.URL+"/apis/events.k8s.io/v1/namespaces/ns/events/e" {
				t.Errorf("unreachable: %v, want a *url.Error naming Patch and the event's URL", err)
			}

			release := make(chan struct{})
			hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-release:
				}
			}))
			defer hang.Close()
			defer close(release)
			cfg = &rest.Config{Host: hang.URL, Timeout: 50 * time.Millisecond}
			if hc, err = rest.HTTPClientFor(cfg); err != nil {
				t.Fatal(err)
			}
			if events, err = NewEvents(cfg, hc); err != nil {
				t.Fatal(err)
			}
			err = events.MergePatch(context.Background(), "ns", "e", []byte(`{}`))
			if !errors.As(err, &ue) || !ue.Timeout() {
				t.Errorf("no answer within the config's timeout: %v, want a *url.Error that timed out", err)
			}
		})
	}
}

// Each way a config authenticates reaches the API server as it does through rest.Request.Stream: a token, a token
// file (read when the endpoint is made, and again as client-go's round tripper reads it), a token and a file, basic
// auth, none.
func TestEndpointAuthenticatesAsStreamDoes(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  rest.Config
		want string
	}{
		{"token", rest.Config{BearerToken: "t0ken"}, "Bearer t0ken"},
		{"token file", rest.Config{BearerTokenFile: tokenFile}, "Bearer from-file"},
		{"token and file", rest.Config{BearerToken: "t0ken", BearerTokenFile: tokenFile}, "Bearer from-file"},
		{"a file not there", rest.Config{BearerToken: "t0ken", BearerTokenFile: filepath.Join(dir, "none")}, "Bearer t0ken"},
		{"basic", rest.Config{Username: "u", Password: "p"}, "Basic dTpw"},
		{"none", rest.Config{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, path := range []string{"direct", "stream"} {
				if path == "stream" {
					t.Setenv("KUBE_CLIENT_BACKOFF_BASE", "0")
					t.Setenv("KUBE_CLIENT_BACKOFF_DURATION", "0")
				}
				srv := &scriptedServer{answers: []scriptedAnswer{{code: 200}}}
				ts := httptest.NewServer(srv)
				cfg := tc.cfg
				cfg.Host = ts.URL
				hc, err := rest.HTTPClientFor(&cfg)
				if err != nil {
					t.Fatal(err)
				}
				events, err := NewEvents(&cfg, hc)
				if err != nil {
					t.Fatal(err)
				}
				if (events.ep.auth != nil) != strings.HasPrefix(tc.want, "Bearer") || events.ep.slow != (path == "stream") {
					t.Errorf("%s: the endpoint would set Authorization itself: %v; sends through Stream: %v", path, events.ep.auth != nil, events.ep.slow)
				}
				if err := events.MergePatch(context.Background(), "ns", "e", []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
				ts.Close()
				got = append(got, srv.got[0])
			}
			if got[0] != got[1] || !strings.HasSuffix(got[0], "auth="+tc.want) {
				t.Errorf("sent directly %q, through Stream %q; want Authorization %q", got[0], got[1], tc.want)
			}
		})
	}
}
