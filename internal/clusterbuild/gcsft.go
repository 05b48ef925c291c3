package clusterbuild

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// GCSFaultTolerance says whether the cluster keeps its GCS state in Redis: gcsFaultToleranceOptions with the
// redis backend, or the older ray.io/ft-enabled=true annotation.
func GCSFaultTolerance(c *rayv1.RayCluster) bool {
	if o := c.Spec.GcsFaultToleranceOptions; o != nil {
		return o.Backend == "" || o.Backend == rayv1.GcsFaultToleranceBackendRedis
	}
	return strings.EqualFold(c.Annotations[AnnotationFTEnabled], "true")
}

// ExternalStorageNamespace is where the cluster's GCS state lives in Redis: the options', else the annotation's,
// else the cluster's UID.
func ExternalStorageNamespace(c *rayv1.RayCluster) string {
	if o := c.Spec.GcsFaultToleranceOptions; o != nil && o.ExternalStorageNamespace != "" {
		return o.ExternalStorageNamespace
	}
	if v, ok := c.Annotations[AnnotationExternalStorageNamespace]; ok {
		return v
	}
	return string(c.UID)
}

// Environment of GCS fault tolerance.
const (
	EnvExternalStorageNS       = "RAY_external_storage_namespace"
	EnvRedisAddress            = "RAY_REDIS_ADDRESS"
	EnvRedisPassword           = "REDIS_PASSWORD"
	EnvRedisUsername           = "REDIS_USERNAME"
	EnvGCSReconnectTimeout     = "RAY_gcs_rpc_server_reconnect_timeout_s"
	defaultGCSReconnectTimeout = "600"
)

// headGCSFaultTolerance configures the head's Ray container for a fault-tolerant GCS, as KubeRay does: for Redis the
// storage namespace (annotation and env), the Redis address and credentials as env vars, and rayStartParams that
// refer to them; for the embedded backend its volume (headEmbeddedGCS). It returns the rayStartParams to start Ray
// with.
func headGCSFaultTolerance(c *rayv1.RayCluster, pod *corev1.Pod, ray *corev1.Container, params map[string]string) map[string]string {
	pod.Annotations[AnnotationFTEnabled] = strconv.FormatBool(GCSFaultToleranceEnabled(c))
	if EmbeddedGCS(c) {
		headEmbeddedGCS(c, pod, ray)
		return params
	}
	if !GCSFaultTolerance(c) {
		return params
	}
	out := make(map[string]string, len(params)+2)
	for k, v := range params {
		out[k] = v
	}
	ns := ExternalStorageNamespace(c)
	pod.Annotations[AnnotationExternalStorageNamespace] = ns
	setEnv(ray, EnvExternalStorageNS, ns)
	o := c.Spec.GcsFaultToleranceOptions
	if o == nil {
		// Old style: the password in rayStartParams; the env var lets tools reach Redis with it.
		if pw, ok := params["redis-password"]; ok {
			setEnv(ray, EnvRedisPassword, pw)
		}
		return out
	}
	ray.Env = append(ray.Env, corev1.EnvVar{Name: EnvRedisAddress, Value: o.RedisAddress})
	if u := o.RedisUsername; u != nil {
		out["redis-username"] = "$" + EnvRedisUsername
		ray.Env = append(ray.Env, corev1.EnvVar{Name: EnvRedisUsername, Value: u.Value, ValueFrom: u.ValueFrom.DeepCopy()})
	}
	if p := o.RedisPassword; p != nil {
		out["redis-password"] = "$" + EnvRedisPassword
		ray.Env = append(ray.Env, corev1.EnvVar{Name: EnvRedisPassword, Value: p.Value, ValueFrom: p.ValueFrom.DeepCopy()})
	}
	return out
}

// workerGCSFaultTolerance gives workers time to outlive a GCS restart, on either backend (Ray's default of 60 s is
// shorter than a new head takes to come up).
func workerGCSFaultTolerance(c *rayv1.RayCluster, ray *corev1.Container) {
	if GCSFaultToleranceEnabled(c) {
		setEnv(ray, EnvGCSReconnectTimeout, defaultGCSReconnectTimeout)
	}
}
