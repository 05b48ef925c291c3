package clusterbuild

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// The expected Ingresses are written out by hand from KubeRay v1.7.0's common/ingress.go and
// utils.GenerateIngressName/CheckName, not computed with the builder.
func TestHeadIngressAsKubeRay17(t *testing.T) {
	owner := []metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "rc", UID: "uid-1", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	labels := map[string]string{"ray.io/cluster": "rc", "ray.io/identifier": "rc-head", "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"}
	rule := func(host, path string, pt networkingv1.PathType, svc string, port int32) []networkingv1.IngressRule {
		return []networkingv1.IngressRule{{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: path, PathType: ptr.To(pt), Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Number: port}},
			}}},
		}}}}
	}
	tests := []struct {
		name   string
		mutate func(*rayv1.RayCluster)
		want   *networkingv1.Ingress
	}{{
		name:   "defaults",
		mutate: func(*rayv1.RayCluster) {},
		want: &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: "rc-head-ingress", Namespace: "ns", Labels: labels, Annotations: map[string]string{}, OwnerReferences: owner},
			Spec:       networkingv1.IngressSpec{Rules: rule("", "/", networkingv1.PathTypePrefix, "rc-head-svc", 8265)},
		},
	}, {
		name: "ingressOptions, the class annotation, a named head Service and dashboard port",
		mutate: func(c *rayv1.RayCluster) {
			c.Annotations = map[string]string{"kubernetes.io/ingress.class": "nginx", "nginx.ingress.kubernetes.io/rewrite-target": "/$1"}
			c.Spec.HeadGroupSpec.IngressOptions = &rayv1.IngressOptions{
				Host: ptr.To("ray.example.com"), Path: ptr.To("/rc/(.*)"), PathType: ptr.To(networkingv1.PathTypeImplementationSpecific),
				TLS: []networkingv1.IngressTLS{{Hosts: []string{"ray.example.com"}, SecretName: "ray-tls"}},
			}
			c.Spec.HeadGroupSpec.HeadService = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "my-head"}}
			c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "gcs-server", ContainerPort: 6379}, {Name: "dashboard", ContainerPort: 8300}}
		},
		want: &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: "rc-head-ingress", Namespace: "ns", Labels: labels,
				Annotations: map[string]string{"nginx.ingress.kubernetes.io/rewrite-target": "/$1"}, OwnerReferences: owner},
			Spec: networkingv1.IngressSpec{
				IngressClassName: ptr.To("nginx"),
				TLS:              []networkingv1.IngressTLS{{Hosts: []string{"ray.example.com"}, SecretName: "ray-tls"}},
				Rules:            rule("ray.example.com", "/rc/(.*)", networkingv1.PathTypeImplementationSpecific, "my-head", 8300),
			},
		},
	}, {
		// Ports that name no dashboard: Ray's default port, as KubeRay's service port map gives.
		name: "container ports without a dashboard",
		mutate: func(c *rayv1.RayCluster) {
			c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 9000}}
		},
		want: &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: "rc-head-ingress", Namespace: "ns", Labels: labels, Annotations: map[string]string{}, OwnerReferences: owner},
			Spec:       networkingv1.IngressSpec{Rules: rule("", "/", networkingv1.PathTypePrefix, "rc-head-svc", 8265)},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &rayv1.RayCluster{
				ObjectMeta: metav1.ObjectMeta{Name: "rc", Namespace: "ns", UID: "uid-1"},
				Spec: rayv1.RayClusterSpec{HeadGroupSpec: rayv1.HeadGroupSpec{EnableIngress: ptr.To(true),
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-head"}}}}}},
			}
			tc.mutate(c)
			if diff := cmp.Diff(tc.want, HeadIngress(c)); diff != "" {
				t.Errorf("HeadIngress (-KubeRay v1.7 +Manta):\n%s", diff)
			}
		})
	}
}

// KubeRay keeps the last 50 characters of <cluster>-head-ingress and makes a leading digit or punctuation an "r".
func TestHeadIngressName(t *testing.T) {
	for name, want := range map[string]string{
		"rc":                             "rc-head-ingress",
		strings.Repeat("a", 35):          strings.Repeat("a", 35) + "-head-ingress",
		strings.Repeat("a", 40):          strings.Repeat("a", 37) + "-head-ingress",
		"abc1" + strings.Repeat("b", 36): "r" + strings.Repeat("b", 36) + "-head-ingress",
		"abc-" + strings.Repeat("b", 36): "r" + strings.Repeat("b", 36) + "-head-ingress",
	} {
		if got := HeadIngressName(&rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}); got != want {
			t.Errorf("HeadIngressName(%q) = %q, want %q", name, got, want)
		}
	}
}

// A class the API server filled in is kept when the spec names none; anything else of Manta's that moved is put back.
func TestSyncHeadIngress(t *testing.T) {
	c := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: "rc", Namespace: "ns", Annotations: map[string]string{"a": "1"}},
		Spec: rayv1.RayClusterSpec{HeadGroupSpec: rayv1.HeadGroupSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}}}}
	desired := HeadIngress(c)
	stored := desired.DeepCopy()
	stored.Spec.IngressClassName = ptr.To("default-class")
	if _, changed := SyncHeadIngress(stored, desired); changed {
		t.Error("a defaulted class reads as a change")
	}
	edited := stored.DeepCopy()
	edited.Spec.Rules[0].HTTP.Paths[0].Path = "/other"
	edited.Annotations["b"] = "2"
	u, changed := SyncHeadIngress(edited, desired)
	if !changed || u.Spec.Rules[0].HTTP.Paths[0].Path != "/" || ptr.Deref(u.Spec.IngressClassName, "") != "default-class" || len(u.Annotations) != 1 {
		t.Errorf("changed %v, updated %+v", changed, u)
	}
	if edited.Spec.Rules[0].HTTP.Paths[0].Path != "/other" {
		t.Error("SyncHeadIngress changed the existing object")
	}
}
