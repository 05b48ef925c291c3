package bench

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// call is one kind of API request: a Kubernetes verb and the resource it acts on ("pods", "rayclusters.ray.io/status").
type call struct{ verb, resource string }

// callCounts counts requests by kind.
type callCounts map[call]int

// apiCounter is an http.RoundTripper wrapper that counts the operator's requests to the API server. It is
// installed with rest.Config.Wrap, so every client built from that config (the manager's client and caches,
// event recorders, any extra cache a controller starts) goes through it.
type apiCounter struct {
	mu     sync.Mutex
	counts callCounts
	// perSecond counts requests by the Unix second they were sent in, to tell when the client-side rate limit
	// (operatorQPS) was what bounded the operator.
	perSecond map[int64]int
}

func newAPICounter() *apiCounter {
	return &apiCounter{counts: callCounts{}, perSecond: map[int64]int{}}
}

// peakRate is the most requests sent in one whole second between from and to.
func (c *apiCounter) peakRate(from, to time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	peak := 0
	for s := from.Unix(); s <= to.Unix(); s++ {
		peak = max(peak, c.perSecond[s])
	}
	return peak
}

func (c *apiCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		k := classify(req.Method, req.URL.Path, req.URL.Query().Get("watch") == "true")
		c.mu.Lock()
		c.counts[k]++
		c.perSecond[time.Now().Unix()]++
		c.mu.Unlock()
		return next.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// snapshot returns a copy of the counts so far.
func (c *apiCounter) snapshot() callCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(callCounts, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// since returns the requests made after the snapshot before was taken.
func (c *apiCounter) since(before callCounts) callCounts {
	out := callCounts{}
	for k, v := range c.snapshot() {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

func isWrite(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

func (cc callCounts) total() int {
	n := 0
	for _, v := range cc {
		n += v
	}
	return n
}

func (cc callCounts) writes() int {
	n := 0
	for k, v := range cc {
		if isWrite(k.verb) {
			n += v
		}
	}
	return n
}

// count sums the requests with the given verb on resources starting with resource ("" matches any).
func (cc callCounts) count(verb, resource string) int {
	n := 0
	for k, v := range cc {
		if (verb == "" || k.verb == verb) && strings.HasPrefix(k.resource, resource) {
			n += v
		}
	}
	return n
}

// String is a table, writes first, then reads, each by count.
func (cc callCounts) String() string {
	keys := make([]call, 0, len(cc))
	for k := range cc {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		wi, wj := isWrite(keys[i].verb), isWrite(keys[j].verb)
		if wi != wj {
			return wi
		}
		if cc[keys[i]] != cc[keys[j]] {
			return cc[keys[i]] > cc[keys[j]]
		}
		return keys[i].verb+keys[i].resource < keys[j].verb+keys[j].resource
	})
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "    %-7d %-16s %s\n", cc[k], k.verb, k.resource)
	}
	fmt.Fprintf(&b, "    %-7d total (%d writes)", cc.total(), cc.writes())
	return b.String()
}

// classify turns an API request into a Kubernetes verb and resource, the way the API server's RequestInfo does
// for the paths controllers use: /api/v1/[namespaces/<ns>/]<resource>[/<name>[/<subresource>]] and the same under
// /apis/<group>/<version>. Anything else (discovery, /version) is verb "get" on the path's first segment.
func classify(method, path string, watch bool) call {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var group string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		group, parts = parts[1], parts[3:]
	case len(parts) >= 1 && parts[0] == "apis":
		return call{"get", "discovery"}
	default:
		return call{strings.ToLower(method), "/" + parts[0]}
	}
	if len(parts) == 0 {
		return call{"get", "discovery"}
	}
	// namespaces/<ns>/<resource>... but not the namespaces resource itself (namespaces, namespaces/<name>).
	if parts[0] == "namespaces" && len(parts) >= 3 {
		parts = parts[2:]
	}
	resource := parts[0]
	if group != "" {
		resource += "." + group
	}
	named := len(parts) >= 2
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	var verb string
	switch method {
	case http.MethodGet:
		switch {
		case watch:
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(method)
	}
	return call{verb, resource}
}
