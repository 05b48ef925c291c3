package clusterbuild

import (
	"maps"
	"slices"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// Ray's TLS settings (https://docs.ray.io/en/latest/ray-core/configure.html#tls-authentication) and where the
// certificate Secret is mounted, as KubeRay v1.7 sets them.
const (
	EnvRayUseTLS            = "RAY_USE_TLS"
	EnvRayTLSServerCert     = "RAY_TLS_SERVER_CERT"
	EnvRayTLSServerKey      = "RAY_TLS_SERVER_KEY"
	EnvRayTLSCACert         = "RAY_TLS_CA_CERT"
	TLSVolumeName           = "ray-tls"
	TLSMountPath            = "/etc/ray/tls"
	TLSWaitInitContainer    = "wait-for-tls-ip-san"
	certManagerGroup        = "cert-manager.io"
	tlsComponentLabel       = "app.kubernetes.io/component"
	leafCertDuration        = 2160 * time.Hour
	leafCertRenewBefore     = 360 * time.Hour
	caCertDuration          = 3650 * 24 * time.Hour
	caCertRenewBefore       = 30 * 24 * time.Hour
	caKeySize               = 4096
	tlsWaitContainerCPU     = "50m"
	tlsWaitContainerMemory  = "64Mi"
	tlsSecretKeyCert        = "tls.crt"
	tlsSecretKeyKey         = "tls.key"
	tlsSecretKeyCA          = "ca.crt"
	selfSignedIssuerPrefix  = "ray-selfsigned-issuer-"
	caCertificatePrefix     = "ray-ca-certificate-"
	caIssuerPrefix          = "ray-ca-issuer-"
	headCertificatePrefix   = "ray-head-cert-"
	workerCertificatePrefix = "ray-worker-cert-"
	headTLSSecretPrefix     = "ray-head-secret-"
	workerTLSSecretPrefix   = "ray-worker-secret-"
)

// TLSSecretKeys are the keys a certificate Secret must hold before a pod mounting it is made.
var TLSSecretKeys = []string{tlsSecretKeyCert, tlsSecretKeyKey, tlsSecretKeyCA}

// TLSEnabled says spec.tlsOptions.enabled is true: cert-manager issues the cluster a CA and head and worker
// certificates, and every Ray process talks gRPC over mutual TLS.
func TLSEnabled(c *rayv1.RayCluster) bool {
	return c.Spec.TLSOptions != nil && ptr.Deref(c.Spec.TLSOptions.Enabled, false)
}

// SelfSignedIssuerName is KubeRay's name of the Issuer that signs the cluster's CA.
func SelfSignedIssuerName(c *rayv1.RayCluster) string { return selfSignedIssuerPrefix + c.Name }

// CAIssuerName is KubeRay's name of the Issuer of the cluster's CA.
func CAIssuerName(c *rayv1.RayCluster) string { return caIssuerPrefix + c.Name }

// CACertificateName is KubeRay's name of the cluster's CA Certificate.
func CACertificateName(c *rayv1.RayCluster) string { return caCertificatePrefix + c.Name }

// CASecretName carries the first 8 characters of the cluster's UID, so a cluster made again under the same name
// gets a new CA rather than the old one's.
func CASecretName(c *rayv1.RayCluster) string {
	uid := string(c.UID)
	return c.Name + "-ca-secret-" + uid[:min(8, len(uid))]
}

// TLSCertificateName is the head's or the workers' Certificate.
func TLSCertificateName(c *rayv1.RayCluster, nodeType string) string {
	if nodeType == rayv1.NodeTypeHead {
		return headCertificatePrefix + c.Name
	}
	return workerCertificatePrefix + c.Name
}

// TLSSecretName is the Secret cert-manager writes the head's or the workers' certificate to.
func TLSSecretName(c *rayv1.RayCluster, nodeType string) string {
	if nodeType == rayv1.NodeTypeHead {
		return headTLSSecretPrefix + c.Name
	}
	return workerTLSSecretPrefix + c.Name
}

func tlsMeta(c *rayv1.RayCluster, name, component string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: c.Namespace,
		Labels: map[string]string{
			rayv1.LabelAppName: rayv1.AppNameValue, rayv1.LabelCreatedBy: rayv1.CreatedByValue,
			tlsComponentLabel: component, rayv1.LabelCluster: c.Name,
		},
		OwnerReferences: []metav1.OwnerReference{*OwnerReference(c)},
	}
}

func issuerRef(name string) cmmeta.IssuerReference {
	return cmmeta.IssuerReference{Name: name, Kind: cmv1.IssuerKind, Group: certManagerGroup}
}

// TLSIssuers are the self-signed Issuer that signs the cluster's CA, and the Issuer of that CA that signs the head
// and worker certificates. Their specs never change.
func TLSIssuers(c *rayv1.RayCluster) []*cmv1.Issuer {
	return []*cmv1.Issuer{
		{ObjectMeta: tlsMeta(c, SelfSignedIssuerName(c), "selfsigned-issuer"),
			Spec: cmv1.IssuerSpec{IssuerConfig: cmv1.IssuerConfig{SelfSigned: &cmv1.SelfSignedIssuer{}}}},
		{ObjectMeta: tlsMeta(c, CAIssuerName(c), "ca-issuer"),
			Spec: cmv1.IssuerSpec{IssuerConfig: cmv1.IssuerConfig{CA: &cmv1.CAIssuer{SecretName: CASecretName(c)}}}},
	}
}

// TLSCACertificate is the cluster's CA: RSA 4096, ten years, renewed 30 days before it ends. Its spec never
// changes (a new CA would invalidate every certificate it signed).
func TLSCACertificate(c *rayv1.RayCluster) *cmv1.Certificate {
	return &cmv1.Certificate{
		ObjectMeta: tlsMeta(c, CACertificateName(c), "ca-certificate"),
		Spec: cmv1.CertificateSpec{
			SecretName:  CASecretName(c),
			IsCA:        true,
			CommonName:  "ray-ca-" + c.Name,
			PrivateKey:  &cmv1.CertificatePrivateKey{Algorithm: cmv1.RSAKeyAlgorithm, Size: caKeySize},
			Duration:    &metav1.Duration{Duration: caCertDuration},
			RenewBefore: &metav1.Duration{Duration: caCertRenewBefore},
			Usages:      []cmv1.KeyUsage{cmv1.UsageCertSign, cmv1.UsageCRLSign},
			IssuerRef:   issuerRef(SelfSignedIssuerName(c)),
		},
	}
}

// TLSLeafCertificate is the head's or the workers' certificate, signed by the cluster's CA, for 90 days renewed 15
// days before: DNS names localhost and, for the head, its Service's FQDN; IP addresses 127.0.0.1 and the pod IPs of
// that node type (Ray's GCS dials workers by pod IP; workers reach the head by its Service's name, so worker IPs
// stay out of the head's certificate, and scaling does not reissue it).
func TLSLeafCertificate(c *rayv1.RayCluster, nodeType, clusterDomain string, podIPs []string) *cmv1.Certificate {
	dns := []string{"localhost"}
	component := "worker-certificate"
	if nodeType == rayv1.NodeTypeHead {
		dns = append(dns, HeadServiceFQDN(c, clusterDomain))
		component = "head-certificate"
	}
	slices.Sort(dns)
	return &cmv1.Certificate{
		ObjectMeta: tlsMeta(c, TLSCertificateName(c, nodeType), component),
		Spec: cmv1.CertificateSpec{
			SecretName:  TLSSecretName(c, nodeType),
			Duration:    &metav1.Duration{Duration: leafCertDuration},
			RenewBefore: &metav1.Duration{Duration: leafCertRenewBefore},
			DNSNames:    slices.Compact(dns),
			IPAddresses: certIPs(podIPs),
			Usages:      []cmv1.KeyUsage{cmv1.UsageDigitalSignature, cmv1.UsageKeyEncipherment, cmv1.UsageServerAuth, cmv1.UsageClientAuth},
			IssuerRef:   issuerRef(CAIssuerName(c)),
		},
	}
}

// certIPs are the pod IPs sorted, without duplicates or blanks, with 127.0.0.1 for the processes of a pod that
// dial each other.
func certIPs(podIPs []string) []string {
	out := []string{"127.0.0.1"}
	for _, ip := range podIPs {
		if ip != "" {
			out = append(out, ip)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TLSLeafChanged says whether a stored leaf Certificate must be rewritten: its labels, or its DNS names or IP
// addresses as sets, differ from desired. (Other fields cert-manager may normalise are left as stored, as KubeRay
// leaves them.)
func TLSLeafChanged(existing, desired *cmv1.Certificate) bool {
	sameSet := func(a, b []string) bool {
		x, y := slices.Clone(a), slices.Clone(b)
		slices.Sort(x)
		slices.Sort(y)
		return slices.Equal(slices.Compact(x), slices.Compact(y))
	}
	return !maps.Equal(existing.Labels, desired.Labels) ||
		!sameSet(existing.Spec.DNSNames, desired.Spec.DNSNames) || !sameSet(existing.Spec.IPAddresses, desired.Spec.IPAddresses)
}

// CertificateReady says cert-manager has issued the certificate for its current spec: Ready is True for the
// generation the spec is at (a Ready of the previous SANs does not count).
func CertificateReady(cert *cmv1.Certificate) bool {
	for _, cond := range cert.Status.Conditions {
		if cond.Type == cmv1.CertificateConditionReady {
			return cond.Status == cmmeta.ConditionTrue && cond.ObservedGeneration == cert.Generation
		}
	}
	return false
}

// setContainerTLS gives a container Ray's TLS settings and the certificate mount, where it has none of its own.
func setContainerTLS(ctr *corev1.Container) {
	for _, e := range []corev1.EnvVar{
		{Name: EnvRayUseTLS, Value: "1"},
		{Name: EnvRayTLSServerCert, Value: TLSMountPath + "/" + tlsSecretKeyCert},
		{Name: EnvRayTLSServerKey, Value: TLSMountPath + "/" + tlsSecretKeyKey},
		{Name: EnvRayTLSCACert, Value: TLSMountPath + "/" + tlsSecretKeyCA},
	} {
		if !slices.ContainsFunc(ctr.Env, func(x corev1.EnvVar) bool { return x.Name == e.Name }) {
			ctr.Env = append(ctr.Env, e)
		}
	}
	if !slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == TLSVolumeName || m.MountPath == TLSMountPath }) {
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: TLSVolumeName, MountPath: TLSMountPath, ReadOnly: true})
	}
}

// tlsWaitScript waits until the mounted certificate names the pod's IP: cert-manager adds it only once the pod has
// one, and a Ray process that dials or is dialled by that IP before then fails its handshake (GCS would mark the
// worker dead). It is Manta's own script, with the behaviour of KubeRay's (openssl from the Ray image, a 5 s poll).
const tlsWaitScript = `ip="${POD_IP:-$(hostname -i 2>/dev/null | cut -d' ' -f1)}"
command -v openssl >/dev/null 2>&1 || { echo "no openssl in the image: cannot check the certificate for ${ip}" >&2; exit 1; }
until openssl x509 -noout -text -in "` + TLSMountPath + `/` + tlsSecretKeyCert + `" 2>/dev/null | grep -qE "IP Address:${ip}([^0-9.]|\$)"; do
  echo "the certificate does not name ${ip} yet; checking again in 5s"
  sleep 5
done
echo "the certificate names ${ip}"`

// configureTLS mounts the node type's certificate Secret and gives the Ray container and wait-gcs-ready Ray's TLS
// settings (the user's own init containers are theirs), then puts the IP wait first among the init containers.
func configureTLS(c *rayv1.RayCluster, pod *corev1.Pod, nodeType string) {
	if !TLSEnabled(c) {
		return
	}
	spec := &pod.Spec
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == TLSVolumeName }) {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: TLSVolumeName,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: TLSSecretName(c, nodeType)}}})
	}
	ray := &spec.Containers[RayContainerIndex]
	setContainerTLS(ray)
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == WaitGCSInitContainerName {
			setContainerTLS(&spec.InitContainers[i])
		}
	}
	if slices.ContainsFunc(spec.InitContainers, func(x corev1.Container) bool { return x.Name == TLSWaitInitContainer }) {
		return
	}
	q := resource.MustParse
	wait := corev1.Container{
		Name:            TLSWaitInitContainer,
		Image:           ray.Image,
		ImagePullPolicy: ray.ImagePullPolicy,
		Command:         []string{"sh", "-c"},
		Args:            []string{tlsWaitScript},
		SecurityContext: ray.SecurityContext.DeepCopy(),
		Env:             []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
		VolumeMounts:    []corev1.VolumeMount{{Name: TLSVolumeName, MountPath: TLSMountPath, ReadOnly: true}},
		Resources: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{corev1.ResourceCPU: q(tlsWaitContainerCPU), corev1.ResourceMemory: q(tlsWaitContainerMemory)},
			Requests: corev1.ResourceList{corev1.ResourceCPU: q(tlsWaitContainerCPU), corev1.ResourceMemory: q(tlsWaitContainerMemory)},
		},
	}
	spec.InitContainers = append([]corev1.Container{wait}, spec.InitContainers...)
}
