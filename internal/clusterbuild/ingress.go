package clusterbuild

import (
	"maps"
	"unicode"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// AnnotationIngressClass on a RayCluster names the class of its head Ingress (spec.ingressClassName); it is the one
// cluster annotation not copied onto the Ingress, which may not carry both.
const AnnotationIngressClass = "kubernetes.io/ingress.class"

// WantsHeadIngress says headGroupSpec.enableIngress is true.
func WantsHeadIngress(c *rayv1.RayCluster) bool {
	return ptr.Deref(c.Spec.HeadGroupSpec.EnableIngress, false)
}

// HeadIngressName is <cluster>-head-ingress, shortened as KubeRay shortens it: its last 50 characters, and an "r" for
// a first character that is a digit or punctuation.
func HeadIngressName(c *rayv1.RayCluster) string {
	s := c.Name + "-head-ingress"
	if len(s) > 50 {
		s = s[len(s)-50:]
	}
	if r := rune(s[0]); unicode.IsDigit(r) || unicode.IsPunct(r) {
		s = "r" + s[1:]
	}
	return s
}

// HeadIngress is the Ingress KubeRay v1.7 builds for the head's dashboard: one rule (ingressOptions' host, path "/"
// and pathType Prefix unless they say otherwise) to the head Service's dashboard port, ingressOptions' TLS, the
// cluster's annotations, and the class of its kubernetes.io/ingress.class annotation.
func HeadIngress(c *rayv1.RayCluster) *networkingv1.Ingress {
	opts := c.Spec.HeadGroupSpec.IngressOptions
	if opts == nil {
		opts = &rayv1.IngressOptions{}
	}
	ann := maps.Clone(c.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	delete(ann, AnnotationIngressClass)
	rule := networkingv1.IngressRule{
		Host: ptr.Deref(opts.Host, ""),
		IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
			Path:     ptr.Deref(opts.Path, "/"),
			PathType: ptr.To(ptr.Deref(opts.PathType, networkingv1.PathTypePrefix)),
			Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
				Name: HeadServiceName(c),
				Port: networkingv1.ServiceBackendPort{Number: headDashboardPort(c)},
			}},
		}}}},
	}
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{
			Name: HeadIngressName(c), Namespace: c.Namespace,
			Labels: map[string]string{
				rayv1.LabelCluster:    c.Name,
				rayv1.LabelIdentifier: SelectorLabels(c, rayv1.NodeTypeHead)[rayv1.LabelIdentifier],
				rayv1.LabelAppName:    rayv1.AppNameValue,
				rayv1.LabelCreatedBy:  rayv1.CreatedByValue,
			},
			Annotations:     ann,
			OwnerReferences: []metav1.OwnerReference{*OwnerReference(c)},
		},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{rule}},
	}
	for _, t := range opts.TLS {
		ing.Spec.TLS = append(ing.Spec.TLS, *t.DeepCopy())
	}
	if class, ok := c.Annotations[AnnotationIngressClass]; ok {
		ing.Spec.IngressClassName = ptr.To(class)
	}
	return ing
}

// headDashboardPort is the port of the head container's port named dashboard, else Ray's default.
func headDashboardPort(c *rayv1.RayCluster) int32 {
	if cs := c.Spec.HeadGroupSpec.Template.Spec.Containers; len(cs) > 0 {
		for _, p := range cs[RayContainerIndex].Ports {
			if p.Name == DashboardPortName {
				return p.ContainerPort
			}
		}
	}
	return DefaultDashboardPort
}

// SyncHeadIngress returns a copy of existing with the labels, annotations and spec of desired, and whether any of them
// differed. A class the spec leaves unset is the existing one: the API server's default-class admission fills it in.
func SyncHeadIngress(existing, desired *networkingv1.Ingress) (*networkingv1.Ingress, bool) {
	spec := desired.Spec.DeepCopy()
	if spec.IngressClassName == nil {
		spec.IngressClassName = existing.Spec.IngressClassName
	}
	if maps.Equal(existing.Labels, desired.Labels) && maps.Equal(existing.Annotations, desired.Annotations) &&
		equality.Semantic.DeepEqual(&existing.Spec, spec) {
		return nil, false
	}
	u := existing.DeepCopy()
	u.Labels, u.Annotations, u.Spec = maps.Clone(desired.Labels), maps.Clone(desired.Annotations), *spec
	return u, true
}
