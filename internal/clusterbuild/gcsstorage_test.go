package clusterbuild

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

func embeddedCluster(storage *rayv1.GcsEmbeddedStorage) *rayv1.RayCluster {
	c := cluster()
	c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{Backend: rayv1.GcsFaultToleranceBackendRocksDB, Storage: storage}
	return c
}

// The head of a cluster on the embedded backend as KubeRay v1.7 builds it: ft-enabled, RocksDB selected and pointed
// at the claim mounted at /data/gcs (a subPath of it when asked), no Redis settings; workers wait out a GCS restart.
func TestEmbeddedGCSPodsAsKubeRay17(t *testing.T) {
	for _, tc := range []struct {
		name    string
		storage *rayv1.GcsEmbeddedStorage
		claim   string
		subPath string
	}{
		{"operator's claim", nil, "rc-gcs-pvc", ""},
		{"user's claim and subPath", &rayv1.GcsEmbeddedStorage{ClaimName: "mine", SubPath: "clusters/rc"}, "mine", "clusters/rc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := embeddedCluster(tc.storage)
			head := HeadPod(c, PodOptions{})
			ray := head.Spec.Containers[RayContainerIndex]
			if head.Annotations[AnnotationFTEnabled] != "true" {
				t.Errorf("ft-enabled %q", head.Annotations[AnnotationFTEnabled])
			}
			if _, ok := head.Annotations[AnnotationExternalStorageNamespace]; ok {
				t.Errorf("a Redis storage namespace annotation: %v", head.Annotations)
			}
			env := envMap(ray)
			for k, want := range map[string]string{"RAY_gcs_storage": "rocksdb", "RAY_gcs_storage_path": "/data/gcs"} {
				if env[k] != want {
					t.Errorf("%s = %q, want %q", k, env[k], want)
				}
			}
			for _, k := range []string{EnvExternalStorageNS, EnvRedisAddress, EnvRedisPassword, EnvRedisUsername} {
				if _, ok := env[k]; ok {
					t.Errorf("Redis env %s on the embedded backend", k)
				}
			}
			wantMount := corev1.VolumeMount{Name: "gcs-storage", MountPath: "/data/gcs", SubPath: tc.subPath}
			if i := slices.IndexFunc(ray.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "gcs-storage" }); i < 0 || !cmp.Equal(ray.VolumeMounts[i], wantMount) {
				t.Errorf("mounts %+v, want %+v among them", ray.VolumeMounts, wantMount)
			}
			wantVol := []corev1.Volume{{Name: "gcs-storage", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: tc.claim}}}}
			if diff := cmp.Diff(wantVol, filterVolumes(head.Spec.Volumes, "gcs-storage")); diff != "" {
				t.Errorf("head volume (-KubeRay v1.7 +Manta):\n%s", diff)
			}
			worker := WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{})
			wenv := envMap(worker.Spec.Containers[RayContainerIndex])
			if wenv[EnvGCSReconnectTimeout] != "600" {
				t.Errorf("worker reconnect timeout %q", wenv[EnvGCSReconnectTimeout])
			}
			if _, ok := wenv["RAY_gcs_storage"]; ok || len(filterVolumes(worker.Spec.Volumes, "gcs-storage")) > 0 {
				t.Error("a worker got the head's GCS storage")
			}
		})
	}
}

// The claim KubeRay v1.7 creates: <cluster>-gcs-pvc labelled with the cluster, ReadWriteOnce and 1Gi by default,
// the cluster's default StorageClass unless one is named; never an owner here (the controller decides).
func TestGCSStoragePVCAsKubeRay17(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "rc-gcs-pvc", Namespace: "ns", Labels: map[string]string{"ray.io/cluster": "rc"}}
	want := &corev1.PersistentVolumeClaim{ObjectMeta: meta, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}}
	if diff := cmp.Diff(want, GCSStoragePVC(embeddedCluster(nil))); diff != "" {
		t.Errorf("default claim (-KubeRay v1.7 +Manta):\n%s", diff)
	}
	size := resource.MustParse("5Gi")
	c := embeddedCluster(&rayv1.GcsEmbeddedStorage{Size: &size, StorageClassName: ptr.To("fast"),
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, DeletionPolicy: rayv1.GcsStorageRetain})
	want = &corev1.PersistentVolumeClaim{ObjectMeta: meta, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		StorageClassName: ptr.To("fast"),
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
	}}
	if diff := cmp.Diff(want, GCSStoragePVC(c)); diff != "" {
		t.Errorf("claim from the options (-KubeRay v1.7 +Manta):\n%s", diff)
	}
	if !GCSStorageRetained(c) || GCSStorageRetained(embeddedCluster(nil)) {
		t.Error("Retain is the only policy that keeps the claim")
	}
	if !GCSStorageManaged(c) || GCSStorageManaged(embeddedCluster(&rayv1.GcsEmbeddedStorage{ClaimName: "mine"})) || GCSStorageManaged(cluster()) {
		t.Error("the operator creates a claim only on the embedded backend without claimName")
	}
}

// Drift is what Kubernetes cannot change in place: size, a named class, access modes (as a set). A class left to
// the cluster's default is whatever the API server filled in.
func TestGCSStoragePVCDrift(t *testing.T) {
	desired := GCSStoragePVC(embeddedCluster(nil))
	live := desired.DeepCopy()
	live.Spec.StorageClassName = ptr.To("standard")
	if d := GCSStoragePVCDrift(desired, live); d != "" {
		t.Errorf("defaulted class reported: %s", d)
	}
	live.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
	live.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteOncePod}
	desired.Spec.StorageClassName = ptr.To("fast")
	want := "size 1Gi (live 2Gi); storageClassName fast (live standard); accessModes [ReadWriteOnce] (live [ReadWriteOnce ReadWriteOncePod])"
	if d := GCSStoragePVCDrift(desired, live); d != want {
		t.Errorf("drift %q, want %q", d, want)
	}
}
