package ray_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestKubernetesProxy runs the conformance suite through a real kube-apiserver's services/<svc>:dashboard/proxy
// and pods/<pod>:<port>/proxy, to the same Ray head published on a pod IP inside a network namespace.
func TestKubernetesProxy(t *testing.T) {
	pn := newPodNet(t)
	pn.forward(t, head.DashboardPort, "127.0.0.1:"+strconv.Itoa(head.DashboardPort))
	pn.forward(t, head.ServePort, "127.0.0.1:"+strconv.Itoa(head.ServePort))

	env := &envtest.Environment{BinaryAssetsDirectory: filepath.Join(root, "bin"),
		ControlPlaneStartTimeout: testutil.EnvtestStartTimeout, ControlPlaneStopTimeout: testutil.EnvtestStopTimeout}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting kube-apiserver (binaries from make tools in bin/): %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stopping envtest: %v", err)
		}
	})
	kc := kubernetes.NewForConfigOrDie(cfg)

	const ns, podName, svcName = "default", "raycluster-head", "raycluster-head-svc"
	publishHead(t, kc, ns, podName, svcName, pn.PodIP)

	f, err := ray.NewFactory(ray.Options{UseKubernetesProxy: true, RESTConfig: cfg, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	target := ray.Target{Namespace: ns, HeadServiceName: svcName, HeadPodName: podName, ServePort: int32(head.ServePort)}
	dash, err := f.Dashboard(target)
	if err != nil {
		t.Fatal(err)
	}
	serve, err := f.ServeProxy(target)
	if err != nil {
		t.Fatal(err)
	}

	// The API server learns EndpointSlices from an informer: wait until the proxy reaches Ray.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := dash.CheckGCSHealth(t.Context())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dashboard through the API server proxy: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}

	t.Run("ProxyErrorsAreUnavailable", func(t *testing.T) {
		// No such Service: the API server answers 404 itself. That must not read as "job not found".
		missing, err := f.Dashboard(ray.Target{Namespace: ns, HeadServiceName: "no-such-svc"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = missing.GetJob(t.Context(), "anything")
		var apiErr *ray.APIError
		if !errors.Is(err, ray.ErrUnavailable) || errors.Is(err, ray.ErrNotFound) || !errors.As(err, &apiErr) || !apiErr.FromProxy {
			t.Errorf("missing service: %v, want ErrUnavailable from the proxy", err)
		}
	})
	runConformance(t, suite{name: "proxy", dashboard: dash, serve: serve})
}

// publishHead creates the objects through which the API server proxies to the head: the Pod with its IP in
// status.podIPs, a Service with a port named "dashboard", and an EndpointSlice pointing at the Pod.
func publishHead(t *testing.T, kc kubernetes.Interface, ns, podName, svcName, podIP string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dashPort, servePort := int32(head.DashboardPort), int32(head.ServePort)
	labels := map[string]string{"ray.io/cluster": "raycluster", "ray.io/node-type": "head"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:  "ray-head",
				Image: "rayproject/ray:2.52.0",
				Ports: []corev1.ContainerPort{
					{Name: "dashboard", ContainerPort: dashPort},
					{Name: "serve", ContainerPort: servePort},
				},
			}},
		},
	}
	pod, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      podIP,
		PodIPs:     []corev1.PodIP{{IP: podIP}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if pod, err = kc.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: ns, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports: []corev1.ServicePort{
				{Name: "dashboard", Port: dashPort, TargetPort: intstr.FromInt32(dashPort)},
				{Name: "serve", Port: servePort, TargetPort: intstr.FromInt32(servePort)},
			},
		},
	}
	if svc, err = kc.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := ray.DashboardPort(svc); got != dashPort {
		t.Errorf("DashboardPort(head service) = %d, want %d", got, dashPort)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      svcName + "-ray",
			Namespace: ns,
			Labels:    map[string]string{discoveryv1.LabelServiceName: svcName},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{podIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: podName, UID: pod.UID},
		}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("dashboard"), Port: ptr.To(dashPort), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("serve"), Port: ptr.To(servePort), Protocol: ptr.To(corev1.ProtocolTCP)},
		},
	}
	if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
