package raycluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// Event reasons of tlsOptions, KubeRay's.
const (
	EventMTLSFailedToReconcile   = "MTLSFailedToReconcile"
	EventMTLSCertsNotReady       = "MTLSCertsNotReady"
	EventMTLSCertificatesUpdated = "MTLSCertificatesUpdated"
)

// tlsPoll is when a cluster whose pods wait for their certificates is looked at again, in case the Certificates'
// status changes are not watched (cert-manager installed after the operator started).
const tlsPoll = 5 * time.Second

// errTLSNotReady: pod creates wait until cert-manager has issued the head and worker certificates.
var errTLSNotReady = errors.New("pod creates wait for the mTLS certificates")

// errNoCertManager: tlsOptions without cert-manager's CRDs.
var errNoCertManager = errors.New("tlsOptions requires cert-manager, but cert-manager is not installed")

// reconcileTLS makes the cluster's cert-manager PKI what KubeRay v1.7 makes (two Issuers, a CA Certificate, head
// and worker Certificates whose IP addresses follow the pods'), gives each issued Secret an owner reference to its
// Certificate so it is collected with it, and sets run.tlsWait while the head or worker certificate is not issued
// for its current spec, so that no pod is created that would mount a missing or stale certificate. An object of
// that name the cluster does not control is never used: another Issuer would sign the cluster's certificates.
func (r *Reconciler) reconcileTLS(ctx context.Context, run *run) error {
	c := run.c
	var wrote bool
	err := r.ensureTLSObjects(ctx, run, &wrote)
	if err != nil {
		run.tlsWait = err
		if meta.IsNoMatchError(err) {
			err = errNoCertManager
		}
		msg := "failed to reconcile the mTLS PKI: " + err.Error()
		// The head waits for its certificate: ReplicaFailure says why, and the event is not repeated while it does.
		run.obs.failure = &failure{rayv1.FailedCreateHeadPod, msg}
		if !conditionMessageIs(c, string(rayv1.RayClusterReplicaFailure), msg) {
			run.Eventf(corev1.EventTypeWarning, EventMTLSFailedToReconcile, "Reconcile", "%s", msg)
		}
		run.Requeue(tlsPoll)
		return err
	}
	ready, why, err := r.tlsReady(ctx, c)
	if err != nil {
		run.tlsWait = err
		return err
	}
	if !ready {
		run.tlsWait = fmt.Errorf("%w: %s", errTLSNotReady, why)
		if wrote {
			run.Eventf(corev1.EventTypeNormal, EventMTLSCertsNotReady, "Reconcile", "waiting for cert-manager to issue the mTLS certificates")
		}
		run.Requeue(tlsPoll)
	}
	return nil
}

func (r *Reconciler) ensureTLSObjects(ctx context.Context, run *run, wrote *bool) error {
	c := run.c
	for _, iss := range clusterbuild.TLSIssuers(c) {
		if _, err := ensureTLSObject(ctx, r, run, cmv1.IssuerKind, iss, func() *cmv1.Issuer { return &cmv1.Issuer{} }, nil, wrote); err != nil {
			return err
		}
	}
	if _, err := ensureTLSObject(ctx, r, run, cmv1.CertificateKind, clusterbuild.TLSCACertificate(c), newCertificate, nil, wrote); err != nil {
		return err
	}
	ips := map[string][]string{}
	for i := range run.obs.pods {
		p := &run.obs.pods[i]
		if p.Status.PodIP != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			ips[p.Labels[rayv1.LabelNodeType]] = append(ips[p.Labels[rayv1.LabelNodeType]], p.Status.PodIP)
		}
	}
	var errs []error
	for _, nodeType := range []string{rayv1.NodeTypeHead, rayv1.NodeTypeWorker} {
		desired := clusterbuild.TLSLeafCertificate(c, nodeType, r.opts.ClusterDomain, ips[nodeType])
		if cert, err := ensureTLSObject(ctx, r, run, cmv1.CertificateKind, desired, newCertificate, syncLeaf, wrote); err != nil {
			errs = append(errs, err)
		} else if err := r.ownSecret(ctx, cert); err != nil {
			errs = append(errs, err)
		}
	}
	ca := &cmv1.Certificate{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: clusterbuild.CACertificateName(c)}, ca); err == nil {
		errs = append(errs, r.ownSecret(ctx, ca))
	}
	return errors.Join(errs...)
}

func newCertificate() *cmv1.Certificate { return &cmv1.Certificate{} }

// syncLeaf brings a head or worker Certificate back to its names and IP addresses.
func syncLeaf(got, desired *cmv1.Certificate) (*cmv1.Certificate, bool, bool) {
	if !clusterbuild.TLSLeafChanged(got, desired) {
		return got, false, false
	}
	u := got.DeepCopy()
	u.Labels, u.Spec = desired.Labels, *desired.Spec.DeepCopy()
	return u, true, false
}

// ensureTLSObject creates desired when absent; an existing one must be the cluster's, and is brought back by sync
// (nil: the object is never updated, as KubeRay never updates its Issuers and CA). It returns the object as stored.
// Its writes fail the reconcile, whose ReplicaFailure condition says why; only an update is an event of its own.
func ensureTLSObject[T client.Object](ctx context.Context, r *Reconciler, run *run, kind string, desired T, newObj func() T, sync func(existing, desired T) (T, bool, bool), wrote *bool) (T, error) {
	c := run.c
	k := &reconcile.Owned[T]{Kind: kind, New: newObj, Sync: sync, OnExists: reconcile.ExistsPending}
	w := reconcile.Writer{Client: r.client, Reader: r.client, Owner: c}
	got, op, err := reconcile.EnsureOwned(ctx, w, k, desired, func(op reconcile.Op, o T, err error) {
		if op == reconcile.Updated && err == nil {
			run.Eventf(corev1.EventTypeNormal, EventMTLSCertificatesUpdated, "Update", "updated %s %s: its names and IP addresses follow the pods", kind, o.GetName())
		}
	})
	switch {
	case err != nil:
		return got, err
	case op == reconcile.Foreign:
		var none T
		return none, &errForeign{kind, c.Namespace, desired.GetName()}
	case op != reconcile.Unchanged:
		*wrote = true
	}
	return got, nil
}

// ownSecret makes the Certificate an owner of the Secret cert-manager issued it into, so the Secret goes with it
// (the Certificate goes with the cluster). A Secret not issued yet is left for a later reconcile.
func (r *Reconciler) ownSecret(ctx context.Context, cert *cmv1.Certificate) error {
	if cert.UID == "" {
		return nil // just created: not issued yet
	}
	sec := &corev1.Secret{}
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: cert.Namespace, Name: cert.Spec.SecretName}, sec)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read Secret %s: %w", cert.Spec.SecretName, err)
	}
	if slices.ContainsFunc(sec.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == cert.UID }) {
		return nil
	}
	sec.OwnerReferences = append(sec.OwnerReferences, metav1.OwnerReference{
		APIVersion: cmv1.SchemeGroupVersion.String(), Kind: cmv1.CertificateKind, Name: cert.Name, UID: cert.UID,
	})
	if err := r.client.Update(ctx, sec); err != nil {
		return fmt.Errorf("update Secret %s: %w", sec.Name, err)
	}
	return nil
}

// tlsReady says whether the head and worker certificates are issued for their current spec and their Secrets hold
// a certificate, key and CA; why names the first that is not.
func (r *Reconciler) tlsReady(ctx context.Context, c *rayv1.RayCluster) (bool, string, error) {
	for _, nodeType := range []string{rayv1.NodeTypeHead, rayv1.NodeTypeWorker} {
		cert := &cmv1.Certificate{}
		name := clusterbuild.TLSCertificateName(c, nodeType)
		if err := r.client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, cert); err != nil {
			if apierrors.IsNotFound(err) {
				return false, "Certificate " + name + " is not in the cache yet", nil
			}
			return false, "", fmt.Errorf("read Certificate %s: %w", name, err)
		}
		if !clusterbuild.CertificateReady(cert) {
			return false, fmt.Sprintf("Certificate %s is not ready at generation %d", name, cert.Generation), nil
		}
		sec := &corev1.Secret{}
		secName := clusterbuild.TLSSecretName(c, nodeType)
		if err := r.reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: secName}, sec); err != nil {
			if apierrors.IsNotFound(err) {
				return false, "Secret " + secName + " does not exist yet", nil
			}
			return false, "", fmt.Errorf("read Secret %s: %w", secName, err)
		}
		for _, k := range clusterbuild.TLSSecretKeys {
			if _, ok := sec.Data[k]; !ok {
				return false, fmt.Sprintf("Secret %s has no %s yet", secName, k), nil
			}
		}
	}
	return true, "", nil
}
