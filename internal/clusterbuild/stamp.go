package clusterbuild

import (
	"sync"

	"github.com/manta-dev/manta/internal/version"
)

// The stamp Manta puts on what it creates: pods, Services, the RayClusters of RayJobs and RayServices, and Jobs
// (submitter, Redis cleanup). Manta's own keys: KubeRay's ray.io/kuberay-version is left to KubeRay, whose
// operator treats a cluster without its own version as built by another operator and re-stamps it rather than
// replacing it (a swap back to KubeRay recreates nothing).
const (
	// AnnotationVersion is the Manta release (version.Version) that built the object. On a pod it also says which
	// Manta computed its ray.io/pod-template-hash (a takeover or upgrade re-stamps both, see RecreatePlan), and on a
	// RayService's cluster which Manta computed its spec hash: a hash is compared only with one computed by the
	// same release, so a release that hashes differently recreates nothing.
	AnnotationVersion = "manta.dev/version"
	// AnnotationCommit is the commit of the Manta binary that built the object (version.GitCommit), for people:
	// no decision reads it.
	AnnotationCommit = "manta.dev/commit"
	// AnnotationKubeRayVersion is KubeRay's stamp (ray.io/kuberay-version). Manta never sets it, and removes it from a
	// RayService's cluster whose hash it rewrites: KubeRay compares that hash only under its own version.
	AnnotationKubeRayVersion = "ray.io/kuberay-version"
)

// gitCommit is read from the build info once: every pod is stamped with it.
var gitCommit = sync.OnceValue(version.GitCommit)

// Stamp sets the stamp on annotations (made when nil) and returns them.
func Stamp(annotations map[string]string) map[string]string {
	if annotations == nil {
		annotations = make(map[string]string, 2)
	}
	annotations[AnnotationVersion] = version.Version
	annotations[AnnotationCommit] = gitCommit()
	return annotations
}

// StampedByThisVersion says whether annotations carry this Manta release's stamp.
func StampedByThisVersion(annotations map[string]string) bool {
	return annotations[AnnotationVersion] == version.Version
}

// isStampKey says whether k is a key of the stamp: the stamp records who created an object, so an in-place update
// neither compares nor rewrites it.
func isStampKey(k string) bool { return k == AnnotationVersion || k == AnnotationCommit }
