package envtest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"google.golang.org/genproto/googleapis/rpc/code"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/testutil"
)

// testKubeRayDashboard replays the requests KubeRay v1.7's dashboard (dashboard/src/hooks/api/*.ts) sends, with no
// Authorization header and from its own origin, against a server started with --anonymous-as naming a
// ServiceAccount that may use Ray objects in one namespace only, and --cors-allow-origin naming the dashboard:
// everything it sees, creates and deletes is what that ServiceAccount's RBAC allows, checked by Kubernetes. Then the
// v2 operations the dashboard's API server must offer beside: compute templates, /status, watch, deletecollection,
// raycronjobs and the services proxy its Ray dashboard links use.
func (e *testEnv) testKubeRayDashboard(t *testing.T) {
	ctx := context.Background()
	ns, other := e.Namespace(t), e.Namespace(t)
	e.serviceAccountToken(t, ns, "dash") // creates the ServiceAccount; the server gets its own tokens for it
	e.grant(t, ns, "dash",
		rbacv1.PolicyRule{APIGroups: []string{"ray.io"}, Resources: []string{"rayclusters", "rayjobs", "rayservices", "raycronjobs"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}},
		rbacv1.PolicyRule{APIGroups: []string{"ray.io"}, Resources: []string{"rayclusters/status"}, Verbs: []string{"get", "update", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services/proxy"}, Verbs: []string{"get", "create"}},
	)
	// A user who may create clusters but read no ConfigMap and proxy to no Service.
	narrow := e.serviceAccountToken(t, ns, "narrow")
	e.grant(t, ns, "narrow", rbacv1.PolicyRule{APIGroups: []string{"ray.io"}, Resources: []string{"rayclusters"}, Verbs: []string{"create", "get", "list"}})

	const origin = "http://localhost:3000" // KubeRay's dashboard under `yarn dev`
	s, err := apiserver.New(e.cfg, apiserver.Options{Auth: apiserver.AuthKubernetes, AnonymousAs: ns + ":dash", CORSAllowOrigin: origin, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	d := srv.URL
	// What the browser sends with the dashboard's fetches: Origin, and for the create its two headers.
	browser := http.Header{"Origin": {origin}}
	createHeaders := http.Header{"Origin": {origin}, "Content-Type": {"application/json"}, "Accept": {"application/json"}}
	cors := func(t *testing.T, r resp) {
		t.Helper()
		if r.header.Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("answer lacks Access-Control-Allow-Origin %s: %v", origin, r.header)
		}
	}
	v2 := "/apis/ray.io/v1/namespaces/" + ns

	// Right after the control plane starts, Kubernetes answers a list 429 "storage is (re)initializing" until its
	// cache of that resource is filled; client-go waits that out (Retry-After), the dashboard would poll again.
	for _, l := range []client.ObjectList{&rayv1.RayClusterList{}, &rayv1.RayJobList{}, &rayv1.RayServiceList{}, &rayv1.RayCronJobList{}} {
		if err := e.k.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	// A cluster elsewhere, which the dashboard's identity must never see.
	hidden := testutil.MakeRayCluster(other, "hidden").Obj()
	if err := e.k.Create(ctx, hidden); err != nil {
		t.Fatal(err)
	}

	t.Run("preflights", func(t *testing.T) {
		r := callWith(t, d, "OPTIONS", v2+"/rayjobs", nil, http.Header{"Origin": {origin},
			"Access-Control-Request-Method": {"POST"}, "Access-Control-Request-Headers": {"content-type"}})
		if r.code != http.StatusNoContent || r.header.Get("Access-Control-Allow-Methods") != "POST" || r.header.Get("Access-Control-Allow-Headers") != "content-type" {
			t.Errorf("create preflight: %d %v", r.code, r.header)
		}
		cors(t, r)
		r = callWith(t, d, "OPTIONS", v2+"/rayjobs/x", nil, http.Header{"Origin": {origin}, "Access-Control-Request-Method": {"DELETE"}})
		if r.code != http.StatusNoContent || r.header.Get("Access-Control-Allow-Methods") != "DELETE" {
			t.Errorf("delete preflight: %d %v", r.code, r.header)
		}
		cors(t, r)
		r = callWith(t, d, "OPTIONS", v2+"/rayjobs", nil, http.Header{"Origin": {"http://elsewhere.test"}, "Access-Control-Request-Method": {"POST"}})
		if r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight from another origin allowed: %v", r.header)
		}
	})

	t.Run("jobs page", func(t *testing.T) {
		// useCreateJob: a RayJob in Kubernetes' own shape.
		job := map[string]any{
			"apiVersion": "ray.io/v1", "kind": "RayJob",
			"metadata": map[string]any{"name": "dash-job", "namespace": ns},
			"spec": map[string]any{
				"entrypoint": "python -c 'print(1)'",
				"rayClusterSpec": map[string]any{
					"headGroupSpec": map[string]any{"rayStartParams": map[string]any{}, "template": map[string]any{"spec": map[string]any{
						"containers": []any{map[string]any{"name": "ray-head", "image": "rayproject/ray:2.52.0",
							"ports":     []any{map[string]any{"containerPort": 6379, "name": "gcs-server"}, map[string]any{"containerPort": 8265, "name": "dashboard"}, map[string]any{"containerPort": 10001, "name": "client"}},
							"resources": map[string]any{"limits": map[string]any{"cpu": "1", "memory": "2Gi"}, "requests": map[string]any{"cpu": "1", "memory": "2Gi"}}}}}}},
					"workerGroupSpecs": []any{map[string]any{"groupName": "small-wg", "replicas": 1, "minReplicas": 1, "maxReplicas": 2, "rayStartParams": map[string]any{},
						"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "ray-worker", "image": "rayproject/ray:2.52.0",
							"resources": map[string]any{"limits": map[string]any{"cpu": "1", "memory": "1Gi"}, "requests": map[string]any{"cpu": "1", "memory": "1Gi"}}}}}}}},
				},
			},
		}
		r := callWith(t, d, "POST", v2+"/rayjobs", job, createHeaders)
		if r.code != http.StatusCreated {
			t.Fatalf("create job: %d %s", r.code, r.body)
		}
		cors(t, r)
		var created rayv1.RayJob
		r.decode(t, &created)
		if created.Spec.RayClusterSpec == nil || created.Spec.RayClusterSpec.WorkerGroupSpecs[0].GroupName != "small-wg" {
			t.Errorf("created: %+v", created.Spec)
		}
		// useListJobs, for the namespace: the job, as Kubernetes lists it.
		r = callWith(t, d, "GET", v2+"/rayjobs", nil, browser)
		var jobs rayv1.RayJobList
		mustOK(t, r, &jobs)
		cors(t, r)
		if len(jobs.Items) != 1 || jobs.Items[0].Name != "dash-job" {
			t.Errorf("jobs: %+v", jobs.Items)
		}
		// useDeleteJobs.
		r = callWith(t, d, "DELETE", v2+"/rayjobs/dash-job", nil, browser)
		mustOK(t, r, nil)
		cors(t, r)
		if err := e.k.Get(ctx, client.ObjectKey{Namespace: ns, Name: "dash-job"}, &rayv1.RayJob{}); err == nil {
			t.Errorf("the job is still there")
		}
	})

	t.Run("all namespaces", func(t *testing.T) {
		// The dashboard's "all" namespace: one list at the cluster scope, which Kubernetes refuses a ServiceAccount
		// with rights in one namespace: nothing of the other namespace comes back, and the refusal names the caller.
		for _, plural := range []string{"rayclusters", "rayjobs"} {
			r := callWith(t, d, "GET", "/apis/ray.io/v1/"+plural, nil, browser)
			if r.code != http.StatusForbidden {
				t.Fatalf("all-namespace %s: %d %s", plural, r.code, r.body)
			}
			cors(t, r)
			var st metav1.Status
			r.decode(t, &st)
			if !strings.Contains(st.Message, "system:serviceaccount:"+ns+":dash") || !strings.Contains(st.Message, "cluster scope") || strings.Contains(string(r.body), "hidden") {
				t.Errorf("refusal: %s", r.body)
			}
		}
		r := callWith(t, d, "GET", "/apis/ray.io/v1/rayclusters?watch=true", nil, browser)
		if r.code != http.StatusForbidden {
			t.Errorf("all-namespace watch: %d %s", r.code, r.body)
		}
		// A user whose RBAC allows it at the cluster scope gets every namespace's, as from Kubernetes.
		wide := e.serviceAccountToken(t, ns, "wide")
		rule := rbacv1.PolicyRule{APIGroups: []string{"ray.io"}, Resources: []string{"rayclusters"}, Verbs: []string{"list"}}
		name := ns + "-wide"
		if err := e.k.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}}); err != nil {
			t.Fatal(err)
		}
		if err := e.k.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "wide", Namespace: ns}}}); err != nil {
			t.Fatal(err)
		}
		e.waitRBAC(t, ns, "wide", "", rule)
		var all rayv1.RayClusterList
		mustOK(t, callWith(t, d, "GET", "/apis/ray.io/v1/rayclusters", nil, http.Header{"Authorization": {wide}}), &all)
		found := false
		for _, rc := range all.Items {
			found = found || rc.Namespace == other && rc.Name == "hidden"
		}
		if !found {
			t.Errorf("cluster-wide list misses %s/hidden", other)
		}
		// A token that does not authenticate is refused, never taken for the anonymous identity.
		mustFail(t, callWith(t, d, "GET", v2+"/rayclusters", nil, http.Header{"Authorization": {"Bearer not-a-token"}}), 401, code.Code_UNAUTHENTICATED, "")
	})

	t.Run("compute templates", func(t *testing.T) {
		tpl := apiserver.ComputeTemplate{Name: "small", Namespace: ns, CPU: 2, Memory: 4, GPU: 1,
			Tolerations: []apiserver.PodToleration{{Key: "ray.io/node-type", Operator: "Equal", Value: "head", Effect: "NoSchedule"}}}
		mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/compute_templates", tpl), nil)
		rc := map[string]any{
			"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": map[string]any{"name": "templated"},
			"spec": map[string]any{"rayVersion": "2.52.0", "headGroupSpec": map[string]any{
				"computeTemplate": "small", "rayStartParams": map[string]any{},
				"template": map[string]any{"spec": map[string]any{"containers": []any{
					map[string]any{"name": "ray-head", "image": "rayproject/ray:2.52.0"},
					map[string]any{"name": "sidecar", "image": "busybox:1.36"},
				}}},
			}},
		}
		r := callWith(t, d, "POST", v2+"/rayclusters", rc, createHeaders)
		if r.code != http.StatusCreated {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
		if w := r.header.Values("Warning"); len(w) > 0 {
			t.Errorf("computeTemplate reached Kubernetes: %v", w)
		}
		var got rayv1.RayCluster
		if err := e.k.Get(ctx, client.ObjectKey{Namespace: ns, Name: "templated"}, &got); err != nil {
			t.Fatal(err)
		}
		pt := got.Spec.HeadGroupSpec.Template
		head, side := pt.Spec.Containers[0].Resources, pt.Spec.Containers[1].Resources
		if pt.Annotations["ray.io/compute-template"] != "small" || head.Limits.Cpu().String() != "2" || head.Requests.Memory().String() != "4Gi" ||
			head.Limits.Name("nvidia.com/gpu", "").String() != "1" || side.Limits.Cpu().String() != "2" || side.Limits.Name("nvidia.com/gpu", "").String() != "0" ||
			len(pt.Spec.Tolerations) != 1 || pt.Spec.Tolerations[0].Value != "head" {
			t.Errorf("template not applied as KubeRay's v2 does: annotations %v, head %+v, sidecar %+v, tolerations %+v", pt.Annotations, head, side, pt.Spec.Tolerations)
		}
		// A template that is not there names the field, for a RayJob's worker group as for a cluster's head.
		job := map[string]any{"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": map[string]any{"name": "j"},
			"spec": map[string]any{"entrypoint": "true", "rayClusterSpec": map[string]any{"headGroupSpec": map[string]any{"template": map[string]any{}},
				"workerGroupSpecs": []any{map[string]any{"groupName": "w", "computeTemplate": "absent", "template": map[string]any{}}}}}}
		mustFail(t, callWith(t, d, "POST", v2+"/rayjobs", job, createHeaders), 422, code.Code_FAILED_PRECONDITION, "spec.rayClusterSpec.workerGroupSpecs[0].computeTemplate")
		// The template is read with the caller's rights.
		rc["metadata"] = map[string]any{"name": "narrow"}
		s := mustFail(t, call(t, d, "POST", v2+"/rayclusters", rc, narrow), 403, code.Code_PERMISSION_DENIED, "")
		if !strings.Contains(s.Message, `configmaps "small"`) || !strings.Contains(s.Message, "spec.headGroupSpec.computeTemplate") {
			t.Errorf("403 does not name the ConfigMap and the field: %s", s.Message)
		}
	})

	t.Run("status", func(t *testing.T) {
		item := v2 + "/rayclusters/templated/status"
		r := callWith(t, d, "PATCH", item, `{"status":{"desiredWorkerReplicas":3}}`, http.Header{"Origin": {origin}, "Content-Type": {"application/merge-patch+json"}})
		var rc rayv1.RayCluster
		mustOK(t, r, &rc)
		if rc.Status.DesiredWorkerReplicas != 3 {
			t.Errorf("patched status: %+v", rc.Status)
		}
		mustOK(t, callWith(t, d, "GET", item, nil, browser), &rc)
		if rc.Status.DesiredWorkerReplicas != 3 {
			t.Errorf("status: %+v", rc.Status)
		}
		// narrow may get clusters but not their status subresource: Kubernetes' own 403.
		if r := call(t, d, "GET", item, nil, narrow); r.code != http.StatusForbidden {
			t.Errorf("status as narrow: %d %s", r.code, r.body)
		}
	})

	t.Run("watch", func(t *testing.T) {
		var list rayv1.RayClusterList
		mustOK(t, callWith(t, d, "GET", v2+"/rayclusters", nil, browser), &list)
		// Bounded only so a broken stream fails the test instead of hanging it; events are awaited, not timed.
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(wctx, "GET", d+v2+"/rayclusters?watch=true&resourceVersion="+list.ResourceVersion, nil)
		req.Header.Set("Origin", origin)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Header.Get("Access-Control-Allow-Origin") != origin {
			b, _ := io.ReadAll(res.Body)
			t.Fatalf("watch: %d %v %s", res.StatusCode, res.Header, b)
		}
		// The stream is open; a cluster created now must come through it while it stays open (flushed per event).
		if err := e.k.Create(ctx, testutil.MakeRayCluster(ns, "watched").Obj()); err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bufio.NewReader(res.Body))
		for {
			var ev struct {
				Type   string           `json:"type"`
				Object rayv1.RayCluster `json:"object"`
			}
			if err := dec.Decode(&ev); err != nil {
				t.Fatalf("watch stream: %v", err)
			}
			if ev.Type == "ADDED" && ev.Object.Name == "watched" {
				break
			}
		}
		mustFail(t, callWith(t, d, "GET", v2+"/rayclusters?watch=true&timeoutSeconds=soon", nil, browser), 400, code.Code_INVALID_ARGUMENT, "timeoutSeconds")
	})

	t.Run("deletecollection", func(t *testing.T) {
		for _, n := range []string{"bulk-a", "bulk-b"} {
			rc := testutil.MakeRayCluster(ns, n).Obj()
			rc.Labels = map[string]string{"batch": "bulk"}
			if err := e.k.Create(ctx, rc); err != nil {
				t.Fatal(err)
			}
		}
		mustOK(t, callWith(t, d, "DELETE", v2+"/rayclusters?labelSelector=batch%3Dbulk", nil, browser), nil)
		var left rayv1.RayClusterList
		mustOK(t, callWith(t, d, "GET", v2+"/rayclusters?labelSelector=batch%3Dbulk", nil, browser), &left)
		if len(left.Items) != 0 {
			t.Errorf("left after deletecollection: %d", len(left.Items))
		}
		var remaining rayv1.RayClusterList
		mustOK(t, callWith(t, d, "GET", v2+"/rayclusters", nil, browser), &remaining)
		if len(remaining.Items) == 0 {
			t.Errorf("deletecollection deleted beyond its selector")
		}
		// narrow may not: Kubernetes says so.
		if r := call(t, d, "DELETE", v2+"/rayclusters", nil, narrow); r.code != http.StatusForbidden {
			t.Errorf("deletecollection as narrow: %d %s", r.code, r.body)
		}
		// useDeleteClusters.
		mustOK(t, callWith(t, d, "DELETE", v2+"/rayclusters/watched", nil, browser), nil)
	})

	t.Run("raycronjobs", func(t *testing.T) {
		cj := map[string]any{"apiVersion": "ray.io/v1", "kind": "RayCronJob", "metadata": map[string]any{"name": "nightly"},
			"spec": map[string]any{"schedule": "30 2 * * *", "suspend": true, "jobTemplate": map[string]any{"entrypoint": "true",
				"rayClusterSpec": map[string]any{"headGroupSpec": map[string]any{"rayStartParams": map[string]any{}, "template": map[string]any{"spec": map[string]any{
					"containers": []any{map[string]any{"name": "ray-head", "image": "rayproject/ray:2.52.0"}}}}}}}}}
		r := callWith(t, d, "POST", v2+"/raycronjobs", cj, createHeaders)
		if r.code != http.StatusCreated {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
		var l rayv1.RayCronJobList
		mustOK(t, callWith(t, d, "GET", v2+"/raycronjobs", nil, browser), &l)
		if len(l.Items) != 1 || l.Items[0].Name != "nightly" {
			t.Errorf("raycronjobs: %+v", l.Items)
		}
		mustOK(t, callWith(t, d, "DELETE", v2+"/raycronjobs/nightly", nil, browser), nil)
		if r := call(t, d, "GET", v2+"/raycronjobs", nil, narrow); r.code != http.StatusForbidden {
			t.Errorf("raycronjobs as narrow: %d", r.code)
		}
	})

	t.Run("services proxy", func(t *testing.T) {
		// A head Service with no selector whose endpoint is a fake Ray dashboard on this machine's own address:
		// kube-apiserver proxies to it as to a head pod (it refuses loopback, so not 127.0.0.1).
		ip := hostIPv4(t)
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		seen := make(chan string, 10)
		ray := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen <- r.Method + " " + r.URL.Path + " authorization=" + r.Header.Get("Authorization")
			w.Header().Set("Access-Control-Allow-Origin", "*") // this server's CORS answer stands, not Ray's
			_, _ = io.WriteString(w, "<title>Ray Dashboard</title>")
		})}}
		ray.Start()
		t.Cleanup(ray.Close)
		port := ln.Addr().(*net.TCPAddr).Port
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "rc-head-svc", Namespace: ns, Labels: map[string]string{rayv1.LabelAppName: rayv1.AppNameValue}},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "dashboard", Port: 8265, TargetPort: intstr.FromInt32(int32(port))}}}}
		plainSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "not-ray", Namespace: ns},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		// kube-apiserver proxies only to an endpoint (from the Service's EndpointSlices) whose target Pod has that
		// IP: a Pod that no kubelet runs, with the address written into its status.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "rc-head", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray:2.52.0"}}}}
		if err := e.k.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		if err := e.k.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "rc-head-svc-1", Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: "rc-head-svc", discoveryv1.LabelManagedBy: "test"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "rc-head", Namespace: ns},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true)}}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("dashboard"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}}}
		for _, o := range []client.Object{svc, plainSvc, slice} {
			if err := e.k.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		// The dashboard's link: services/{name}:{containerPort}/proxy/#/cluster (the fragment stays in the browser).
		link := "/api/v1/namespaces/" + ns + "/services/rc-head-svc:8265/proxy/"
		var r resp
		// kube-apiserver may resolve endpoints from a cache: until the EndpointSlice and the Pod's IP are in it, its
		// proxy answers 503 "no endpoints available". Wait for that condition to clear, not for a time.
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			r = callWith(t, d, "GET", link, nil, browser)
			return !(r.code == http.StatusServiceUnavailable && strings.Contains(string(r.body), "no endpoints available")), nil
		})
		if err != nil || r.code != http.StatusOK || !strings.Contains(string(r.body), "Ray Dashboard") {
			t.Fatalf("Ray dashboard link: %d %s", r.code, r.body)
		}
		if got := <-seen; got != "GET / authorization=" {
			t.Errorf("the Ray dashboard got %q", got)
		}
		if r.header.Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("CORS of the proxied answer: %v", r.header.Values("Access-Control-Allow-Origin"))
		}
		r = callWith(t, d, "POST", "/api/v1/namespaces/"+ns+"/services/rc-head-svc:dashboard/proxy/api/jobs/", `{"entrypoint":"true"}`, browser)
		mustOK(t, r, nil)
		if got := <-seen; got != "POST /api/jobs/ authorization=" {
			t.Errorf("the Ray dashboard got %q", got)
		}

		mustFail(t, callWith(t, d, "GET", "/api/v1/namespaces/"+ns+"/services/not-ray/proxy/", nil, browser), 404, code.Code_NOT_FOUND, "")
		mustFail(t, callWith(t, d, "GET", "/api/v1/namespaces/"+ns+"/services/nowhere:8265/proxy/", nil, browser), 404, code.Code_NOT_FOUND, "")
		s := mustFail(t, call(t, d, "GET", link, nil, narrow), 403, code.Code_PERMISSION_DENIED, "")
		if !strings.Contains(s.Message, `get services/proxy "rc-head-svc:8265"`) {
			t.Errorf("403: %s", s.Message)
		}
		mustFail(t, callWith(t, d, "GET", "/api/v1/namespaces/"+ns+"/services/ftp:rc-head-svc:21/proxy/", nil, browser), 400, code.Code_INVALID_ARGUMENT, "service")
		if r := callWith(t, d, "OPTIONS", link, nil, browser); r.code != http.StatusMethodNotAllowed {
			t.Errorf("OPTIONS without a preflight: %d", r.code)
		}
	})
}

// hostIPv4 is an IPv4 address of this machine that is not loopback, which kube-apiserver accepts as an endpoint.
func hostIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatal("this machine has no IPv4 address beside loopback, where kube-apiserver's services proxy could reach a fake Ray dashboard")
	return ""
}
