package validation

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

func rocksDB(c *rayv1.RayCluster) *rayv1.GcsFaultToleranceOptions {
	c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{Backend: rayv1.GcsFaultToleranceBackendRocksDB}
	return c.Spec.GcsFaultToleranceOptions
}

func collector(c *rayv1.RayCluster, env ...corev1.EnvVar) *rayv1.CollectorOptions {
	c.Spec.HistoryServerOptions = &rayv1.HistoryServerOptions{CollectorOptions: &rayv1.CollectorOptions{Image: "collector", Env: env}}
	return c.Spec.HistoryServerOptions.CollectorOptions
}

func envVar(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

// What KubeRay v1.7 refuses about the embedded GCS backend and the history collector, each error naming its field
// (under a RayService's path too).
func TestGCSBackendAndHistoryServerRules(t *testing.T) {
	size := resource.MustParse("2Gi")
	tests := []struct {
		name   string
		mutate func(*rayv1.RayCluster)
		want   string
	}{
		{"redis address on rocksdb", func(c *rayv1.RayCluster) { rocksDB(c).RedisAddress = "redis:6379" },
			"spec.gcsFaultToleranceOptions.redisAddress: Forbidden: cannot be set when backend is rocksdb"},
		{"redis password on rocksdb", func(c *rayv1.RayCluster) { rocksDB(c).RedisPassword = &rayv1.RedisCredential{Value: "x"} },
			"spec.gcsFaultToleranceOptions.redisPassword: Forbidden: cannot be set when backend is rocksdb"},
		{"redis username on rocksdb", func(c *rayv1.RayCluster) { rocksDB(c).RedisUsername = &rayv1.RedisCredential{Value: "x"} },
			"spec.gcsFaultToleranceOptions.redisUsername: Forbidden: cannot be set when backend is rocksdb"},
		{"storage namespace on rocksdb", func(c *rayv1.RayCluster) { rocksDB(c).ExternalStorageNamespace = "ns" },
			"spec.gcsFaultToleranceOptions.externalStorageNamespace: Forbidden: cannot be set when backend is rocksdb"},
		{"claimName with size", func(c *rayv1.RayCluster) {
			rocksDB(c).Storage = &rayv1.GcsEmbeddedStorage{ClaimName: "mine", Size: &size}
		}, "spec.gcsFaultToleranceOptions.storage.claimName: Forbidden: claimName names an existing claim and cannot be set with size"},
		{"claimName with access modes", func(c *rayv1.RayCluster) {
			rocksDB(c).Storage = &rayv1.GcsEmbeddedStorage{ClaimName: "mine", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}
		}, "spec.gcsFaultToleranceOptions.storage.claimName: Forbidden"},
		{"storage on redis", func(c *rayv1.RayCluster) {
			c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{RedisAddress: "redis:6379", Storage: &rayv1.GcsEmbeddedStorage{Size: &size}}
		}, "spec.gcsFaultToleranceOptions.storage: Forbidden: storage only applies to the rocksdb backend"},
		{"user's RAY_gcs_storage_path", func(c *rayv1.RayCluster) {
			rocksDB(c)
			c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Env = []corev1.EnvVar{envVar("RAY_gcs_storage_path", "/x")}
		}, "spec.headGroupSpec.template.spec.containers[0].env[RAY_gcs_storage_path]: Forbidden: the operator sets it for the rocksdb backend"},
		{"user's mount at /data/gcs", func(c *rayv1.RayCluster) {
			rocksDB(c)
			c.Spec.HeadGroupSpec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "mine", MountPath: "/data/gcs"}}
		}, `spec.headGroupSpec.template.spec.containers[0].volumeMounts[0]: Forbidden: the operator mounts volume "gcs-storage" at /data/gcs`},
		{"user's gcs-storage volume", func(c *rayv1.RayCluster) {
			rocksDB(c)
			c.Spec.HeadGroupSpec.Template.Spec.Volumes = []corev1.Volume{{Name: "gcs-storage"}}
		}, `spec.headGroupSpec.template.spec.volumes[0]: Forbidden: the operator adds volume "gcs-storage"`},
		{"history server without collector", func(c *rayv1.RayCluster) { c.Spec.HistoryServerOptions = &rayv1.HistoryServerOptions{} },
			"spec.historyServerOptions.collectorOptions: Required value"},
		{"collector without image", func(c *rayv1.RayCluster) {
			collector(c, envVar("STORAGE_BACKEND", "S3"), envVar("S3_REGION", "r")).Image = ""
		}, "spec.historyServerOptions.collectorOptions.image: Required value"},
		{"collector env the operator sets", func(c *rayv1.RayCluster) {
			collector(c, envVar("STORAGE_BACKEND", "S3"), envVar("S3_REGION", "r"), envVar("RAY_ROLE", "Head"))
		}, "spec.historyServerOptions.collectorOptions.env[RAY_ROLE]: Forbidden: the operator sets it on the collector"},
		{"collector without storage backend", func(c *rayv1.RayCluster) { collector(c) },
			"spec.historyServerOptions.collectorOptions.env[STORAGE_BACKEND]: Required value"},
		{"collector storage backend by reference", func(c *rayv1.RayCluster) {
			collector(c, corev1.EnvVar{Name: "STORAGE_BACKEND", ValueFrom: &corev1.EnvVarSource{}})
		}, "spec.historyServerOptions.collectorOptions.env[STORAGE_BACKEND]: Required value"},
		{"GCS without bucket", func(c *rayv1.RayCluster) { collector(c, envVar("STORAGE_BACKEND", "gcs")) },
			"spec.historyServerOptions.collectorOptions.env[GCS_BUCKET]: Required value: needed when STORAGE_BACKEND is GCS"},
		{"S3 without region", func(c *rayv1.RayCluster) { collector(c, envVar("STORAGE_BACKEND", "S3"), envVar("S3_REGION", "")) },
			"spec.historyServerOptions.collectorOptions.env[S3_REGION]: Required value"},
		{"Azure with a connection string mode and none", func(c *rayv1.RayCluster) {
			collector(c, envVar("STORAGE_BACKEND", "AZUREBLOB"), envVar("AZURE_STORAGE_AUTH_MODE", "connection_string"), envVar("AZURE_STORAGE_ACCOUNT_URL", "u"))
		}, "spec.historyServerOptions.collectorOptions.env[AZURE_STORAGE_CONNECTION_STRING]: Required value"},
		{"Azure workload identity without account URL", func(c *rayv1.RayCluster) {
			collector(c, envVar("STORAGE_BACKEND", "AZUREBLOB"), envVar("AZURE_STORAGE_AUTH_MODE", "workload_identity"))
		}, "spec.historyServerOptions.collectorOptions.env[AZURE_STORAGE_ACCOUNT_URL]: Required value"},
		{"Azure with neither", func(c *rayv1.RayCluster) { collector(c, envVar("STORAGE_BACKEND", "AZUREBLOB")) },
			"spec.historyServerOptions.collectorOptions.env: Required value: AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_URL"},
		{"Aliyun without endpoint", func(c *rayv1.RayCluster) {
			collector(c, envVar("STORAGE_BACKEND", "ALIYUNOSS"), envVar("OSS_BUCKET", "b"), envVar("OSS_REGION", "r"))
		}, "spec.historyServerOptions.collectorOptions.env[OSS_ENDPOINT]: Required value"},
		{"a worker container named as the collector", func(c *rayv1.RayCluster) {
			collector(c, envVar("STORAGE_BACKEND", "S3"), envVar("S3_REGION", "r"))
			c.Spec.WorkerGroupSpecs[0].Template.Spec.Containers = append(c.Spec.WorkerGroupSpecs[0].Template.Spec.Containers, corev1.Container{Name: "ray-history-collector"})
		}, `spec.workerGroupSpecs[0].template.spec.containers[1].name: Forbidden: "ray-history-collector" is the collector the operator adds`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster()
			tc.mutate(c)
			errs := RayCluster(c)
			if len(errs) == 0 || !strings.HasPrefix(errs[0].Error(), tc.want) {
				t.Errorf("RayCluster: %v, want the first to start with %q", errs, tc.want)
			}
			under := field.NewPath("spec", "rayClusterConfig")
			want := topSpec.ReplaceAllString(tc.want, "${1}spec.rayClusterConfig.")
			if errs := ClusterSpec(&c.Spec, c.Annotations, under); len(errs) == 0 || !strings.HasPrefix(errs[0].Error(), want) {
				t.Errorf("embedded: %v, want the first to start with %q", errs, want)
			}
		})
	}

	// What KubeRay accepts.
	for name, mutate := range map[string]func(*rayv1.RayCluster){
		"rocksdb, defaults": func(c *rayv1.RayCluster) { rocksDB(c) },
		"rocksdb, own claim": func(c *rayv1.RayCluster) {
			rocksDB(c).Storage = &rayv1.GcsEmbeddedStorage{ClaimName: "mine", SubPath: "a"}
		},
		"rocksdb, managed claim retained": func(c *rayv1.RayCluster) {
			rocksDB(c).Storage = &rayv1.GcsEmbeddedStorage{Size: &size, StorageClassName: ptr.To("fast"), DeletionPolicy: rayv1.GcsStorageRetain}
		},
		"collector on GCS": func(c *rayv1.RayCluster) { collector(c, envVar("STORAGE_BACKEND", "GCS"), envVar("GCS_BUCKET", "b")) },
		"collector on Azure by URL": func(c *rayv1.RayCluster) {
			collector(c, envVar("STORAGE_BACKEND", "AZUREBLOB"), envVar("AZURE_STORAGE_ACCOUNT_URL", "u"))
		},
		"collector on a backend of its own": func(c *rayv1.RayCluster) { collector(c, envVar("STORAGE_BACKEND", "local")) },
	} {
		c := cluster()
		mutate(c)
		if errs := RayCluster(c); len(errs) > 0 {
			t.Errorf("%s refused: %v", name, errs)
		}
	}
}
