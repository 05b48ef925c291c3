package clusterbuild

import (
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// NetworkPolicies are the NetworkPolicies of spec.networkPolicy, as KubeRay v1.7 builds them: <cluster>-head for the
// head pod and <cluster>-workers-<group> for each worker group; nil when the spec asks for none. Each policy denies
// the directions of the mode except traffic between the cluster's own pods (and, on a head made for a K8sJobMode
// RayJob, the submitter's calls to the dashboard), then allows the user's rules on top. DNS is not allowed by
// default, as in KubeRay: under DenyAll or DenyAllEgress the user adds it, or workers cannot resolve the head.
func NetworkPolicies(c *rayv1.RayCluster) []*networkingv1.NetworkPolicy {
	np := c.Spec.NetworkPolicy
	if np == nil {
		return nil
	}
	out := make([]*networkingv1.NetworkPolicy, 0, 1+len(c.Spec.WorkerGroupSpecs))
	out = append(out, networkPolicy(c, HeadNetworkPolicyName(c), rayv1.HeadGroupName,
		map[string]string{rayv1.LabelCluster: c.Name, rayv1.LabelNodeType: rayv1.NodeTypeHead},
		headIngressRules(c), np.Head))
	for i := range c.Spec.WorkerGroupSpecs {
		g := c.Spec.WorkerGroupSpecs[i].GroupName
		out = append(out, networkPolicy(c, WorkerNetworkPolicyName(c, g), GroupLabelValue(g),
			map[string]string{rayv1.LabelCluster: c.Name, rayv1.LabelNodeType: rayv1.NodeTypeWorker, rayv1.LabelGroup: GroupLabelValue(g)},
			[]networkingv1.NetworkPolicyIngressRule{intraClusterIngress(c)}, workerRules(np, g)))
	}
	return out
}

// HeadNetworkPolicyName is <cluster>-head.
func HeadNetworkPolicyName(c *rayv1.RayCluster) string { return c.Name + "-head" }

// WorkerNetworkPolicyName is <cluster>-workers-<group>.
func WorkerNetworkPolicyName(c *rayv1.RayCluster, group string) string {
	return c.Name + "-workers-" + group
}

// workerRules are a group's own entry of workerGroups when it has one (it replaces worker), else worker.
func workerRules(np *rayv1.NetworkPolicyConfig, group string) *rayv1.NetworkPolicyRules {
	for i := range np.WorkerGroups {
		if g := &np.WorkerGroups[i]; g.GroupName == group {
			return &rayv1.NetworkPolicyRules{IngressRules: g.IngressRules, EgressRules: g.EgressRules}
		}
	}
	return np.Worker
}

func networkPolicy(c *rayv1.RayCluster, name, group string, selector map[string]string, ingress []networkingv1.NetworkPolicyIngressRule, user *rayv1.NetworkPolicyRules) *networkingv1.NetworkPolicy {
	mode := c.Spec.NetworkPolicy.Mode
	if mode == "" {
		mode = rayv1.NetworkPolicyDenyAll
	}
	spec := networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: selector}}
	// A policy type listed denies what no rule allows, so only the directions the mode denies are listed.
	if mode == rayv1.NetworkPolicyDenyAll || mode == rayv1.NetworkPolicyDenyAllIngress {
		spec.PolicyTypes = append(spec.PolicyTypes, networkingv1.PolicyTypeIngress)
		spec.Ingress = ingress
		if user != nil {
			spec.Ingress = append(spec.Ingress, deepCopyIngress(user.IngressRules)...)
		}
	}
	if mode == rayv1.NetworkPolicyDenyAll || mode == rayv1.NetworkPolicyDenyAllEgress {
		spec.PolicyTypes = append(spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{clusterPeer(c)}}}
		if user != nil {
			spec.Egress = append(spec.Egress, deepCopyEgress(user.EgressRules)...)
		}
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: c.Namespace,
			Labels: map[string]string{
				rayv1.LabelCluster: c.Name, rayv1.LabelGroup: group,
				rayv1.LabelAppName: rayv1.AppNameValue, rayv1.LabelCreatedBy: rayv1.CreatedByValue,
			},
			OwnerReferences: []metav1.OwnerReference{*OwnerReference(c)},
		},
		Spec: spec,
	}
}

// clusterPeer is every pod of the cluster: Ray's processes talk to each other on ports chosen at run time.
func clusterPeer(c *rayv1.RayCluster) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{rayv1.LabelCluster: c.Name}}}
}

func intraClusterIngress(c *rayv1.RayCluster) networkingv1.NetworkPolicyIngressRule {
	return networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{clusterPeer(c)}}
}

// headIngressRules let the cluster's pods in and, for a cluster a K8sJobMode RayJob controls, its submitter pods to
// the dashboard port. Nothing else is let in by default (not the operator either, as in KubeRay: it reaches the
// dashboard only where the user's head rules allow it).
func headIngressRules(c *rayv1.RayCluster) []networkingv1.NetworkPolicyIngressRule {
	rules := []networkingv1.NetworkPolicyIngressRule{intraClusterIngress(c)}
	job := submitterJob(c)
	if job == "" {
		return rules
	}
	port := intstr.FromInt32(paramPort(c.Spec.HeadGroupSpec.RayStartParams, "dashboard-port", DefaultDashboardPort))
	return append(rules, networkingv1.NetworkPolicyIngressRule{
		From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
			rayv1.LabelOriginCRName: job, rayv1.LabelOriginCRD: KindRayJob,
		}}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: &port}},
	})
}

// submitterJob is the RayJob controlling c when it submits from a submitter Job (the only mode with a pod outside
// the cluster that calls the head), else "".
func submitterJob(c *rayv1.RayCluster) string {
	if c.Labels[rayv1.LabelJobSubmissionMode] != string(rayv1.K8sJobMode) {
		return ""
	}
	for _, o := range c.OwnerReferences {
		if o.Kind == KindRayJob && ptr.Deref(o.Controller, false) && strings.HasPrefix(o.APIVersion, rayv1.GroupVersion.Group+"/") {
			return o.Name
		}
	}
	return ""
}

func deepCopyIngress(rules []networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule {
	out := make([]networkingv1.NetworkPolicyIngressRule, len(rules))
	for i := range rules {
		rules[i].DeepCopyInto(&out[i])
	}
	return out
}

func deepCopyEgress(rules []networkingv1.NetworkPolicyEgressRule) []networkingv1.NetworkPolicyEgressRule {
	out := make([]networkingv1.NetworkPolicyEgressRule, len(rules))
	for i := range rules {
		rules[i].DeepCopyInto(&out[i])
	}
	return out
}

// NetworkPolicyChanged says whether existing differs from desired in what Manta writes there (labels and spec),
// taking a port's protocol the API server filled in (TCP) as equal to one left out. Labels are compared whole, as
// KubeRay does: the writer puts them back whole.
func NetworkPolicyChanged(existing, desired *networkingv1.NetworkPolicy) bool {
	want := desired.Spec.DeepCopy()
	defaultPortProtocols(want)
	return !maps.Equal(existing.Labels, desired.Labels) || !equality.Semantic.DeepEqual(&existing.Spec, want)
}

func defaultPortProtocols(spec *networkingv1.NetworkPolicySpec) {
	for i := range spec.Ingress {
		for j := range spec.Ingress[i].Ports {
			if spec.Ingress[i].Ports[j].Protocol == nil {
				spec.Ingress[i].Ports[j].Protocol = ptr.To(corev1.ProtocolTCP)
			}
		}
	}
	for i := range spec.Egress {
		for j := range spec.Egress[i].Ports {
			if spec.Egress[i].Ports[j].Protocol == nil {
				spec.Egress[i].Ports[j].Protocol = ptr.To(corev1.ProtocolTCP)
			}
		}
	}
}
