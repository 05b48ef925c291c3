package envtest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// tlsOptions against a real kube-apiserver serving cert-manager's CRDs, the test playing cert-manager (it marks a
// Certificate Ready for its generation and writes its Secret): the controller creates the PKI KubeRay v1.7 creates,
// holds back every pod until the head and worker certificates are issued, adds each pod's IP to its certificate
// (so the certificate is reissued before more pods come), makes the issued Secrets owned by their Certificates,
// and gives the pods Ray's TLS settings.
func testTLS(t *testing.T, e *env) {
	ns := e.Namespace(t)
	ctx := context.Background()
	rc := testutil.MakeRayCluster(ns, "rc").Workers("small", 1).Obj()
	rc.Spec.TLSOptions = &rayv1.TLSOptions{Enabled: ptr.To(true)}
	e.Create(t, rc)
	c := testutil.Get(t, e.Env, rc)

	getCert := func(nodeType string) *cmv1.Certificate {
		t.Helper()
		cert := &cmv1.Certificate{}
		if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: clusterbuild.TLSCertificateName(c, nodeType)}, cert); err != nil {
			t.Fatal(err)
		}
		return cert
	}
	e.Eventually(t, "PKI created", func() (bool, string) {
		for _, want := range clusterbuild.TLSIssuers(c) {
			got := &cmv1.Issuer{}
			if err := e.cl.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
				return false, err.Error()
			}
			if !metav1.IsControlledBy(got, c) || !cmp.Equal(want.Spec, got.Spec) || !cmp.Equal(want.Labels, got.Labels) {
				return false, "Issuer " + want.Name + ": " + cmp.Diff(want.Spec, got.Spec)
			}
		}
		for _, want := range []*cmv1.Certificate{clusterbuild.TLSCACertificate(c),
			clusterbuild.TLSLeafCertificate(c, rayv1.NodeTypeHead, "", nil), clusterbuild.TLSLeafCertificate(c, rayv1.NodeTypeWorker, "", nil)} {
			got := &cmv1.Certificate{}
			if err := e.cl.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
				return false, err.Error()
			}
			if !metav1.IsControlledBy(got, c) || !cmp.Equal(want.Spec, got.Spec) || !cmp.Equal(want.Labels, got.Labels) {
				return false, "Certificate " + want.Name + ": " + cmp.Diff(want.Spec, got.Spec)
			}
		}
		return true, ""
	})
	waitEvent(t, e, ns, raycluster.EventMTLSCertsNotReady)
	// Once the controller has reported on this generation it has met the wait: no pod without certificates.
	e.waitObserved(t, rc)
	if pods := e.pods(t, rc); len(pods) != 0 {
		t.Fatalf("%d pods before the certificates were issued", len(pods))
	}

	// cert-manager's part: the Certificate is Ready for its generation, its Secret holds a certificate, key and CA.
	issue := func(nodeType string) {
		t.Helper()
		cert := getCert(nodeType)
		cert.Status.Conditions = []cmv1.CertificateCondition{{Type: cmv1.CertificateConditionReady, Status: cmmeta.ConditionTrue, ObservedGeneration: cert.Generation}}
		if err := e.cl.Status().Update(ctx, cert); err != nil {
			t.Fatal(err)
		}
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cert.Spec.SecretName},
			Data: map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k"), "ca.crt": []byte("ca")}}
		if err := e.cl.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	issue(rayv1.NodeTypeHead)
	issue(rayv1.NodeTypeWorker)

	// Issued: the head and the worker come, each with its node type's certificate and Ray's TLS settings.
	for _, p := range e.waitPods(t, rc, 2) {
		nodeType := p.Labels[rayv1.LabelNodeType]
		if i := slices.IndexFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == clusterbuild.TLSVolumeName }); i < 0 ||
			p.Spec.Volumes[i].Secret == nil || p.Spec.Volumes[i].Secret.SecretName != clusterbuild.TLSSecretName(c, nodeType) {
			t.Errorf("%s volumes %+v", nodeType, p.Spec.Volumes)
		}
		if !slices.ContainsFunc(p.Spec.Containers[0].Env, func(v corev1.EnvVar) bool { return v.Name == clusterbuild.EnvRayUseTLS && v.Value == "1" }) ||
			p.Spec.InitContainers[0].Name != clusterbuild.TLSWaitInitContainer {
			t.Errorf("%s pod without Ray's TLS settings: env %v, init containers %d", nodeType, p.Spec.Containers[0].Env, len(p.Spec.InitContainers))
		}
	}

	// The pods get IPs: each certificate names its own node type's, not the other's, and moves to a new
	// generation that cert-manager has yet to issue.
	e.setReady(t, rc)
	ips := map[string]string{}
	for _, p := range e.pods(t, rc) {
		ips[p.Labels[rayv1.LabelNodeType]] = p.Status.PodIP
	}
	e.Eventually(t, "pod IPs in their certificates", func() (bool, string) {
		hc, wc := getCert(rayv1.NodeTypeHead), getCert(rayv1.NodeTypeWorker)
		ok := slices.Contains(hc.Spec.IPAddresses, ips[rayv1.NodeTypeHead]) && !slices.Contains(hc.Spec.IPAddresses, ips[rayv1.NodeTypeWorker]) &&
			slices.Contains(wc.Spec.IPAddresses, ips[rayv1.NodeTypeWorker]) && !slices.Contains(wc.Spec.IPAddresses, ips[rayv1.NodeTypeHead])
		return ok, fmt.Sprintf("pods %v: head cert %v, worker cert %v", ips, hc.Spec.IPAddresses, wc.Spec.IPAddresses)
	})
	waitEvent(t, e, ns, raycluster.EventMTLSCertificatesUpdated)

	// A new worker waits until both certificates are issued at their new generations (as KubeRay checks both).
	testutil.Update(t, e.Env, rc, func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](2) })
	e.waitObserved(t, rc)
	if pods := e.pods(t, rc); len(pods) != 2 {
		t.Fatalf("%d pods while the worker certificate is being reissued, want 2", len(pods))
	}
	issue(rayv1.NodeTypeHead)
	issue(rayv1.NodeTypeWorker)
	e.waitPods(t, rc, 3)

	// The issued Secrets go with their Certificates.
	e.Eventually(t, "Secrets owned by their Certificates", func() (bool, string) {
		for _, nodeType := range []string{rayv1.NodeTypeHead, rayv1.NodeTypeWorker} {
			cert := getCert(nodeType)
			sec := &corev1.Secret{}
			if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: cert.Spec.SecretName}, sec); err != nil {
				return false, err.Error()
			}
			if !slices.ContainsFunc(sec.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == cert.UID && o.Kind == "Certificate" }) {
				return false, fmt.Sprintf("Secret %s owners %+v", sec.Name, sec.OwnerReferences)
			}
		}
		return true, ""
	})
}
