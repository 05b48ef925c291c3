package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// serveWith runs Serve with handler h on a loopback port and returns its URL and Serve's result.
func serveWith(t *testing.T, ctx context.Context, h http.Handler) (string, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{handler: h}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	return "http://" + ln.Addr().String(), done
}

// An in-flight request finishes after the server is told to stop, and Serve returns only then.
func TestGracefulShutdownFinishesInFlightRequests(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	url, done := serveWith(t, ctx, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(started)
		<-release
		_, _ = io.WriteString(w, "finished")
	}))
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Get(url)
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answer <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	<-started
	stop()
	// Serve has acted on the stop once its listener refuses new connections (Shutdown closes it first); from then
	// on it only waits for the request in flight, and must not have returned.
	addr := strings.TrimPrefix(url, "http://")
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts connections 5s after the stop")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("Serve returned with a request in flight: %v", err)
	default:
	}
	close(release)
	if got := <-answer; got != "200 finished" {
		t.Fatalf("in-flight request answered %q", got)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the last request finished")
	}
}

// A request still running when the grace period ends has its context cancelled: no handler outlives Serve.
func TestShutdownCancelsRequestsPastTheGracePeriod(t *testing.T) {
	old := shutdownTimeout
	shutdownTimeout = 200 * time.Millisecond
	defer func() { shutdownTimeout = old }()
	started, cancelled := make(chan struct{}), make(chan struct{})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	url, done := serveWith(t, ctx, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(10 * time.Second):
		}
	}))
	go func() {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	stop()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Serve reported a clean shutdown although a request was cut off")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the grace period")
	}
	select {
	case <-cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("the request's context was not cancelled after the grace period")
	}
}

// Every request has a deadline, shorter than the server's write timeout.
func TestRequestsHaveADeadline(t *testing.T) {
	var left time.Duration
	h := withRequestTimeout(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if d, ok := r.Context().Deadline(); ok {
			left = time.Until(d)
		}
	}))
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	h.ServeHTTP(&statusRecorder{ResponseWriter: discardWriter{}}, req)
	if left <= 0 || left > requestTimeout || requestTimeout >= writeTimeout {
		t.Fatalf("request deadline in %s (requestTimeout %s, writeTimeout %s)", left, requestTimeout, writeTimeout)
	}
}

// A Kubernetes call cut off by the request's deadline is a 503 to retry, not a 500.
func TestKubernetesTimeoutIsUnavailable(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf(`Get "https://k8s/api": %w`, context.DeadlineExceeded),
		fmt.Errorf("client rate limiter Wait returned an error: %w", context.Canceled),
	} {
		e := fromKubernetes(err, `cluster "a"`)
		if e.httpStatus != http.StatusServiceUnavailable || e.Code != codeUnavailable {
			t.Errorf("%v: got %d %d %q", err, e.httpStatus, e.Code, e.Message)
		}
	}
	if e := fromKubernetes(errors.New("boom"), "x"); e.httpStatus != http.StatusInternalServerError {
		t.Errorf("other errors: got %d", e.httpStatus)
	}
}

type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (discardWriter) WriteHeader(int)             {}

// --auth=none is only taken when asked, and the server says so when it starts; the default is Kubernetes auth.
func TestAuthNoneWarns(t *testing.T) {
	cfg := &rest.Config{Host: "http://127.0.0.1:1"}
	for _, tc := range []struct {
		mode     AuthMode
		wantWarn bool
	}{{AuthNone, true}, {"", false}, {AuthKubernetes, false}} {
		var logs strings.Builder
		log := funcr.New(func(prefix, args string) { logs.WriteString(prefix + args + "\n") }, funcr.Options{})
		s, err := New(cfg, Options{Auth: tc.mode, Log: log, Dashboard: func(context.Context, *rayv1.RayCluster, *corev1.Service) (Dashboard, error) {
			return nil, errors.New("unused")
		}})
		if err != nil {
			t.Fatal(err)
		}
		if warned := strings.Contains(logs.String(), "WARNING: authentication is off"); warned != tc.wantWarn {
			t.Errorf("auth %q: warned %v, logs:\n%s", tc.mode, warned, logs.String())
		}
		if (s.auth == nil) != (tc.mode == AuthNone) {
			t.Errorf("auth %q: authenticating %v", tc.mode, s.auth != nil)
		}
	}
	if _, err := New(cfg, Options{Auth: "off"}); err == nil {
		t.Error("an unknown auth mode was accepted")
	}
}

// The v1 event model from events.k8s.io/v1 (KubeRay v1.7's mapping): a series gives the last time and the count;
// an event written through core/v1 keeps its deprecated timestamps and count.
func TestEventFromKube(t *testing.T) {
	t1, t2, t3 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 5, 0, 0, time.UTC), time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	series := eventFromKube(&eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", UID: "u1"}, EventTime: metav1.NewMicroTime(t1),
		Series: &eventsv1.EventSeries{Count: 7, LastObservedTime: metav1.NewMicroTime(t3)}, Reason: "R", Note: "n", Type: "Warning"})
	if !series.FirstTimestamp.Equal(t1) || !series.LastTimestamp.Equal(t3) || series.Count != 7 || series.Message != "n" || series.ID != "u1" {
		t.Errorf("series: %+v", series)
	}
	single := eventFromKube(&eventsv1.Event{EventTime: metav1.NewMicroTime(t1)})
	if !single.FirstTimestamp.Equal(t1) || !single.LastTimestamp.Equal(t1) || single.Count != 0 {
		t.Errorf("single: %+v", single)
	}
	legacy := eventFromKube(&eventsv1.Event{DeprecatedFirstTimestamp: metav1.NewTime(t1), DeprecatedLastTimestamp: metav1.NewTime(t2), DeprecatedCount: 3})
	if !legacy.FirstTimestamp.Equal(t1) || !legacy.LastTimestamp.Equal(t2) || legacy.Count != 3 {
		t.Errorf("core/v1: %+v", legacy)
	}
}
