package clusterbuild

import (
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

func rayService(ports ...corev1.ContainerPort) (*rayv1.RayService, *rayv1.RayCluster) {
	c := cluster()
	c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Ports = ports
	s := &rayv1.RayService{ObjectMeta: metav1.ObjectMeta{Name: "svc", Namespace: "ns", UID: "svc-uid"}}
	s.Spec.RayClusterSpec = c.Spec
	active := RayServiceCluster(s, "svc-abcde")
	return s, active
}

// A RayService's head Service is labelled for the RayService, as KubeRay's: its identifier stays <rayservice>-head
// whichever cluster it points at, and it carries none of the cluster's labels; it selects the active cluster's head.
func TestRayServiceHeadServiceLabels(t *testing.T) {
	s, active := rayService()
	svc := RayServiceHeadService(s, active)
	want := map[string]string{
		rayv1.LabelOriginCRName: "svc",
		rayv1.LabelOriginCRD:    KindRayService,
		rayv1.LabelNodeType:     rayv1.NodeTypeHead,
		rayv1.LabelIdentifier:   "svc-head",
	}
	if d := cmp.Diff(want, svc.Labels); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	if svc.Name != "svc-head-svc" || svc.Spec.Selector[rayv1.LabelCluster] != "svc-abcde" || svc.Spec.Selector[rayv1.LabelIdentifier] != "svc-abcde-head" {
		t.Errorf("name %s selector %v", svc.Name, svc.Spec.Selector)
	}
	if ref := metav1.GetControllerOf(svc); ref == nil || ref.Kind != KindRayService || ref.Name != "svc" {
		t.Errorf("owner %v", svc.OwnerReferences)
	}
	for _, p := range svc.Spec.Ports {
		if p.AppProtocol == nil || *p.AppProtocol != "tcp" {
			t.Errorf("head port %s appProtocol %v, want tcp as on the cluster's head Service", p.Name, p.AppProtocol)
		}
	}
}

func TestRayServiceServeService(t *testing.T) {
	wantLabels := map[string]string{rayv1.LabelOriginCRName: "svc", rayv1.LabelOriginCRD: KindRayService, rayv1.LabelServe: "svc-serve"}
	serve := func(name string, port int32) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Port: port, Protocol: corev1.ProtocolTCP}
	}
	custom := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "custom", Labels: map[string]string{"team": "a", rayv1.LabelServe: "mine"}, Annotations: map[string]string{"lb": "yes"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"ignored": "x"},
			Ports: []corev1.ServicePort{{Name: "custom-port", Port: 12345, TargetPort: intstr.FromInt32(12345)}, {Name: "serve", Port: 9000, TargetPort: intstr.FromInt32(8000)}}},
	}
	for _, tc := range []struct {
		name   string
		ports  []corev1.ContainerPort
		custom *corev1.Service
		want   []corev1.ServicePort
	}{
		{name: "head names no port: the default serve port", want: []corev1.ServicePort{serve("serve", 8000)}},
		{name: "head's serve ports", ports: []corev1.ContainerPort{{Name: "serve", ContainerPort: 8001}, {Name: "serve-grpc", ContainerPort: 9001}, {Name: "dashboard", ContainerPort: 8265}},
			want: []corev1.ServicePort{serve("serve", 8001), serve("serve-grpc", 9001)}},
		// As KubeRay: the head's serve port replaces the user's ports, which the head may not listen on.
		{name: "custom Service, head names no port", custom: custom, want: []corev1.ServicePort{serve("serve", 8000)}},
		{name: "custom Service, head's serve port", ports: []corev1.ContainerPort{{Name: "serve", ContainerPort: 8001}}, custom: custom,
			want: []corev1.ServicePort{serve("serve", 8001)}},
		// Only when the head names ports but no serve port does the user's port named serve stay (name and port).
		{name: "custom Service, head without a serve port", ports: []corev1.ContainerPort{{Name: "dashboard", ContainerPort: 8265}}, custom: custom,
			want: []corev1.ServicePort{serve("serve", 9000)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, active := rayService(tc.ports...)
			s.Spec.ServeService = tc.custom
			svc := RayServiceServeService(s, active)
			if d := cmp.Diff(tc.want, svc.Spec.Ports); d != "" {
				t.Errorf("ports (-want +got):\n%s", d)
			}
			if want := map[string]string{rayv1.LabelCluster: "svc-abcde", rayv1.LabelServe: "true"}; !maps.Equal(svc.Spec.Selector, want) {
				t.Errorf("selector %v, want %v", svc.Spec.Selector, want)
			}
			wl := maps.Clone(wantLabels)
			name, typ := "svc-serve-svc", corev1.ServiceType("")
			if tc.custom != nil {
				// The user's labels under ours.
				wl["team"] = "a"
				name, typ = "custom", corev1.ServiceTypeLoadBalancer
				if svc.Annotations["lb"] != "yes" {
					t.Errorf("annotations %v", svc.Annotations)
				}
			}
			if d := cmp.Diff(wl, svc.Labels); d != "" {
				t.Errorf("labels (-want +got):\n%s", d)
			}
			if svc.Name != name || svc.Spec.Type != typ {
				t.Errorf("name %s type %q, want %s %q", svc.Name, svc.Spec.Type, name, typ)
			}
		})
	}
}
