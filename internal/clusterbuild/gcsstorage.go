package clusterbuild

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// The embedded GCS backend (gcsFaultToleranceOptions.backend: rocksdb) keeps the GCS state in RocksDB on a volume
// mounted on the head, instead of in Redis: KubeRay's names and paths, so a cluster moved between the operators finds
// its volume.
const (
	GCSStorageVolumeName  = "gcs-storage"
	GCSStorageMountPath   = "/data/gcs"
	GCSStoragePVCSuffix   = "-gcs-pvc"
	GCSStorageDefaultSize = "1Gi"
	EnvGCSStorage         = "RAY_gcs_storage"
	EnvGCSStoragePath     = "RAY_gcs_storage_path"
	gcsStorageRocksDB     = "rocksdb"
)

// EmbeddedGCS says whether the cluster keeps its GCS state in RocksDB on a volume.
func EmbeddedGCS(c *rayv1.RayCluster) bool {
	o := c.Spec.GcsFaultToleranceOptions
	return o != nil && o.Backend == rayv1.GcsFaultToleranceBackendRocksDB
}

// GCSFaultToleranceEnabled says whether the GCS state outlives the head, whichever the backend: what the head's
// ray.io/ft-enabled annotation says and what gives workers the long GCS reconnect timeout.
func GCSFaultToleranceEnabled(c *rayv1.RayCluster) bool {
	return GCSFaultTolerance(c) || EmbeddedGCS(c)
}

// GCSStoragePVCName is the claim the head mounts: the user's storage.claimName, else <cluster>-gcs-pvc.
func GCSStoragePVCName(c *rayv1.RayCluster) string {
	if s := gcsStorage(c); s != nil && s.ClaimName != "" {
		return s.ClaimName
	}
	return c.Name + GCSStoragePVCSuffix
}

// GCSStorageManaged says whether the operator creates the claim (the embedded backend without a claimName).
func GCSStorageManaged(c *rayv1.RayCluster) bool {
	s := gcsStorage(c)
	return EmbeddedGCS(c) && (s == nil || s.ClaimName == "")
}

// GCSStorageRetained says whether the operator's claim outlives the cluster: it then carries no owner reference.
func GCSStorageRetained(c *rayv1.RayCluster) bool {
	s := gcsStorage(c)
	return s != nil && s.DeletionPolicy == rayv1.GcsStorageRetain
}

func gcsStorage(c *rayv1.RayCluster) *rayv1.GcsEmbeddedStorage {
	if o := c.Spec.GcsFaultToleranceOptions; o != nil {
		return o.Storage
	}
	return nil
}

// GCSStoragePVC is the claim the operator creates for the embedded backend, without an owner reference (the
// deletion policy decides that, see GCSStorageRetained): ReadWriteOnce and 1Gi unless the storage options say
// otherwise, the cluster's default StorageClass unless one is named.
func GCSStoragePVC(c *rayv1.RayCluster) *corev1.PersistentVolumeClaim {
	s := gcsStorage(c)
	modes := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	size := resource.MustParse(GCSStorageDefaultSize)
	var class *string
	if s != nil {
		if len(s.AccessModes) > 0 {
			modes = append([]corev1.PersistentVolumeAccessMode(nil), s.AccessModes...)
		}
		if s.Size != nil {
			size = s.Size.DeepCopy()
		}
		if s.StorageClassName != nil {
			class = ptr.To(*s.StorageClassName)
		}
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      GCSStoragePVCName(c),
			Namespace: c.Namespace,
			Labels:    map[string]string{rayv1.LabelCluster: c.Name},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      modes,
			StorageClassName: class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
}

// headEmbeddedGCS points the head's GCS at RocksDB on the claim, mounted at /data/gcs (storage.subPath of it when
// set). The env vars are the user's when they set them; validation refuses that, as KubeRay does.
func headEmbeddedGCS(c *rayv1.RayCluster, pod *corev1.Pod, ray *corev1.Container) {
	setEnv(ray, EnvGCSStorage, gcsStorageRocksDB)
	setEnv(ray, EnvGCSStoragePath, GCSStorageMountPath)
	var subPath string
	if s := gcsStorage(c); s != nil {
		subPath = s.SubPath
	}
	ray.VolumeMounts = append(ray.VolumeMounts, corev1.VolumeMount{Name: GCSStorageVolumeName, MountPath: GCSStorageMountPath, SubPath: subPath})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: GCSStorageVolumeName, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: GCSStoragePVCName(c)},
	}})
}

// GCSStoragePVCDrift describes how the live claim differs from the desired one in what Kubernetes cannot change in
// place (size, class, access modes); "" when it does not. An unset class is the cluster default's, which the API
// server fills in, so it never differs.
func GCSStoragePVCDrift(desired, live *corev1.PersistentVolumeClaim) string {
	var diffs []string
	want, got := desired.Spec.Resources.Requests[corev1.ResourceStorage], live.Spec.Resources.Requests[corev1.ResourceStorage]
	if want.Cmp(got) != 0 {
		diffs = append(diffs, fmt.Sprintf("size %s (live %s)", want.String(), got.String()))
	}
	if w := desired.Spec.StorageClassName; w != nil && !ptr.Equal(w, live.Spec.StorageClassName) {
		diffs = append(diffs, fmt.Sprintf("storageClassName %s (live %s)", *w, ptr.Deref(live.Spec.StorageClassName, "<default>")))
	}
	if !sameModes(desired.Spec.AccessModes, live.Spec.AccessModes) {
		diffs = append(diffs, fmt.Sprintf("accessModes %v (live %v)", desired.Spec.AccessModes, live.Spec.AccessModes))
	}
	return strings.Join(diffs, "; ")
}

// sameModes compares access modes as sets.
func sameModes(a, b []corev1.PersistentVolumeAccessMode) bool {
	count := map[corev1.PersistentVolumeAccessMode]int{}
	for _, m := range a {
		count[m]++
	}
	for _, m := range b {
		count[m]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}
