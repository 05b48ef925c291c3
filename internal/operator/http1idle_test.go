package operator

import (
	"net/http"
	"runtime"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// transportOf unwraps client-go's round trippers down to the *http.Transport.
func transportOf(t *testing.T, rt http.RoundTripper) *http.Transport {
	t.Helper()
	for {
		switch r := rt.(type) {
		case *http.Transport:
			return r
		case utilnet.RoundTripperWrapper:
			rt = r.WrappedRoundTripper()
		default:
			t.Fatalf("no *http.Transport under %T", rt)
		}
	}
}

// The operator's HTTP/1.1 transport keeps an idle connection for http1IdleTimeout, under kube-apiserver's 90 s,
// where client-go's default is 90 s; a transport shortIdle has set once is not written again (a later config gets
// client-go's cached transport, which may be in use).
func TestHTTP1IdleTimeoutUnderTheAPIServers(t *testing.T) {
	if http1IdleTimeout >= 90*time.Second {
		t.Fatalf("http1IdleTimeout %s, want under kube-apiserver's 90 s", http1IdleTimeout)
	}
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{Insecure: true, NextProtos: []string{"http/1.1"}},
		UserAgent: "manta-test", BearerToken: "t"}
	cfg.Wrap(shortIdle)
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := transportOf(t, rt)
	if tr.IdleConnTimeout != http1IdleTimeout {
		t.Fatalf("IdleConnTimeout %s, want %s", tr.IdleConnTimeout, http1IdleTimeout)
	}
	tr.IdleConnTimeout = time.Minute // as if in use with another value: a second config's client leaves it
	again, err := rest.TransportFor(rest.CopyConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if got := transportOf(t, again); got != tr || got.IdleConnTimeout != time.Minute {
		t.Errorf("second client: transport %p (first %p), IdleConnTimeout %s; want the cached one, untouched", got, tr, got.IdleConnTimeout)
	}
	// Without the wrap, client-go's own default: the gap the wrap closes.
	plain := &rest.Config{Host: "https://127.0.0.1:6444", TLSClientConfig: rest.TLSClientConfig{Insecure: true, ServerName: "other"}}
	prt, err := rest.TransportFor(plain)
	if err != nil {
		t.Fatal(err)
	}
	if d := transportOf(t, prt).IdleConnTimeout; d != 90*time.Second {
		t.Errorf("client-go's default IdleConnTimeout %s, want the 90 s this guards against", d)
	}
	runtime.KeepAlive(rt) // client-go's cache holds its transports weakly: the first must not be collected meanwhile
}

// shortIdle's record of the transports it has set does not keep them: once a transport is collected its entry goes,
// so a process that starts many managers does not hold every transport client-go made for them.
func TestShortIdleKeepsNoTransport(t *testing.T) {
	count := func() (n int) {
		shortened.Range(func(any, any) bool { n++; return true })
		return n
	}
	before := count()
	func() {
		tr := &http.Transport{}
		shortIdle(tr)
		if tr.IdleConnTimeout != http1IdleTimeout {
			t.Fatalf("IdleConnTimeout %s, want %s", tr.IdleConnTimeout, http1IdleTimeout)
		}
		if count() != before+1 {
			t.Fatalf("%d transports recorded, want %d", count(), before+1)
		}
	}()
	// Cleanups run on their own goroutine after a collection; each round collects and then waits on the runtime's
	// queue of cleanups, not on a clock.
	for i := 0; count() > before; i++ {
		if i == 100 {
			t.Fatalf("%d transports still recorded after %d collections, want %d: a collected transport's entry stays", count(), i, before)
		}
		runtime.GC()
		runtime.Gosched()
	}
}
