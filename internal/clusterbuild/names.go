package clusterbuild

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// maxNameLen is the limit of a DNS-1123 label (Service names, label values).
const maxNameLen = 63

// generatedSuffixLen is what the API server appends to a generateName.
const generatedSuffixLen = 5

// fitName returns name unchanged when it fits max characters, else a prefix of it plus a short hash of the whole
// name, so two long names that share a prefix still differ.
func fitName(name string, max int) string {
	if len(name) <= max {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:])[:8]
	prefix := strings.TrimRight(name[:max-len(h)-1], "-.")
	return prefix + "-" + h
}

// sanitize lower-cases s and replaces what a DNS-1123 label cannot hold with '-'.
func sanitize(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-")
}

// generateNamePrefix makes a generateName that leaves room for the API server's random suffix.
func generateNamePrefix(base string) string {
	return fitName(sanitize(base), maxNameLen-generatedSuffixLen-1) + "-"
}

// HeadPodGenerateName is the generateName of the head pod: <cluster>-head-.
func HeadPodGenerateName(c *rayv1.RayCluster) string { return generateNamePrefix(c.Name + "-head") }

// WorkerPodGenerateName is the generateName of a worker pod: <cluster>-<group>-worker-.
func WorkerPodGenerateName(c *rayv1.RayCluster, group string) string {
	return generateNamePrefix(c.Name + "-" + group + "-worker")
}

// HeadServiceName is <cluster>-head-svc, or the name the user gave headGroupSpec.headService.
func HeadServiceName(c *rayv1.RayCluster) string {
	if hs := c.Spec.HeadGroupSpec.HeadService; hs != nil && hs.Name != "" {
		return hs.Name
	}
	return fitName(c.Name+"-head-svc", maxNameLen)
}

// ServeServiceName is <cluster>-serve-svc.
func ServeServiceName(c *rayv1.RayCluster) string { return fitName(c.Name+"-serve-svc", maxNameLen) }

// HeadlessWorkerServiceName is <cluster>-headless, the Service multi-host worker groups resolve each other by.
func HeadlessWorkerServiceName(c *rayv1.RayCluster) string {
	return fitName(c.Name+"-headless", maxNameLen)
}

// AutoscalerServiceAccountName is the head template's serviceAccountName, or the cluster's name (KubeRay's choice:
// the autoscaler runs as the head pod's ServiceAccount, and users who name none find it under the cluster's name).
func AutoscalerServiceAccountName(c *rayv1.RayCluster) string {
	if sa := c.Spec.HeadGroupSpec.Template.Spec.ServiceAccountName; sa != "" {
		return sa
	}
	return fitName(c.Name, maxNameLen)
}

// AutoscalerServiceAccountManaged says the operator chose the autoscaler's ServiceAccount (the head template names
// none), so an existing one of that name must be the operator's: one the user names is theirs to bring.
func AutoscalerServiceAccountManaged(c *rayv1.RayCluster) bool {
	return c.Spec.HeadGroupSpec.Template.Spec.ServiceAccountName == ""
}

// AutoscalerRoleName names the Role and RoleBinding of the autoscaler: <cluster>-autoscaler. KubeRay names them
// after the cluster alone, which collides with any Role a namespace already has under that name ("admin", "ci");
// nothing reads the name but the operator (the autoscaler needs only its ServiceAccount), so the suffix costs no
// compatibility.
func AutoscalerRoleName(c *rayv1.RayCluster) string { return fitName(c.Name+"-autoscaler", maxNameLen) }

// HeadServiceFQDN is <head-svc>.<ns>.svc.<domain>.
func HeadServiceFQDN(c *rayv1.RayCluster, domain string) string {
	if domain == "" {
		domain = "cluster.local"
	}
	return HeadServiceName(c) + "." + c.Namespace + ".svc." + domain
}

// childClusterBaseLen leaves room in a 63-character label value for "-" and the 5 random characters; KubeRay
// truncates the parent's name the same way, so the cluster names users see look alike.
const childClusterBaseLen = 50

const randomAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// ChildClusterName is the name of a RayCluster created by a RayJob or RayService: <parent>-<5 random chars>, the
// parent's name cut to leave room. The caller records it (status.rayClusterName) before creating the cluster, so
// a retried reconcile reuses the recorded name instead of creating a second cluster.
func ChildClusterName(parent string, rnd func(n int) int) string {
	base := parent
	if len(base) > childClusterBaseLen {
		base = strings.TrimRight(base[:childClusterBaseLen], "-.")
	}
	b := make([]byte, generatedSuffixLen)
	for i := range b {
		b[i] = randomAlphabet[rnd(len(randomAlphabet))]
	}
	return base + "-" + string(b)
}
