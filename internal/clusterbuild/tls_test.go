package clusterbuild

import (
	"slices"
	"testing"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// The expected objects are written out by hand from KubeRay v1.7.0's raycluster_mtls_controller.go, utils (names)
// and common/pod.go (configureTLS, SetContainerTLSConfig), not computed with the builder.

func tlsCluster() *rayv1.RayCluster {
	c := cluster()
	c.UID = "0123456789abcdef"
	c.Spec.TLSOptions = &rayv1.TLSOptions{Enabled: ptr.To(true)}
	return c
}

func tlsObjectMeta(name, component string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: "ns",
		Labels: map[string]string{"app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator",
			"app.kubernetes.io/component": component, "ray.io/cluster": "rc"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "rc", UID: "0123456789abcdef",
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
	}
}

func TestTLSObjectsAsKubeRay17(t *testing.T) {
	c := tlsCluster()
	wantIssuers := []*cmv1.Issuer{
		{ObjectMeta: tlsObjectMeta("ray-selfsigned-issuer-rc", "selfsigned-issuer"),
			Spec: cmv1.IssuerSpec{IssuerConfig: cmv1.IssuerConfig{SelfSigned: &cmv1.SelfSignedIssuer{}}}},
		{ObjectMeta: tlsObjectMeta("ray-ca-issuer-rc", "ca-issuer"),
			Spec: cmv1.IssuerSpec{IssuerConfig: cmv1.IssuerConfig{CA: &cmv1.CAIssuer{SecretName: "rc-ca-secret-01234567"}}}},
	}
	if diff := cmp.Diff(wantIssuers, TLSIssuers(c)); diff != "" {
		t.Errorf("Issuers (-KubeRay v1.7 +Manta):\n%s", diff)
	}
	wantCA := &cmv1.Certificate{
		ObjectMeta: tlsObjectMeta("ray-ca-certificate-rc", "ca-certificate"),
		Spec: cmv1.CertificateSpec{
			SecretName: "rc-ca-secret-01234567", IsCA: true, CommonName: "ray-ca-rc",
			PrivateKey:  &cmv1.CertificatePrivateKey{Algorithm: cmv1.RSAKeyAlgorithm, Size: 4096},
			Duration:    &metav1.Duration{Duration: 87600 * time.Hour},
			RenewBefore: &metav1.Duration{Duration: 720 * time.Hour},
			Usages:      []cmv1.KeyUsage{cmv1.UsageCertSign, cmv1.UsageCRLSign},
			IssuerRef:   cmmeta.IssuerReference{Name: "ray-selfsigned-issuer-rc", Kind: "Issuer", Group: "cert-manager.io"},
		},
	}
	if diff := cmp.Diff(wantCA, TLSCACertificate(c)); diff != "" {
		t.Errorf("CA Certificate (-KubeRay v1.7 +Manta):\n%s", diff)
	}
	leaf := func(name, component, secret string, dns, ips []string) *cmv1.Certificate {
		return &cmv1.Certificate{
			ObjectMeta: tlsObjectMeta(name, component),
			Spec: cmv1.CertificateSpec{
				SecretName: secret, Duration: &metav1.Duration{Duration: 2160 * time.Hour}, RenewBefore: &metav1.Duration{Duration: 360 * time.Hour},
				DNSNames: dns, IPAddresses: ips,
				Usages:    []cmv1.KeyUsage{cmv1.UsageDigitalSignature, cmv1.UsageKeyEncipherment, cmv1.UsageServerAuth, cmv1.UsageClientAuth},
				IssuerRef: cmmeta.IssuerReference{Name: "ray-ca-issuer-rc", Kind: "Issuer", Group: "cert-manager.io"},
			},
		}
	}
	// Pod IPs sorted and de-duplicated, blanks dropped, 127.0.0.1 always there.
	if diff := cmp.Diff(leaf("ray-head-cert-rc", "head-certificate", "ray-head-secret-rc",
		[]string{"localhost", "rc-head-svc.ns.svc.example.org"}, []string{"10.0.0.9", "127.0.0.1"}),
		TLSLeafCertificate(c, rayv1.NodeTypeHead, "example.org", []string{"10.0.0.9", "", "10.0.0.9"})); diff != "" {
		t.Errorf("head Certificate (-KubeRay v1.7 +Manta):\n%s", diff)
	}
	if diff := cmp.Diff(leaf("ray-worker-cert-rc", "worker-certificate", "ray-worker-secret-rc",
		[]string{"localhost"}, []string{"10.0.1.2", "10.0.1.3", "127.0.0.1"}),
		TLSLeafCertificate(c, rayv1.NodeTypeWorker, "", []string{"10.0.1.3", "10.0.1.2"})); diff != "" {
		t.Errorf("worker Certificate (-KubeRay v1.7 +Manta):\n%s", diff)
	}
}

// A leaf is rewritten when its SANs differ as sets or its labels moved, not for their order.
func TestTLSLeafChanged(t *testing.T) {
	c := tlsCluster()
	want := TLSLeafCertificate(c, rayv1.NodeTypeWorker, "", []string{"10.0.1.2", "10.0.1.3"})
	stored := want.DeepCopy()
	slices.Reverse(stored.Spec.IPAddresses)
	if TLSLeafChanged(stored, want) {
		t.Error("reordered IPs read as a change")
	}
	grown := TLSLeafCertificate(c, rayv1.NodeTypeWorker, "", []string{"10.0.1.2", "10.0.1.3", "10.0.1.4"})
	if !TLSLeafChanged(stored, grown) {
		t.Error("a new worker IP reads as no change")
	}
	relabelled := stored.DeepCopy()
	delete(relabelled.Labels, "app.kubernetes.io/component")
	if !TLSLeafChanged(relabelled, want) {
		t.Error("a dropped label reads as no change")
	}
}

func TestCertificateReady(t *testing.T) {
	cert := &cmv1.Certificate{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	ready := func(status cmmeta.ConditionStatus, gen int64) []cmv1.CertificateCondition {
		return []cmv1.CertificateCondition{{Type: cmv1.CertificateConditionReady, Status: status, ObservedGeneration: gen}}
	}
	for _, tc := range []struct {
		conds []cmv1.CertificateCondition
		want  bool
	}{{nil, false}, {ready(cmmeta.ConditionTrue, 2), true}, {ready(cmmeta.ConditionTrue, 1), false}, {ready(cmmeta.ConditionFalse, 2), false}} {
		cert.Status.Conditions = tc.conds
		if got := CertificateReady(cert); got != tc.want {
			t.Errorf("%+v: ready %v, want %v", tc.conds, got, tc.want)
		}
	}
}

// Every Ray process gets Ray's TLS settings and the node type's certificate: the Ray container, the autoscaler,
// wait-gcs-ready (not the user's init containers), after the IP wait, which runs first.
func TestTLSPodsAsKubeRay17(t *testing.T) {
	c := tlsCluster()
	c.Spec.EnableInTreeAutoscaling = ptr.To(true)
	c.Spec.AutoscalerOptions = &rayv1.AutoscalerOptions{Env: []corev1.EnvVar{{Name: "USER", Value: "x"}}}
	c.Spec.WorkerGroupSpecs[0].Template.Spec.InitContainers = []corev1.Container{{Name: "user-init", Image: "busybox"}}
	c.Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
	tlsEnv := []corev1.EnvVar{
		{Name: "RAY_USE_TLS", Value: "1"},
		{Name: "RAY_TLS_SERVER_CERT", Value: "/etc/ray/tls/tls.crt"},
		{Name: "RAY_TLS_SERVER_KEY", Value: "/etc/ray/tls/tls.key"},
		{Name: "RAY_TLS_CA_CERT", Value: "/etc/ray/tls/ca.crt"},
	}
	mount := corev1.VolumeMount{Name: "ray-tls", MountPath: "/etc/ray/tls", ReadOnly: true}
	q := resource.MustParse
	waitFor := func(image string, pull corev1.PullPolicy) corev1.Container {
		return corev1.Container{
			Name: "wait-for-tls-ip-san", Image: image, ImagePullPolicy: pull, Command: []string{"sh", "-c"},
			Env:          []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
			VolumeMounts: []corev1.VolumeMount{mount},
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("64Mi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("64Mi")},
			},
		}
	}
	hasAll := func(t *testing.T, what string, ctr corev1.Container) {
		t.Helper()
		var got []corev1.EnvVar
		for _, e := range ctr.Env {
			if slices.ContainsFunc(tlsEnv, func(x corev1.EnvVar) bool { return x.Name == e.Name }) {
				got = append(got, e)
			}
		}
		if diff := cmp.Diff(tlsEnv, got); diff != "" {
			t.Errorf("%s TLS env (-KubeRay v1.7 +Manta):\n%s", what, diff)
		}
		if n := slices.IndexFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "ray-tls" }); n < 0 || !cmp.Equal(ctr.VolumeMounts[n], mount) {
			t.Errorf("%s mounts %+v", what, ctr.VolumeMounts)
		}
	}
	checkInit := func(t *testing.T, pod *corev1.Pod, image string, pull corev1.PullPolicy) {
		t.Helper()
		got := pod.Spec.InitContainers[0]
		if len(got.Args) != 1 || !slices.Equal(got.Command, []string{"sh", "-c"}) {
			t.Fatalf("first init container %+v", got)
		}
		got.Args = nil // Manta's own script: checked by TestTLSWaitScript
		if diff := cmp.Diff(waitFor(image, pull), got); diff != "" {
			t.Errorf("IP wait (-KubeRay v1.7 +Manta):\n%s", diff)
		}
	}

	head := HeadPod(c, PodOptions{})
	if diff := cmp.Diff([]corev1.Volume{{Name: "ray-tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "ray-head-secret-rc"}}}},
		filterVolumes(head.Spec.Volumes, "ray-tls")); diff != "" {
		t.Errorf("head TLS volume (-KubeRay v1.7 +Manta):\n%s", diff)
	}
	hasAll(t, "head Ray container", head.Spec.Containers[0])
	as := head.Spec.Containers[slices.IndexFunc(head.Spec.Containers, func(x corev1.Container) bool { return x.Name == AutoscalerContainerName })]
	hasAll(t, "autoscaler", as)
	// KubeRay sets the TLS env before it merges autoscalerOptions.env.
	if i, j := slices.IndexFunc(as.Env, func(e corev1.EnvVar) bool { return e.Name == "RAY_TLS_CA_CERT" }), slices.IndexFunc(as.Env, func(e corev1.EnvVar) bool { return e.Name == "USER" }); i > j {
		t.Errorf("autoscaler env order: %v", as.Env)
	}
	checkInit(t, head, "rayproject/ray:2.52.0", "")

	w := WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{})
	if diff := cmp.Diff([]corev1.Volume{{Name: "ray-tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "ray-worker-secret-rc"}}}},
		filterVolumes(w.Spec.Volumes, "ray-tls")); diff != "" {
		t.Errorf("worker TLS volume (-KubeRay v1.7 +Manta):\n%s", diff)
	}
	hasAll(t, "worker Ray container", w.Spec.Containers[0])
	checkInit(t, w, "rayproject/ray:2.52.0", corev1.PullAlways)
	var names []string
	for _, ic := range w.Spec.InitContainers {
		names = append(names, ic.Name)
		switch ic.Name {
		case WaitGCSInitContainerName:
			hasAll(t, "wait-gcs-ready", ic)
		case "user-init":
			if len(ic.VolumeMounts) != 0 || slices.ContainsFunc(ic.Env, func(e corev1.EnvVar) bool { return e.Name == "RAY_USE_TLS" }) {
				t.Errorf("the user's init container got TLS settings: %+v", ic)
			}
		}
	}
	if !slices.Equal(names, []string{"wait-for-tls-ip-san", "user-init", "wait-gcs-ready"}) {
		t.Errorf("init containers %v", names)
	}

	// tlsOptions.enabled false: nothing.
	c.Spec.TLSOptions.Enabled = ptr.To(false)
	for _, p := range []*corev1.Pod{HeadPod(c, PodOptions{}), WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{})} {
		if len(filterVolumes(p.Spec.Volumes, "ray-tls")) > 0 || slices.ContainsFunc(p.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "RAY_USE_TLS" }) {
			t.Errorf("TLS settings with tlsOptions off: %s", p.GenerateName)
		}
	}
}

func filterVolumes(vs []corev1.Volume, name string) []corev1.Volume {
	var out []corev1.Volume
	for _, v := range vs {
		if v.Name == name {
			out = append(out, v)
		}
	}
	return out
}
