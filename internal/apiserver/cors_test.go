package apiserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// --cors-allow-origin as KubeRay's API server: preflights from the allowed origin are answered before
// authentication, with the requested method and headers; every answer to that origin, errors too, names it; other
// origins get no CORS headers; without the flag there are none.
func TestSecurityCORS(t *testing.T) {
	serve := func(t *testing.T, origin string) http.Handler {
		t.Helper()
		// Nothing here reaches Kubernetes: preflights stop at the CORS layer, the rest at authentication.
		s, err := New(&rest.Config{Host: "http://127.0.0.1:1"}, Options{CORSAllowOrigin: origin})
		if err != nil {
			t.Fatal(err)
		}
		return s.Handler()
	}
	do := func(h http.Handler, method, origin string, hdr map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/apis/v1/namespaces/ns/clusters", nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	preflight := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}

	h := serve(t, "https://ui.example.com")
	w := do(h, http.MethodOptions, "https://ui.example.com", preflight)
	if w.Code != http.StatusNoContent || w.Header().Get("Access-Control-Allow-Origin") != "https://ui.example.com" ||
		w.Header().Get("Access-Control-Allow-Methods") != "POST" || w.Header().Get("Access-Control-Allow-Headers") != "authorization,content-type" {
		t.Errorf("preflight: %d %v", w.Code, w.Header())
	}
	w = do(h, http.MethodOptions, "https://evil.example", preflight)
	if w.Code != http.StatusNoContent || w.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from another origin: %d %v", w.Code, w.Header())
	}
	w = do(h, http.MethodOptions, "https://ui.example.com", map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-custom"})
	if w.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight with a header not allowed: %v", w.Header())
	}
	w = do(h, http.MethodGet, "https://ui.example.com", nil)
	if w.Code != http.StatusUnauthorized || w.Header().Get("Access-Control-Allow-Origin") != "https://ui.example.com" || !strings.Contains(w.Header().Get("Vary"), "Origin") {
		t.Errorf("request without a token: %d %v", w.Code, w.Header())
	}
	if w = do(h, http.MethodGet, "https://evil.example", nil); w.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("request from another origin: %v", w.Header())
	}

	if w = do(serve(t, "https://*.example.com"), http.MethodGet, "https://a.example.com", nil); w.Header().Get("Access-Control-Allow-Origin") != "https://a.example.com" {
		t.Errorf("wildcard: %v", w.Header())
	}
	if w = do(serve(t, "*"), http.MethodGet, "https://anything.test", nil); w.Header().Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("*: %v", w.Header())
	}
	off := serve(t, "")
	if w = do(off, http.MethodGet, "https://ui.example.com", nil); w.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS off: %v", w.Header())
	}
	if w = do(off, http.MethodOptions, "https://ui.example.com", preflight); w.Code == http.StatusNoContent {
		t.Errorf("CORS off: a preflight was answered as CORS")
	}

	for _, bad := range []string{"https://a.example, https://b.example", "https://*.*.example"} {
		if _, err := New(&rest.Config{Host: "http://127.0.0.1:1"}, Options{CORSAllowOrigin: bad}); err == nil || !strings.Contains(err.Error(), "--cors-allow-origin") {
			t.Errorf("%q: err %v", bad, err)
		}
	}
}
