package clusterbuild

import (
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// NodeTypeRedisCleanup is the ray.io/node-type of the Redis cleanup Job and its pod (KubeRay's value).
const NodeTypeRedisCleanup = "redis-cleanup"

// The cleanup Job is best effort: one try, five minutes (KubeRay's limits).
const (
	redisCleanupBackoffLimit    = 0
	redisCleanupDeadlineSeconds = 300
)

// redisCleanupRetries and redisCleanupRetryWaitMs give Ray's Redis client a minute to reach Redis.
const (
	redisCleanupRetries     = "120"
	redisCleanupRetryWaitMs = "500"
)

// RedisCleanupJobName is <cluster>-redis-cleanup, cut to 63 characters with a hash when the cluster's name is long.
func RedisCleanupJobName(c *rayv1.RayCluster) string {
	return fitName(c.Name+"-redis-cleanup", maxNameLen)
}

// RedisCleanupSelector selects the cluster's Redis cleanup Jobs.
func RedisCleanupSelector(c *rayv1.RayCluster) map[string]string {
	return map[string]string{rayv1.LabelCluster: c.Name, rayv1.LabelNodeType: NodeTypeRedisCleanup}
}

// RedisCleanupJob builds the Job that deletes a deleted cluster's GCS storage namespace from Redis, as KubeRay
// runs it before releasing ray.io/gcs-ft-redis-cleanup-finalizer: the head pod (so the image, the Redis address,
// credentials, storage namespace, volumes and service account are the head's), cut to its Ray container, which
// runs the cleanup instead of Ray, without probes, on small fixed resources (never the head's GPUs). Nil when the
// head has no container.
func RedisCleanupJob(c *rayv1.RayCluster, o PodOptions) *batchv1.Job {
	o.TemplateHash = "" // the Job is never compared with a template
	pod := HeadPod(c, o)
	if pod == nil {
		return nil
	}
	pod.Labels[rayv1.LabelNodeType] = NodeTypeRedisCleanup
	ray := pod.Spec.Containers[RayContainerIndex]
	ray.Command = ShellCommand()
	ray.Args = []string{redisCleanupScript(hasEnvVar(&ray, EnvRedisUsername))}
	ray.LivenessProbe, ray.ReadinessProbe = nil, nil
	setEnv(&ray, "RAY_redis_db_connect_retries", redisCleanupRetries)
	setEnv(&ray, "RAY_redis_db_connect_wait_milliseconds", redisCleanupRetryWaitMs)
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
	ray.Resources = corev1.ResourceRequirements{Limits: small, Requests: small.DeepCopy()}
	pod.Spec.Containers = []corev1.Container{ray}
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever

	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:            RedisCleanupJobName(c),
			Namespace:       c.Namespace,
			Labels:          mergeMaps(pod.Labels, nil),
			Annotations:     mergeMaps(pod.Annotations, nil),
			OwnerReferences: []metav1.OwnerReference{*OwnerReference(c)},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](redisCleanupBackoffLimit),
			ActiveDeadlineSeconds: ptr.To[int64](redisCleanupDeadlineSeconds),
			Template:              corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec},
		},
	}
}

// redisCleanupScript deletes the storage namespace with Ray's own helper, reading what the head's env holds: the
// first address of RAY_REDIS_ADDRESS (redis:// when it names no scheme; rediss:// means TLS), the password from
// REDIS_PASSWORD or the address, and the username only when REDIS_USERNAME is set (Ray before 2.41 has no
// username argument). It exits 1 when Ray reports the cleanup failed, which fails the Job. The first line names
// what it cleans, so a failed cleanup can be finished by hand.
func redisCleanupScript(username bool) string {
	py := []string{
		"import os, sys",
		"from urllib.parse import urlparse",
		"from ray._private.gcs_utils import cleanup_redis_storage",
		"addr = os.getenv('RAY_REDIS_ADDRESS', '').split(',')[0]",
		"url = urlparse(addr if '://' in addr else 'redis://' + addr)",
		"args = dict(host=url.hostname, port=url.port, password=os.getenv('REDIS_PASSWORD', url.password or ''), use_ssl=url.scheme == 'rediss', storage_namespace=os.getenv('RAY_external_storage_namespace'))",
	}
	if username {
		py = append(py, "args['username'] = os.getenv('REDIS_USERNAME', url.username)")
	}
	py = append(py, "sys.exit(0 if cleanup_redis_storage(**args) else 1)")
	return `echo "deleting GCS storage namespace ${RAY_external_storage_namespace} from Redis; ` +
		`if this Job fails, delete the keys by hand and remove the RayCluster's finalizer ` + FinalizerGCSFTRedisCleanup + `" && ` +
		`python -c "` + strings.Join(py, "\n") + `"`
}

func hasEnvVar(c *corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return true
		}
	}
	return false
}
