package apiserver

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/console"
)

// The web console (internal/console holds its pages) lives under /console/. Its data endpoints under
// /console/api/ are operations of the route table like every other; they act with the caller's own token, so
// Kubernetes authorises each list, watch, log read and create exactly as for the caller.
//
// A browser keeps the caller's token in an HttpOnly, SameSite=Strict cookie set at sign-in (the page's scripts
// never hold it). The cookie stands in for the Authorization header on GET and HEAD, so EventSource streams and
// links to Ray dashboards through the services proxy work, and on other methods only with the header
// X-Manta-Console, which a page of another origin cannot send without a CORS preflight this server refuses.

// consoleCookie names the cookie that holds a signed-in browser's token.
const consoleCookie = "manta-console-token"

// consoleHeader marks the console's own writes (see above).
const consoleHeader = "X-Manta-Console"

// consoleCookieToken reads the token from the console's cookie when the request may use it.
func consoleCookieToken(r *http.Request) (string, bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Header.Get(consoleHeader) == "" {
		return "", false
	}
	c, err := r.Cookie(consoleCookie)
	if err != nil || c.Value == "" {
		return "", false
	}
	return c.Value, true
}

// isLongRunning tells requests that stream for minutes: watches, the console's event streams and followed logs.
// They get the in-flight slots of their own and no request timeout.
func isLongRunning(r *http.Request) bool {
	if isWatch(r) {
		return true
	}
	if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/console/api/") {
		return false
	}
	return strings.HasSuffix(r.URL.Path, "/stream") || (strings.HasSuffix(r.URL.Path, "/log") && r.URL.Query().Get("follow") == "true")
}

func consoleRoutes() []*route {
	const api = "/console/api"
	const ns = api + "/namespaces/{namespace}"
	const tag = "Console"
	r := func(method, pattern, op, summary string, h func(*Server, http.ResponseWriter, *http.Request) *apiError) *route {
		return &route{method: method, pattern: pattern, op: op, tag: tag, summary: summary, undocumented: true, proxy: h}
	}
	return []*route{
		r(http.MethodPost, api+"/session", "ConsoleSignIn", "Sign a browser in: the token of the Authorization header goes into an HttpOnly cookie.", (*Server).consoleSignIn),
		r(http.MethodGet, api+"/session", "ConsoleWhoAmI", "Who the browser is signed in as.", (*Server).consoleWhoAmI),
		r(http.MethodDelete, api+"/session", "ConsoleSignOut", "Sign the browser out (drop the cookie).", (*Server).consoleSignOut),
		r(http.MethodGet, api+"/namespaces", "ConsoleNamespaces", "The namespaces in which the caller may list some Ray kind, and the kinds it may list everywhere.", (*Server).consoleNamespaces),
		r(http.MethodGet, api+"/stream", "ConsoleListStream", "Server-sent events: the objects of every console kind in ?namespace= (or every namespace the caller may list), then their changes.", (*Server).consoleListStream),
		r(http.MethodGet, ns+"/{kind}/{name}/stream", "ConsoleObjectStream", "Server-sent events: one object, its pods and its events, then their changes.", (*Server).consoleObjectStream),
		r(http.MethodGet, ns+"/pods/{name}/log", "ConsolePodLog", "A pod's log (container, follow, tailLines, previous, timestamps), streamed as Kubernetes sends it.", (*Server).consolePodLog),
		r(http.MethodPost, ns+"/rayjobs", "ConsoleCreateRayJob", "Create a RayJob from the console's form; field errors name the form's fields.", (*Server).consoleCreateJob),
	}
}

// handleConsolePages serves the console's pages and assets, which hold no data: anyone may load them, and the
// data endpoints ask for a token.
func handleConsolePages(mux *http.ServeMux) {
	pages := console.Handler()
	mux.Handle("/console/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info(r).op = "console"
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, []string{http.MethodGet, http.MethodHead})
			return
		}
		pages.ServeHTTP(w, r)
	}))
	mux.Handle("/console", http.RedirectHandler("/console/", http.StatusMovedPermanently))
}

type consoleSession struct {
	User   string   `json:"user"`
	Groups []string `json:"groups,omitempty"`
	// Auth is this server's --auth: under none nobody signs in.
	Auth string `json:"auth"`
}

func (s *Server) session(r *http.Request) consoleSession {
	out := consoleSession{Auth: string(s.opts.Auth)}
	if c := info(r).caller; c != nil {
		out.User, out.Groups = c.Name, c.Groups
	}
	return out
}

func (s *Server) consoleSignIn(w http.ResponseWriter, r *http.Request) *apiError {
	if r.Header.Get(consoleHeader) == "" {
		return invalid(FieldViolation{Field: consoleHeader, Description: "the console's sign-in sends this header; a page of another site cannot"})
	}
	if s.auth != nil && r.Header.Get("Authorization") == "" {
		// Without it the identity would be the cookie's or --anonymous-as's: signing in means giving a token.
		return invalid(FieldViolation{Field: "Authorization", Description: "sign-in takes your Kubernetes token as \"Authorization: Bearer <token>\""})
	}
	if tok := info(r).token; tok != "" {
		http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: tok, Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	}
	writeJSON(w, http.StatusOK, s.session(r))
	return nil
}

func (s *Server) consoleWhoAmI(w http.ResponseWriter, r *http.Request) *apiError {
	writeJSON(w, http.StatusOK, s.session(r))
	return nil
}

func (s *Server) consoleSignOut(w http.ResponseWriter, r *http.Request) *apiError {
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	writeJSON(w, http.StatusOK, Empty{})
	return nil
}

// may asks whether the caller may do a; under auth none everyone may.
func (s *Server) may(ctx context.Context, u *userInfo, a access) (bool, *apiError) {
	if s.auth == nil {
		return true, nil
	}
	e := s.auth.authorize(ctx, u, []access{a})
	if e == nil {
		return true, nil
	}
	if e.httpStatus == http.StatusForbidden {
		return false, nil
	}
	return false, e
}

type consoleNamespace struct {
	Name string `json:"name"`
	// Kinds are the plurals the caller may list there.
	Kinds []string `json:"kinds"`
}

type consoleNamespaces struct {
	Namespaces []consoleNamespace `json:"namespaces"`
	// Everywhere are the plurals the caller may list in all namespaces at once.
	Everywhere []string `json:"everywhere"`
}

// visibleNamespaces lists the namespaces with this server's identity and keeps those where SubjectAccessReview
// says the caller may list some console kind: the names of the others are not the caller's to learn.
func (s *Server) visibleNamespaces(ctx context.Context, u *userInfo) (consoleNamespaces, *apiError) {
	out := consoleNamespaces{Namespaces: []consoleNamespace{}, Everywhere: []string{}}
	for _, k := range consoleKinds {
		ok, e := s.may(ctx, u, access{Group: k.group, Resource: k.plural, Verb: "list"})
		if e != nil {
			return out, e
		}
		if ok {
			out.Everywhere = append(out.Everywhere, k.plural)
		}
	}
	var nsl corev1.NamespaceList
	if err := s.c.List(ctx, &nsl); err != nil {
		return out, internalError(http.StatusServiceUnavailable, codeUnavailable, err, "could not list namespaces, retry later")
	}
	for _, n := range nsl.Items {
		cn := consoleNamespace{Name: n.Name, Kinds: []string{}}
		for _, k := range consoleKinds {
			ok := slices.Contains(out.Everywhere, k.plural)
			if !ok {
				var e *apiError
				if ok, e = s.may(ctx, u, access{Group: k.group, Resource: k.plural, Verb: "list", Namespace: n.Name}); e != nil {
					return out, e
				}
			}
			if ok {
				cn.Kinds = append(cn.Kinds, k.plural)
			}
		}
		if len(cn.Kinds) > 0 {
			out.Namespaces = append(out.Namespaces, cn)
		}
	}
	return out, nil
}

func (s *Server) consoleNamespaces(w http.ResponseWriter, r *http.Request) *apiError {
	out, e := s.visibleNamespaces(r.Context(), info(r).caller)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listTarget is one list+watch behind a list stream: a kind in a namespace ("" for all).
type listTarget struct {
	kind      consoleKind
	namespace string
}

// consoleListStream streams the objects of every console kind: in ?namespace=, or else across the namespaces the
// caller may list (one cluster-wide watch per kind the caller may list everywhere, else one per namespace).
//
// Events: "snapshot" {kind, namespace, items} replaces what the page holds of that kind in that scope (namespace
// "" is all); "change" {type, item} adds, updates or removes one; "error" says a list or watch stopped and why.
func (s *Server) consoleListStream(w http.ResponseWriter, r *http.Request) *apiError {
	ns := r.URL.Query().Get("namespace")
	var targets []listTarget
	if ns != "" {
		var v violations
		v.name("namespace", ns)
		if len(v) > 0 {
			return invalid(v...)
		}
		for _, k := range consoleKinds {
			targets = append(targets, listTarget{kind: k, namespace: ns})
		}
	} else {
		vis, e := s.visibleNamespaces(r.Context(), info(r).caller)
		if e != nil {
			return e
		}
		for _, k := range consoleKinds {
			if slices.Contains(vis.Everywhere, k.plural) {
				targets = append(targets, listTarget{kind: k})
				continue
			}
			for _, n := range vis.Namespaces {
				if slices.Contains(n.Kinds, k.plural) {
					targets = append(targets, listTarget{kind: k, namespace: n.Name})
				}
			}
		}
	}
	c, err := s.callerClient(info(r).token)
	if err != nil {
		return internalError(http.StatusInternalServerError, codeInternal, err, "internal error")
	}
	ctx, cancel := context.WithTimeout(r.Context(), maxWatchSeconds*time.Second)
	defer cancel()
	out := make(chan watchUpdate)
	for i, t := range targets {
		go s.listWatch(ctx, c, i, t.kind.newList, client.ListOptions{Namespace: t.namespace}, out)
	}
	sse := startSSE(w)
	if err := sse.send("targets", len(targets)); err != nil {
		return nil
	}
	for {
		var u watchUpdate
		select {
		case <-ctx.Done():
			return nil
		case u = <-out:
		}
		t := targets[u.src]
		var err error
		switch {
		case u.err != nil:
			se := newStreamError(u.err)
			se.Kind, se.Namespace = t.kind.kind, t.namespace
			err = sse.send("error", se)
		case u.reset != nil:
			items := make([]consoleItem, 0, len(u.reset))
			for _, o := range u.reset {
				items = append(items, t.kind.summarize(o))
			}
			err = sse.send("snapshot", map[string]any{"kind": t.kind.kind, "namespace": t.namespace, "items": items})
		default:
			err = sse.send("change", map[string]any{"type": u.typ, "item": t.kind.summarize(u.obj)})
		}
		if err != nil {
			return nil
		}
	}
}

// Sources of an object stream.
const (
	srcObject = iota
	srcClusterPods
	srcSubmitterPods
	srcEvents
)

// maxObjectEvents bounds the events an object page shows, newest first.
const maxObjectEvents = 200

// objectState is what an object stream holds to answer with: the object, the pods of the namespace's Ray clusters
// (and of the RayJob's submitter), and the namespace's events; what is sent is narrowed to this object.
type objectState struct {
	kind   consoleKind
	obj    client.Object
	pods   [srcSubmitterPods + 1]map[string]*corev1.Pod
	events map[types.UID]*corev1.Event
}

func (st *objectState) apply(u watchUpdate) {
	switch u.src {
	case srcObject:
		switch {
		case u.reset != nil:
			st.obj = nil
			if len(u.reset) > 0 {
				st.obj = u.reset[0]
			}
		case u.typ == watch.Deleted:
			st.obj = nil
		default:
			st.obj = u.obj
		}
	case srcClusterPods, srcSubmitterPods:
		if u.reset != nil {
			st.pods[u.src] = map[string]*corev1.Pod{}
			for _, o := range u.reset {
				st.pods[u.src][o.GetName()] = o.(*corev1.Pod)
			}
		} else if u.typ == watch.Deleted {
			delete(st.pods[u.src], u.obj.GetName())
		} else {
			st.pods[u.src][u.obj.GetName()] = u.obj.(*corev1.Pod)
		}
	case srcEvents:
		if u.reset != nil {
			st.events = map[types.UID]*corev1.Event{}
			for _, o := range u.reset {
				st.events[o.GetUID()] = o.(*corev1.Event)
			}
		} else if u.typ == watch.Deleted {
			delete(st.events, u.obj.GetUID())
		} else {
			st.events[u.obj.GetUID()] = u.obj.(*corev1.Event)
		}
	}
}

func (st *objectState) item() *consoleItem {
	if st.obj == nil {
		return nil
	}
	it := st.kind.summarize(st.obj)
	return &it
}

// podsOf are the pods of the object's clusters and, for a RayJob, its submitter's.
func (st *objectState) podsOf() []consolePod {
	out := []consolePod{}
	it := st.item()
	if it == nil {
		return out
	}
	for _, p := range st.pods[srcClusterPods] {
		if slices.Contains(it.Clusters, p.Labels[rayv1.LabelCluster]) {
			out = append(out, summarizePod(p))
		}
	}
	for _, p := range st.pods[srcSubmitterPods] {
		out = append(out, summarizePod(p))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Role != out[j].Role {
			return out[i].Role < out[j].Role
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// eventsOf are the events about the object, its clusters and their pods, newest first.
func (st *objectState) eventsOf(pods []consolePod) []consoleEvent {
	out := []consoleEvent{}
	it := st.item()
	if it == nil {
		return out
	}
	about := map[string]bool{it.Name: true}
	for _, c := range it.Clusters {
		about[c] = true
	}
	for _, p := range pods {
		about[p.Name] = true
	}
	for _, e := range st.events {
		if about[e.InvolvedObject.Name] {
			out = append(out, summarizeEvent(e))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Last.After(out[j].Last) })
	if len(out) > maxObjectEvents {
		out = out[:maxObjectEvents]
	}
	return out
}

// consoleObjectStream streams one object's page: "object" {item, object} (item null once it is gone), "pods"
// [...] and "events" [...], each sent whole when it changes, and "error" when a list or watch stops.
func (s *Server) consoleObjectStream(w http.ResponseWriter, r *http.Request) *apiError {
	k, ok := consoleKindByPlural(r.PathValue("kind"))
	if !ok {
		return notFound("the console shows no kind %q", r.PathValue("kind"))
	}
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	c, err := s.callerClient(info(r).token)
	if err != nil {
		return internalError(http.StatusInternalServerError, codeInternal, err, "internal error")
	}
	ctx, cancel := context.WithTimeout(r.Context(), maxWatchSeconds*time.Second)
	defer cancel()
	out := make(chan watchUpdate)
	podList := func() client.ObjectList { return &corev1.PodList{} }
	hasCluster, _ := labels.NewRequirement(rayv1.LabelCluster, selection.Exists, nil)
	go s.listWatch(ctx, c, srcObject, k.newList, client.ListOptions{Namespace: ns, FieldSelector: fields.OneTermEqualSelector("metadata.name", name)}, out)
	go s.listWatch(ctx, c, srcClusterPods, podList, client.ListOptions{Namespace: ns, LabelSelector: labels.NewSelector().Add(*hasCluster)}, out)
	st := &objectState{kind: k, events: map[types.UID]*corev1.Event{}}
	st.pods[srcClusterPods], st.pods[srcSubmitterPods] = map[string]*corev1.Pod{}, map[string]*corev1.Pod{}
	if k.plural == "rayjobs" {
		// The submitter Job is named after the RayJob; its pods carry the Job controller's label.
		go s.listWatch(ctx, c, srcSubmitterPods, podList, client.ListOptions{Namespace: ns, LabelSelector: labels.SelectorFromSet(labels.Set{"batch.kubernetes.io/job-name": name})}, out)
	}
	go s.listWatch(ctx, c, srcEvents, func() client.ObjectList { return &corev1.EventList{} }, client.ListOptions{Namespace: ns}, out)
	sse := startSSE(w)
	sections := map[int]string{srcObject: "object", srcClusterPods: "pods", srcSubmitterPods: "pods", srcEvents: "events"}
	for {
		var u watchUpdate
		select {
		case <-ctx.Done():
			return nil
		case u = <-out:
		}
		if u.err != nil {
			se := newStreamError(u.err)
			se.Section, se.Namespace = sections[u.src], ns
			if sse.send("error", se) != nil {
				return nil
			}
			continue
		}
		st.apply(u)
		var err error
		if u.src == srcObject {
			err = sse.send("object", map[string]any{"item": st.item(), "object": st.obj})
		}
		pods := st.podsOf()
		if err == nil && u.src != srcEvents {
			err = sse.send("pods", pods)
		}
		if err == nil {
			err = sse.send("events", st.eventsOf(pods))
		}
		if err != nil {
			return nil
		}
	}
}

// consolePod's log query parameters passed to Kubernetes; no other reaches it.
var podLogParams = []string{"container", "follow", "tailLines", "previous", "timestamps", "limitBytes"}

// consolePodLog streams a pod's log from Kubernetes with the caller's token (RBAC: get pods/log).
func (s *Server) consolePodLog(w http.ResponseWriter, r *http.Request) *apiError {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	q := r.URL.Query()
	return s.proxyV2(w, r, forward{
		path:   "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(name) + "/log",
		stream: q.Get("follow") == "true",
		query: func(url.Values) url.Values {
			out := url.Values{}
			for _, p := range podLogParams {
				if v := q.Get(p); v != "" {
					out.Set(p, v)
				}
			}
			return out
		},
	})
}
