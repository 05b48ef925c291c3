package oracle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
	"github.com/manta-dev/manta/internal/testutil/podnet"
)

// Ray's default ports, which every sample's pods use unless a container port of that name says otherwise.
const (
	defaultDashboardPort = 8265
	defaultServePort     = 8000
	defaultAgentPort     = 52365
)

// jobStep is how long a fake Ray job runs.
const jobStep = 3 * time.Second

// rayHeads plays a Ray head for every RayCluster of the run, on both sides alike: one fakeray.Head per head pod
// (a new head pod is a new Ray head, which remembers no job), reached at any of the cluster's pod IPs.
type rayHeads struct {
	cl client.Client
	// direct reads from the API server: a pod the cache does not show with its IP yet may already be Ready in an
	// operator's own cache, which then calls its head (see headAt).
	direct client.Reader
	mu     sync.Mutex
	heads  map[types.UID]*fakeray.Head // by head pod UID
	ports  map[int]string              // port -> "dashboard", "serve" or "agent"
	// held counts, by namespace, the jobs whose entrypoint holds them (holdMarker) running on a head there until
	// the test releases the namespace; released holds the namespaces released. Under holdMu, not mu: a held job
	// ends when its head is closed, which the cleanup does with mu held.
	holdMu   sync.Mutex
	held     map[string]int
	released map[string]chan struct{}
}

// holdMarker in an entrypoint keeps the Ray job RUNNING on the fake head until the test releases its namespace
// (rayHeads.release), or for good: a job that runs past a deadline, or that is suspended mid-run.
const holdMarker = "oracle-hold"

type localAddrKey struct{}

// serveRayHeads listens in the pod network on every port the objects name for Ray's dashboard, agent or Serve
// proxy (and Ray's defaults), until the test ends.
func serveRayHeads(t *testing.T, n *podnet.Network, cl client.Client, objs []*unstructured.Unstructured) *rayHeads {
	r := &rayHeads{cl: cl, heads: map[types.UID]*fakeray.Head{}, held: map[string]int{}, released: map[string]chan struct{}{},
		ports: map[int]string{defaultDashboardPort: "dashboard", defaultServePort: "serve", defaultAgentPort: "agent"}}
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			if name, ok := t["name"].(string); ok {
				var port int
				switch p := t["containerPort"].(type) {
				case int64:
					port = int(p)
				case float64:
					port = int(p)
				}
				switch {
				case port == 0:
				case name == "dashboard", name == "serve":
					r.ports[port] = name
				case name == "dashboard-agent":
					r.ports[port] = "agent"
				}
			}
			for _, e := range t {
				walk(e)
			}
		case []any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	for _, o := range objs {
		walk(o.Object)
	}
	srv := &http.Server{
		Handler: r,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, localAddrKey{}, c.LocalAddr())
		},
		ReadHeaderTimeout: 30 * time.Second,
	}
	for port := range r.ports {
		l, err := n.Listen(net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("listen on port %d in the pod network: %v", port, err)
		}
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("fake Ray heads on port %d: %v", port, err)
			}
		}()
	}
	t.Cleanup(func() {
		_ = srv.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, h := range r.heads {
			h.Close()
		}
	})
	return r
}

// ServeHTTP finds the cluster of the pod the connection was meant for and hands the request to its head.
func (r *rayHeads) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	addr, _ := req.Context().Value(localAddrKey{}).(*net.TCPAddr)
	if addr == nil {
		http.Error(w, "fake Ray: no local address", http.StatusInternalServerError)
		return
	}
	h := r.headAt(req.Context(), addr.IP.String())
	if h == nil {
		// No Ray node at that address: a real connection would be refused.
		http.Error(w, "fake Ray: no Ray pod at "+addr.IP.String(), http.StatusBadGateway)
		return
	}
	switch r.ports[addr.Port] {
	case "dashboard":
		h.Dashboard().ServeHTTP(w, req)
	case "serve":
		h.ServeProxy().ServeHTTP(w, req)
	case "agent":
		h.Agent().ServeHTTP(w, req)
	default:
		http.NotFound(w, req)
	}
}

// headAt returns the head of the Ray cluster whose running pod has podIP, nil when there is none.
//
// The test's cache may lag an operator's: an operator that saw the head Ready before this cache saw its IP would be
// answered "no Ray pod" (a failed Serve update that the other side, reconciling later, does not see). So a miss in
// the cache is looked up again straight from the API server.
func (r *rayHeads) headAt(ctx context.Context, podIP string) *fakeray.Head {
	for _, rd := range []client.Reader{r.cl, r.direct} {
		if rd == nil {
			continue
		}
		pods := &corev1.PodList{}
		if err := rd.List(ctx, pods, client.HasLabels{rayv1.LabelCluster}); err != nil {
			continue
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.PodIP == podIP && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				return r.headOf(ctx, rd, p.Namespace, p.Labels[rayv1.LabelCluster])
			}
		}
	}
	return nil
}

// headOf returns the head of RayCluster ns/cluster, nil while it has no running head pod.
func (r *rayHeads) headOf(ctx context.Context, rd client.Reader, ns, cluster string) *fakeray.Head {
	pods := &corev1.PodList{}
	if err := rd.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelCluster: cluster, rayv1.LabelNodeType: rayv1.NodeTypeHead}); err != nil {
		return nil
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		h := r.heads[p.UID]
		if h == nil {
			h = fakeray.New(fakeray.Options{Run: r.runner(ns), ServeDeploying: jobStep})
			r.heads[p.UID] = h
		}
		return h
	}
	return nil
}

// runner runs the jobs of a head in namespace ns: fakeray.Scripted, held first while the entrypoint asks for it and
// ns is not released.
func (r *rayHeads) runner(ns string) fakeray.RunFunc {
	run := fakeray.Scripted(jobStep)
	return func(ctx context.Context, req ray.JobSubmitRequest, logs io.Writer) int {
		if strings.Contains(req.Entrypoint, holdMarker) {
			r.holdMu.Lock()
			ch := r.releaseChan(ns)
			r.held[ns]++
			r.holdMu.Unlock()
			select {
			case <-ctx.Done():
			case <-ch:
			}
			r.holdMu.Lock()
			r.held[ns]--
			r.holdMu.Unlock()
			if ctx.Err() != nil {
				return -1
			}
		}
		return run(ctx, req, logs)
	}
}

// releaseChan is ns's release channel; r.holdMu held.
func (r *rayHeads) releaseChan(ns string) chan struct{} {
	ch := r.released[ns]
	if ch == nil {
		ch = make(chan struct{})
		r.released[ns] = ch
	}
	return ch
}

// release ends the hold of every held job in ns, and of every job held there later.
func (r *rayHeads) release(ns string) {
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	ch := r.releaseChan(ns)
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// liveHeads calls f for each running head pod in ns, not being deleted, that has a fake head, with r.mu held.
func (r *rayHeads) liveHeads(ctx context.Context, ns string, f func(*corev1.Pod, *fakeray.Head)) error {
	pods := &corev1.PodList{}
	if err := r.cl.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelNodeType: rayv1.NodeTypeHead}); err != nil {
		return fmt.Errorf("list head pods: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range pods.Items {
		p := &pods.Items[i]
		if h := r.heads[p.UID]; h != nil && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			f(p, h)
		}
	}
	return nil
}

// serveUnread says which running head pod in ns has Serve applications DEPLOYING, or turned RUNNING and not yet
// read by two reconciles (fakeray.Head.ServeUnread): the operator polling them writes their status in the reconcile
// that reads them, so the second read proves the first one's write is done. Empty when none.
func (r *rayHeads) serveUnread(ctx context.Context, ns string) string {
	why := ""
	err := r.liveHeads(ctx, ns, func(p *corev1.Pod, h *fakeray.Head) {
		if why == "" && h.ServeUnread() {
			why = "head " + p.Name + ": its Serve applications' status is new to the operator"
		}
	})
	if err != nil {
		return err.Error()
	}
	return why
}

// serveReads counts, by head pod UID, the GETs of the Serve applications on each running head pod in ns that has a
// Serve config (fakeray.Head.ServeReads) and whose cluster a RayService names as active or pending. Left out: a
// RayService upgraded incrementally: in a run of that scenario with it in, the writes in the namespace came about
// once a minute and KubeRay v1.5.0 never read the service's head three times between two of them ("KubeRay's head
// pod ... read 0 times since the last write" for 20 s and more), so the settle never ended. KubeRay v1.5.0 reads
// both heads on every reconcile of such a service (each returns RequeueAfter 2 s), so the gaps are error backoff or
// its four RayService workers busy elsewhere, which is not established. Such a service settles instead when its
// numServeEndpoints counts its clusters' Ready serve pods (serveEndpointsBehind).
func (r *rayHeads) serveReads(ctx context.Context, ns string) (map[types.UID]int, error) {
	services := &unstructured.UnstructuredList{}
	services.SetGroupVersionKind(rayServiceGVK.GroupVersion().WithKind("RayServiceList"))
	if err := r.cl.List(ctx, services, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list RayServices: %w", err)
	}
	polled := map[string]bool{}
	for _, o := range services.Items {
		if typ, _, _ := unstructured.NestedString(o.Object, "spec", "upgradeStrategy", "type"); typ == string(rayv1.NewClusterWithIncrementalUpgrade) {
			continue
		}
		for _, status := range []string{"activeServiceStatus", "pendingServiceStatus"} {
			if c, _, _ := unstructured.NestedString(o.Object, "status", status, "rayClusterName"); c != "" {
				polled[c] = true
			}
		}
	}
	reads := map[types.UID]int{}
	err := r.liveHeads(ctx, ns, func(p *corev1.Pod, h *fakeray.Head) {
		if n := h.ServeReads(); polled[p.Labels[rayv1.LabelCluster]] && n >= 0 {
			reads[p.UID] = n
		}
	})
	return reads, err
}

// holding says whether a job of ns is held on a fake head: it runs until the test releases it.
func (r *rayHeads) holding(ns string) bool {
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	return r.held[ns] > 0
}

// serveUnsent says which Ready head pod in ns, of a cluster a RayService with a Serve config names as active or
// pending, has not been sent a Serve config yet, or runs Serve behind a healthy proxy without the ray.io/serve=true
// label; empty when none. An operator sends the config once the head is Ready and its Service routes to it (Manta,
// finding no route yet, looks again a second later: a requeue no queue metric shows), and labels the head at a later
// reconcile, after the proxy answers, with an UpdatedHeadPodServeLabel event both sides record. A RayService with
// spec.excludeHeadPodFromServeSvc keeps its heads out of Serve, so their label is not waited for.
func (r *rayHeads) serveUnsent(ctx context.Context, ns string) (string, error) {
	services := &unstructured.UnstructuredList{}
	services.SetGroupVersionKind(rayServiceGVK.GroupVersion().WithKind("RayServiceList"))
	if err := r.cl.List(ctx, services, client.InNamespace(ns)); err != nil {
		return "", fmt.Errorf("list RayServices: %w", err)
	}
	// named: the clusters to look at, and whether their head serves (is not excluded from the Serve Service).
	named := map[string]bool{}
	for _, o := range services.Items {
		if cfg, _, _ := unstructured.NestedString(o.Object, "spec", "serveConfigV2"); cfg == "" {
			continue
		}
		excluded, _, _ := unstructured.NestedBool(o.Object, "spec", "excludeHeadPodFromServeSvc")
		for _, status := range []string{"activeServiceStatus", "pendingServiceStatus"} {
			if c, _, _ := unstructured.NestedString(o.Object, "status", status, "rayClusterName"); c != "" {
				named[c] = !excluded
			}
		}
	}
	pods := &corev1.PodList{}
	if err := r.cl.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelNodeType: rayv1.NodeTypeHead}); err != nil {
		return "", fmt.Errorf("list head pods: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range pods.Items {
		p := &pods.Items[i]
		serves, ok := named[p.Labels[rayv1.LabelCluster]]
		if !ok || p.DeletionTimestamp != nil || !clusterbuild.PodRunningAndReady(p) {
			continue
		}
		h := r.heads[p.UID]
		if h == nil || h.ServeDeploys() == 0 {
			return "head " + p.Name + ": no Serve config sent yet", nil
		}
		if serves && h.ProxyHealthy() && p.Labels[rayv1.LabelServe] != "true" {
			return "head " + p.Name + ": its Serve proxy is healthy and its " + rayv1.LabelServe + " label is not true yet", nil
		}
	}
	return "", nil
}
