package ray_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/controller/rayservice"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestRayService runs the RayCluster and RayService controllers against a real kube-apiserver (envtest) and the
// package's real Ray head: a RayService with the small Serve application of testdata/hello_serve.py becomes Ready,
// its serve Service selects exactly the pod whose proxy is healthy, and a serveConfigV2 change is served over HTTP.
// The head pod the RayCluster controller creates is played by the test (no kubelet): it is marked Running and
// Ready with an IP at which the head is reachable.
//   - direct: the operator's direct transport; the cluster DNS name of the head Service is dialled on loopback
//     (the only thing replaced is name resolution: the machine has no cluster DNS).
//   - kubernetes-proxy: --use-kubernetes-proxy; dashboard calls go through services/<svc>:dashboard/proxy and
//     Serve health through pods/<pod>:<port>/proxy of the kube-apiserver to the head published on a network
//     namespace address (see TestKubernetesProxy); the test writes the head Service's EndpointSlice as the
//     endpoints controller would.
func TestRayService(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)

	t.Run("direct", func(t *testing.T) {
		dialer := &net.Dialer{Timeout: 10 * time.Second}
		hc := &http.Client{Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				_, port, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				return dialer.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
			},
		}}
		f, err := ray.NewFactory(ray.Options{HTTPClient: hc, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		runRayService(t, cfg, cl, f, "direct", "10.250.0.2", nil)
	})

	t.Run("kubernetes-proxy", func(t *testing.T) {
		pn := newPodNet(t)
		pn.forward(t, head.DashboardPort, "127.0.0.1:"+strconv.Itoa(head.DashboardPort))
		pn.forward(t, head.ServePort, "127.0.0.1:"+strconv.Itoa(head.ServePort))
		f, err := ray.NewFactory(ray.Options{UseKubernetesProxy: true, RESTConfig: cfg, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		runRayService(t, cfg, cl, f, "proxy", pn.PodIP, publishEndpointSlice)
	})

	t.Run("rest-api", func(t *testing.T) { runRayServiceREST(t, cfg, cl) })
}

// runRayServiceREST drives a RayService through the REST API's services endpoints (create, get, list, update,
// delete) with the controllers and the real head behind it. Clusters made by the REST API publish Ray's default
// ports (dashboard 8265, serve 8000); the dialer maps those to the head's ports on loopback.
func runRayServiceREST(t *testing.T, cfg *rest.Config, cl client.Client) {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	hc := &http.Client{Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			switch port {
			case "8265":
				port = strconv.Itoa(head.DashboardPort)
			case "8000":
				port = strconv.Itoa(head.ServePort)
			default:
				return nil, fmt.Errorf("test dialer: unexpected address %s", addr)
			}
			return dialer.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		},
	}}
	t.Cleanup(hc.CloseIdleConnections)
	f, err := ray.NewFactory(ray.Options{HTTPClient: hc, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	startServiceControllers(t, cfg, f)
	s, err := apiserver.New(cfg, apiserver.Options{Auth: apiserver.AuthNone})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	api := &restClient{t: t, c: srv.Client()}

	const ns = "rayservice-rest"
	if err := cl.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	base := srv.URL + "/apis/v1/namespaces/" + ns
	api.do(http.MethodPost, base+"/compute_templates", apiserver.ComputeTemplate{Name: "small", Namespace: ns, CPU: 1, Memory: 2}, http.StatusOK, nil)
	body := apiserver.RayService{
		Name: "hello", Namespace: ns, User: "alice", Version: "2.52.0", ServeConfigV2: rayServiceConfig("rest-v1"),
		ClusterSpec: &apiserver.ClusterSpec{HeadGroupSpec: &apiserver.HeadGroupSpec{
			ComputeTemplate: "small", RayStartParams: map[string]string{"dashboard-host": "0.0.0.0"},
		}},
	}
	api.do(http.MethodPost, base+"/services", body, http.StatusOK, nil)

	clusterName, pod := playHeadPod(t, cl, ns, "hello", "10.250.0.3")
	var got apiserver.RayService
	testutil.Eventually(t, 5*time.Minute, "GET reports the active cluster with its application RUNNING", func() (bool, string) {
		code, _, raw := api.call(http.MethodGet, base+"/services/hello", nil)
		if code != http.StatusOK {
			return false, fmt.Sprintf("%d %s", code, raw)
		}
		got = apiserver.RayService{}
		if err := json.Unmarshal(raw, &got); err != nil {
			return false, err.Error()
		}
		st := got.RayServiceStatus
		ok := st != nil && st.RayClusterName == clusterName && len(st.ServeApplicationStatus) == 1 && st.ServeApplicationStatus[0].Status == ray.ApplicationStatusRunning
		return ok, string(raw)
	})
	if app := got.RayServiceStatus.ServeApplicationStatus[0]; app.Name != "hello-rs" || len(app.ServeDeploymentStatus) != 1 || app.ServeDeploymentStatus[0].Status != ray.DeploymentStatusHealthy {
		t.Errorf("application status %+v", app)
	}
	if len(got.RayServiceStatus.RayServiceEvents) == 0 {
		t.Errorf("no RayService events in the answer")
	}
	var list apiserver.ListRayServicesResponse
	api.do(http.MethodGet, base+"/services", nil, http.StatusOK, &list)
	if len(list.Services) != 1 || list.Services[0].Name != "hello" {
		t.Errorf("list: %+v", list)
	}

	proxy, err := f.ServeProxy(ray.Target{Namespace: ns, HeadPodName: pod.Name, HeadPodIP: pod.Status.PodIP})
	if err != nil {
		t.Fatal(err)
	}
	waitBody := func(want string) {
		t.Helper()
		testutil.Eventually(t, 5*time.Minute, "the application answers "+want, func() (bool, string) {
			b, err := proxy.Get(t.Context(), "/hello-rs")
			if err != nil {
				return false, err.Error()
			}
			return string(b) == want, string(b)
		})
	}
	waitBody("hello from manta (rest-v1)")

	// PUT: the new config is applied in place and served.
	body.ServeConfigV2 = rayServiceConfig("rest-v2")
	api.do(http.MethodPut, base+"/services/hello", body, http.StatusOK, nil)
	waitBody("hello from manta (rest-v2)")

	live := &rayv1.RayService{}
	if err := cl.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "hello"}, live); err != nil {
		t.Fatal(err)
	}
	api.do(http.MethodDelete, base+"/services/hello", nil, http.StatusOK, nil)
	// As with KubeRay, the cluster goes by garbage collection: it is controlled by the RayService. (This control
	// plane runs no garbage collector, so a cluster still there must be the deleted RayService's to collect.)
	testutil.Eventually(t, time.Minute, "RayService deleted, its cluster deleted or left to the garbage collector", func() (bool, string) {
		err := cl.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "hello"}, &rayv1.RayService{})
		rc := &rayv1.RayCluster{}
		cerr := cl.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: clusterName}, rc)
		owned := cerr == nil && metav1.IsControlledBy(rc, live)
		return apierrors.IsNotFound(err) && (apierrors.IsNotFound(cerr) || rc.DeletionTimestamp != nil || owned), fmt.Sprintf("service: %v, cluster: %v (controlled by the RayService: %v)", err, cerr, owned)
	})
}

func rayServiceConfig(suite string) string {
	return fmt.Sprintf(`proxy_location: HeadOnly
http_options:
  host: 127.0.0.1
  port: %d
applications:
  - name: hello-rs
    route_prefix: /hello-rs
    import_path: hello_serve:app
    runtime_env:
      env_vars:
        PYTHONPATH: %q
        MANTA_SUITE: %s
    deployments:
      - name: Hello
        num_replicas: 1
`, head.ServePort, dataDir, suite)
}

func runRayService(t *testing.T, cfg *rest.Config, cl client.Client, f ray.ClientFactory, mode, podIP string,
	publish func(t *testing.T, cl client.Client, pod *corev1.Pod, svc string)) {
	ctx := t.Context()
	startServiceControllers(t, cfg, f)

	ns := "rayservice-" + mode
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	spec := testutil.MakeRayCluster(ns, "x").Obj().Spec
	spec.HeadGroupSpec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{
		{Name: "gcs-server", ContainerPort: int32(head.GCSPort)},
		{Name: "dashboard", ContainerPort: int32(head.DashboardPort)},
		{Name: "serve", ContainerPort: int32(head.ServePort)},
	}
	rs := &rayv1.RayService{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hello"},
		Spec:       rayv1.RayServiceSpec{ServeConfigV2: rayServiceConfig(mode + "-v1"), RayClusterSpec: spec},
	}
	if err := cl.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	get := func() *rayv1.RayService {
		got := &rayv1.RayService{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(rs), got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	clusterName, pod := playHeadPod(t, cl, ns, rs.Name, podIP)
	if publish != nil {
		publish(t, cl, &pod, clusterName+"-head-svc")
	}

	// Ray deploys the application; the service becomes Ready on this cluster.
	var got *rayv1.RayService
	testutil.Eventually(t, 5*time.Minute, "RayService Ready", func() (bool, string) {
		got = get()
		c := meta.FindStatusCondition(got.Status.Conditions, string(rayv1.RayServiceReady))
		ok := c != nil && c.Status == metav1.ConditionTrue && got.Status.ActiveServiceStatus.RayClusterName == clusterName
		return ok, fmt.Sprintf("Ready %+v, active %+v, pending %+v", c, got.Status.ActiveServiceStatus.Applications, got.Status.PendingServiceStatus.Applications)
	})
	if app := got.Status.ActiveServiceStatus.Applications["hello-rs"]; app.Status != ray.ApplicationStatusRunning || app.Deployments["Hello"].Status != ray.DeploymentStatusHealthy {
		t.Errorf("application status %+v", app)
	}
	if got.Status.NumServeEndpoints != 1 || got.Status.ServiceStatus != rayv1.Running {
		t.Errorf("numServeEndpoints %d, serviceStatus %q", got.Status.NumServeEndpoints, got.Status.ServiceStatus)
	}
	// The serve Service selects exactly the pod whose proxy answered /-/healthz.
	svc := &corev1.Service{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hello-serve-svc"}, svc); err != nil {
		t.Fatal(err)
	}
	var selected corev1.PodList
	if err := cl.List(ctx, &selected, client.InNamespace(ns), client.MatchingLabels(svc.Spec.Selector)); err != nil {
		t.Fatal(err)
	}
	if len(selected.Items) != 1 || selected.Items[0].Name != pod.Name {
		t.Errorf("serve Service selects %d pods, want the head %s", len(selected.Items), pod.Name)
	}
	if p := svc.Spec.Ports; len(p) != 1 || p[0].Port != int32(head.ServePort) {
		t.Errorf("serve Service ports %+v", p)
	}

	proxy, err := f.ServeProxyFor(ray.Target{Namespace: ns, HeadServiceName: clusterName + "-head-svc", HeadPodName: pod.Name, HeadPodIP: podIP, ServePort: int32(head.ServePort)})
	if err != nil {
		t.Fatal(err)
	}
	getter, ok := proxy.(interface {
		Get(context.Context, string) ([]byte, error)
	})
	if !ok {
		t.Fatalf("%T cannot GET an application route", proxy)
	}
	waitBody := func(want string) {
		t.Helper()
		testutil.Eventually(t, 5*time.Minute, "the application answers "+want, func() (bool, string) {
			body, err := getter.Get(ctx, "/hello-rs")
			if err != nil {
				return false, err.Error()
			}
			return string(body) == want, string(body)
		})
	}
	waitBody("hello from manta (" + mode + "-v1)")

	// The config is not sent again while nothing changes: Ray's last deploy time stays put across reconciles.
	dash, err := f.DashboardFor(ray.Target{Namespace: ns, HeadServiceName: clusterName + "-head-svc", DashboardPort: int32(head.DashboardPort)})
	if err != nil {
		t.Fatal(err)
	}
	deployedAt := func() float64 {
		t.Helper()
		d, err := dash.GetServeDetails(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return d.Applications["hello-rs"].LastDeployedTimeS
	}
	before := deployedAt()
	// Three reconciles the test can see have happened: each changes a field that leaves the Serve config and the
	// cluster alone (rayClusterDeletionDelaySeconds) and waits for status.observedGeneration to show it.
	for i := range 3 {
		testutil.Eventually(t, time.Minute, "update rayClusterDeletionDelaySeconds", func() (bool, string) {
			cur := get()
			cur.Spec.RayClusterDeletionDelaySeconds = ptr.To(int32(60 + i))
			err := cl.Update(ctx, cur)
			return err == nil, fmt.Sprint(err)
		})
		testutil.Eventually(t, time.Minute, "the operator to observe the change", func() (bool, string) {
			got := get()
			return got.Status.ObservedGeneration == got.Generation, fmt.Sprintf("observedGeneration %d of %d", got.Status.ObservedGeneration, got.Generation)
		})
	}
	if after := deployedAt(); after != before || before == 0 {
		t.Errorf("last_deployed_time_s moved from %v to %v with an unchanged config", before, after)
	}
	// And the measure sees a re-send: the same config PUT again moves it.
	if err := dash.DeployServeConfigV2(ctx, get().Spec.ServeConfigV2); err != nil {
		t.Fatal(err)
	}
	if after := deployedAt(); after == before {
		t.Errorf("an identical PUT left last_deployed_time_s at %v: the check above proves nothing", after)
	}

	// A config change is applied in place and served.
	testutil.Eventually(t, time.Minute, "update serveConfigV2", func() (bool, string) {
		cur := get()
		cur.Spec.ServeConfigV2 = rayServiceConfig(mode + "-v2")
		err := cl.Update(ctx, cur)
		return err == nil, fmt.Sprint(err)
	})
	waitBody("hello from manta (" + mode + "-v2)")
	if got := get(); got.Status.ActiveServiceStatus.RayClusterName != clusterName || got.Status.PendingServiceStatus.RayClusterName != "" {
		t.Errorf("a config change moved clusters: active %q pending %q", got.Status.ActiveServiceStatus.RayClusterName, got.Status.PendingServiceStatus.RayClusterName)
	}
	if err := cl.Delete(ctx, get()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "RayService deleted", func() (bool, string) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(rs), &rayv1.RayService{})
		return err != nil && strings.Contains(err.Error(), "not found"), fmt.Sprint(err)
	})
}

// startServiceControllers runs the RayCluster and RayService controllers (RayService with f) until the test ends.
func startServiceControllers(t *testing.T, cfg *rest.Config, f ray.ClientFactory) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	podReq, _ := labels.NewRequirement(rayv1.LabelNodeType, selection.Exists, nil)
	svcReq, _ := labels.NewRequirement(rayv1.LabelCluster, selection.Exists, nil)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:     {Label: labels.NewSelector().Add(*podReq)},
			&corev1.Service{}: {Label: labels.NewSelector().Add(*svcReq)},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := raycluster.NewReconciler(mgr, raycluster.Options{}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	r, err := rayservice.NewReconciler(mgr, rayservice.Options{RayClients: f, RayCallTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// playHeadPod waits for the head pod of the RayService's pending cluster and marks it Running and Ready at podIP,
// as a kubelet would; it returns the cluster's name and the pod.
func playHeadPod(t *testing.T, cl client.Client, ns, service, podIP string) (string, corev1.Pod) {
	t.Helper()
	ctx := t.Context()
	var pod corev1.Pod
	var clusterName string
	testutil.Eventually(t, 3*time.Minute, "the head pod of the pending cluster", func() (bool, string) {
		rs := &rayv1.RayService{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: service}, rs); err != nil {
			return false, err.Error()
		}
		clusterName = rs.Status.PendingServiceStatus.RayClusterName
		if clusterName == "" {
			return false, "no pending cluster"
		}
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelCluster: clusterName, rayv1.LabelNodeType: rayv1.NodeTypeHead}); err != nil {
			return false, err.Error()
		}
		if len(pods.Items) != 1 {
			return false, fmt.Sprintf("%d head pods", len(pods.Items))
		}
		pod = pods.Items[0]
		return true, ""
	})
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}},
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Ready: true, Image: pod.Spec.Containers[0].Image}},
	}
	if err := cl.Status().Update(ctx, &pod); err != nil {
		t.Fatal(err)
	}
	return clusterName, pod
}

// publishEndpointSlice plays the endpoints controller for the head Service, so the kube-apiserver's service proxy
// finds the head pod.
func publishEndpointSlice(t *testing.T, cl client.Client, pod *corev1.Pod, svc string) {
	t.Helper()
	dashPort := int32(head.DashboardPort)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: svc + "-ray", Namespace: pod.Namespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{pod.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("dashboard"), Port: ptr.To(dashPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if err := cl.Create(t.Context(), slice); err != nil {
		t.Fatal(err)
	}
}
