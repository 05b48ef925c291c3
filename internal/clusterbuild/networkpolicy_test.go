package clusterbuild

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// The expected objects below are written out by hand from KubeRay v1.7.0's networkpolicy_controller.go (names,
// labels, selectors, policy types, the base rules and where the user's rules go), not computed with the builder.

func npCluster() *rayv1.RayCluster {
	return &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "rc", Namespace: "ns", UID: "uid-1"},
		Spec: rayv1.RayClusterSpec{
			HeadGroupSpec:    rayv1.HeadGroupSpec{RayStartParams: map[string]string{}},
			WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{GroupName: "cpu"}, {GroupName: "gpu"}},
		},
	}
}

func npMeta(name, group string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: "ns",
		Labels: map[string]string{
			"ray.io/cluster": "rc", "ray.io/group": group,
			"app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator",
		},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "rc", UID: "uid-1",
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}},
	}
}

var (
	rcPeer       = networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ray.io/cluster": "rc"}}}
	rcIngress    = networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{rcPeer}}
	rcEgress     = networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{rcPeer}}
	headSelector = metav1.LabelSelector{MatchLabels: map[string]string{"ray.io/cluster": "rc", "ray.io/node-type": "head"}}
	both         = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	dnsEgress    = networkingv1.NetworkPolicyEgressRule{
		To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(53))}},
	}
	monitoringIngress = networkingv1.NetworkPolicyIngressRule{
		From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"name": "monitoring"}}}},
		Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(8080))}},
	}
	gpuEgress = networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}}}}
)

func workerSelector(group string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchLabels: map[string]string{"ray.io/cluster": "rc", "ray.io/node-type": "worker", "ray.io/group": group}}
}

func TestNetworkPoliciesAsKubeRay17(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*rayv1.RayCluster)
		want   []*networkingv1.NetworkPolicy
	}{{
		name:   "no networkPolicy: none",
		mutate: func(c *rayv1.RayCluster) { c.Spec.NetworkPolicy = nil },
	}, {
		// The CRD defaults mode to DenyAll; an object built in Go may leave it empty.
		name: "DenyAll with head, worker and per-group rules",
		mutate: func(c *rayv1.RayCluster) {
			c.Spec.NetworkPolicy = &rayv1.NetworkPolicyConfig{
				Head:   &rayv1.NetworkPolicyRules{IngressRules: []networkingv1.NetworkPolicyIngressRule{monitoringIngress}, EgressRules: []networkingv1.NetworkPolicyEgressRule{dnsEgress}},
				Worker: &rayv1.NetworkPolicyRules{EgressRules: []networkingv1.NetworkPolicyEgressRule{dnsEgress}},
				// An entry replaces worker for its group: gpu does not get the DNS rule.
				WorkerGroups: []rayv1.WorkerGroupNetworkPolicyRules{{GroupName: "gpu", EgressRules: []networkingv1.NetworkPolicyEgressRule{gpuEgress}}},
			}
		},
		want: []*networkingv1.NetworkPolicy{
			{ObjectMeta: npMeta("rc-head", "headgroup"), Spec: networkingv1.NetworkPolicySpec{
				PodSelector: headSelector, PolicyTypes: both,
				Ingress: []networkingv1.NetworkPolicyIngressRule{rcIngress, monitoringIngress},
				Egress:  []networkingv1.NetworkPolicyEgressRule{rcEgress, dnsEgress},
			}},
			{ObjectMeta: npMeta("rc-workers-cpu", "cpu"), Spec: networkingv1.NetworkPolicySpec{
				PodSelector: workerSelector("cpu"), PolicyTypes: both,
				Ingress: []networkingv1.NetworkPolicyIngressRule{rcIngress},
				Egress:  []networkingv1.NetworkPolicyEgressRule{rcEgress, dnsEgress},
			}},
			{ObjectMeta: npMeta("rc-workers-gpu", "gpu"), Spec: networkingv1.NetworkPolicySpec{
				PodSelector: workerSelector("gpu"), PolicyTypes: both,
				Ingress: []networkingv1.NetworkPolicyIngressRule{rcIngress},
				Egress:  []networkingv1.NetworkPolicyEgressRule{rcEgress, gpuEgress},
			}},
		},
	}, {
		name: "DenyAllIngress: no egress type, egress rules ignored",
		mutate: func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs = c.Spec.WorkerGroupSpecs[:1]
			c.Spec.NetworkPolicy = &rayv1.NetworkPolicyConfig{Mode: rayv1.NetworkPolicyDenyAllIngress,
				Head: &rayv1.NetworkPolicyRules{EgressRules: []networkingv1.NetworkPolicyEgressRule{dnsEgress}}}
		},
		want: []*networkingv1.NetworkPolicy{
			{ObjectMeta: npMeta("rc-head", "headgroup"), Spec: networkingv1.NetworkPolicySpec{
				PodSelector: headSelector, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{rcIngress},
			}},
			{ObjectMeta: npMeta("rc-workers-cpu", "cpu"), Spec: networkingv1.NetworkPolicySpec{
				PodSelector: workerSelector("cpu"), PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{rcIngress},
			}},
		},
	}, {
		name: "DenyAllEgress: no ingress type, ingress rules ignored",
		mutate: func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs = nil
			c.Spec.NetworkPolicy = &rayv1.NetworkPolicyConfig{Mode: rayv1.NetworkPolicyDenyAllEgress,
				Head: &rayv1.NetworkPolicyRules{IngressRules: []networkingv1.NetworkPolicyIngressRule{monitoringIngress}}}
		},
		want: []*networkingv1.NetworkPolicy{
			{ObjectMeta: npMeta("rc-head", "headgroup"), Spec: networkingv1.NetworkPolicySpec{
				PodSelector: headSelector, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{rcEgress},
			}},
		},
	}, {
		name: "cluster of a K8sJobMode RayJob: its submitter pods reach the dashboard port",
		mutate: func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs = nil
			c.Labels = map[string]string{"ray.io/job-submission-mode": "K8sJobMode"}
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayJob", Name: "job", UID: "j", Controller: ptr.To(true)}}
			c.Spec.HeadGroupSpec.RayStartParams["dashboard-port"] = "8300"
			c.Spec.NetworkPolicy = &rayv1.NetworkPolicyConfig{Mode: rayv1.NetworkPolicyDenyAllIngress}
		},
		want: []*networkingv1.NetworkPolicy{
			{ObjectMeta: npMeta("rc-head", "headgroup"), Spec: networkingv1.NetworkPolicySpec{
				PodSelector: headSelector, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{rcIngress, {
					From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
						"ray.io/originated-from-cr-name": "job", "ray.io/originated-from-crd": "RayJob"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(8300))}},
				}},
			}},
		},
	}, {
		// Only K8sJobMode has a submitter pod outside the cluster.
		name: "cluster of an HTTPMode RayJob: no submitter rule",
		mutate: func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs = nil
			c.Labels = map[string]string{"ray.io/job-submission-mode": "HTTPMode"}
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayJob", Name: "job", UID: "j", Controller: ptr.To(true)}}
			c.Spec.NetworkPolicy = &rayv1.NetworkPolicyConfig{Mode: rayv1.NetworkPolicyDenyAllIngress}
		},
		want: []*networkingv1.NetworkPolicy{
			{ObjectMeta: npMeta("rc-head", "headgroup"), Spec: networkingv1.NetworkPolicySpec{
				PodSelector: headSelector, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{rcIngress},
			}},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := npCluster()
			tc.mutate(c)
			if diff := cmp.Diff(tc.want, NetworkPolicies(c)); diff != "" {
				t.Errorf("NetworkPolicies (-KubeRay v1.7 +Manta):\n%s", diff)
			}
		})
	}
}

// The API server fills in a port's protocol: an object read back is not a change, a rule that moved is.
func TestNetworkPolicyChanged(t *testing.T) {
	c := npCluster()
	c.Spec.NetworkPolicy = &rayv1.NetworkPolicyConfig{Head: &rayv1.NetworkPolicyRules{IngressRules: []networkingv1.NetworkPolicyIngressRule{monitoringIngress}}}
	desired := NetworkPolicies(c)[0]
	stored := desired.DeepCopy()
	stored.Spec.Ingress[1].Ports[0].Protocol = ptr.To(corev1.ProtocolTCP)
	stored.ResourceVersion = "7"
	if NetworkPolicyChanged(stored, desired) {
		t.Error("a stored policy with its defaulted protocol reads as changed")
	}
	if desired.Spec.Ingress[1].Ports[0].Protocol != nil {
		t.Error("NetworkPolicyChanged changed the desired object")
	}
	moved := stored.DeepCopy()
	moved.Spec.Ingress[1].Ports[0].Port = ptr.To(intstr.FromInt32(9090))
	if !NetworkPolicyChanged(moved, desired) {
		t.Error("a changed port reads as unchanged")
	}
	relabelled := stored.DeepCopy()
	relabelled.Labels["extra"] = "x"
	if !NetworkPolicyChanged(relabelled, desired) {
		t.Error("an extra label reads as unchanged (KubeRay writes the labels whole)")
	}
}
