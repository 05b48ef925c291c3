package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Cross-origin requests (--cors-allow-origin), as KubeRay's API server allows them (rs/cors with one allowed origin
// and the methods GET, POST, PUT, PATCH, DELETE, OPTIONS): a browser page served from that origin may call the API.
// Preflights are answered here, before authentication (browsers send no credentials with them), with 204. Beyond
// KubeRay's default request headers (Accept, Content-Type, X-Requested-With), Authorization is allowed: every
// operation here needs a bearer token. Credentials mode stays off: the only cookie the API reads is the console's,
// SameSite=Strict and taken on writes only with X-Manta-Console, which is not among the allowed headers, so a page
// of another origin gets nothing it does not already hold a token for.

var (
	corsMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}
	corsHeaders = []string{"accept", "content-type", "x-requested-with", "authorization"}
)

// corsOrigin matches the Origin header against --cors-allow-origin: "*" is every origin, one "*" inside a value
// matches any text there (https://*.example.com), else the origin itself; case is ignored, as rs/cors does.
type corsOrigin struct {
	all            bool
	prefix, suffix string
	wildcard       bool
}

// CheckCORSOrigin refuses a --cors-allow-origin value that could never match a browser's Origin header.
func CheckCORSOrigin(v string) error {
	if strings.ContainsAny(v, ", \t") {
		return errors.New("--cors-allow-origin takes one origin (scheme://host[:port], or *), not a list")
	}
	if strings.Count(v, "*") > 1 {
		return errors.New("--cors-allow-origin may hold one * at most")
	}
	if v == "" || v == "*" {
		return nil
	}
	// What a browser sends as Origin: scheme://host[:port], nothing after it (a trailing / or a path never matches).
	u, err := url.Parse(strings.Replace(v, "*", "wildcard", 1))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("--cors-allow-origin %q: want an origin, scheme://host[:port] with scheme http or https (e.g. http://localhost:3000, KubeRay's dashboard run with yarn dev)", v)
	}
	if u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || strings.HasSuffix(v, "?") || strings.HasSuffix(v, "#") {
		return fmt.Errorf("--cors-allow-origin %q: an origin is scheme://host[:port] only, with no path (not even a trailing /), query, fragment or user", v)
	}
	return nil
}

func parseCORSOrigin(v string) corsOrigin {
	v = strings.ToLower(v)
	if v == "*" {
		return corsOrigin{all: true}
	}
	if i := strings.IndexByte(v, '*'); i >= 0 {
		return corsOrigin{prefix: v[:i], suffix: v[i+1:], wildcard: true}
	}
	return corsOrigin{prefix: v}
}

func (o corsOrigin) allows(origin string) bool {
	origin = strings.ToLower(origin)
	switch {
	case origin == "":
		return false
	case o.all:
		return true
	case o.wildcard:
		return len(origin) >= len(o.prefix)+len(o.suffix) && strings.HasPrefix(origin, o.prefix) && strings.HasSuffix(origin, o.suffix)
	}
	return origin == o.prefix
}

// withCORS wraps next with the CORS answers for allowed (empty: CORS off, next unchanged).
func withCORS(allowed string, next http.Handler) http.Handler {
	if allowed == "" {
		return next
	}
	o := parseCORSOrigin(allowed)
	allowOrigin := func(h http.Header, origin string) {
		if o.all {
			h.Set("Access-Control-Allow-Origin", "*")
		} else {
			h.Set("Access-Control-Allow-Origin", origin)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		origin := r.Header.Get("Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Add("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
			if o.allows(origin) && corsMethodAllowed(r.Header.Get("Access-Control-Request-Method")) && corsHeadersAllowed(r.Header.Values("Access-Control-Request-Headers")) {
				allowOrigin(h, origin)
				h.Set("Access-Control-Allow-Methods", strings.ToUpper(r.Header.Get("Access-Control-Request-Method")))
				if reqHeaders := r.Header.Values("Access-Control-Request-Headers"); len(reqHeaders) > 0 && reqHeaders[0] != "" {
					h.Set("Access-Control-Allow-Headers", strings.Join(reqHeaders, ", "))
				}
			}
			// Answered whether allowed or not: without the headers above the browser refuses the request.
			info(r).op = "cors-preflight"
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Add("Vary", "Origin")
		if o.allows(origin) && corsMethodAllowed(r.Method) {
			allowOrigin(h, origin)
		}
		next.ServeHTTP(w, r)
	})
}

func corsMethodAllowed(m string) bool {
	m = strings.ToUpper(m)
	for _, a := range corsMethods {
		if a == m {
			return true
		}
	}
	return false
}

func corsHeadersAllowed(values []string) bool {
	for _, v := range values {
		for _, name := range strings.Split(v, ",") {
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" {
				continue
			}
			ok := false
			for _, a := range corsHeaders {
				ok = ok || a == name
			}
			if !ok {
				return false
			}
		}
	}
	return true
}
