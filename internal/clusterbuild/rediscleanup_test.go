package clusterbuild

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

func TestRedisCleanupJob(t *testing.T) {
	secret := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "password"}}
	withOptions := func(c *rayv1.RayCluster) {
		c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{
			RedisAddress: "redis:6379", ExternalStorageNamespace: "store", RedisPassword: &rayv1.RedisCredential{ValueFrom: secret},
		}
	}
	tests := []struct {
		name   string
		mutate func(*rayv1.RayCluster)
		opts   PodOptions
		// wantEnv are env vars of the Job's container ("ref" for valueFrom); wantNS the storage-namespace annotation.
		wantEnv      map[string]string
		wantNS       string
		wantUsername bool
		wantName     string
		wantSA       string
	}{
		{
			name: "options", mutate: withOptions,
			wantEnv:  map[string]string{EnvRedisAddress: "redis:6379", EnvRedisPassword: "ref", EnvExternalStorageNS: "store"},
			wantNS:   "store",
			wantName: "rc-redis-cleanup",
		},
		{
			name: "options with a username", mutate: func(c *rayv1.RayCluster) {
				withOptions(c)
				c.Spec.GcsFaultToleranceOptions.RedisUsername = &rayv1.RedisCredential{Value: "ray"}
			},
			wantEnv:      map[string]string{EnvRedisUsername: "ray", EnvExternalStorageNS: "store"},
			wantNS:       "store",
			wantUsername: true,
			wantName:     "rc-redis-cleanup",
		},
		{
			name: "annotation, address in the head's env, namespace defaults to the UID", mutate: func(c *rayv1.RayCluster) {
				c.Annotations = map[string]string{AnnotationFTEnabled: "true"}
				c.Spec.HeadGroupSpec.RayStartParams = map[string]string{"redis-password": "pw"}
				c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: EnvRedisAddress, Value: "redis://r:6379"}}
			},
			wantEnv:  map[string]string{EnvRedisAddress: "redis://r:6379", EnvRedisPassword: "pw", EnvExternalStorageNS: "uid-1"},
			wantNS:   "uid-1",
			wantName: "rc-redis-cleanup",
		},
		{
			name: "autoscaling: the head's service account, no autoscaler container", mutate: func(c *rayv1.RayCluster) {
				withOptions(c)
				c.Spec.EnableInTreeAutoscaling = ptr.To(true)
			},
			wantEnv:  map[string]string{EnvRedisAddress: "redis:6379"},
			wantNS:   "store",
			wantName: "rc-redis-cleanup",
			wantSA:   "rc",
		},
		{
			name: "a long cluster name is cut to 63 characters", mutate: func(c *rayv1.RayCluster) {
				withOptions(c)
				c.Name = strings.Repeat("a", 53)
			},
			wantEnv:  map[string]string{EnvRedisAddress: "redis:6379"},
			wantNS:   "store",
			wantName: fitName(strings.Repeat("a", 53)+"-redis-cleanup", 63),
		},
		{
			name: "the default template shapes the Job as it shapes the head", mutate: withOptions,
			opts: PodOptions{DefaultTemplate: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				NodeSelector: map[string]string{"pool": "cpu"},
			}}, TemplateHash: "h1"},
			wantEnv:  map[string]string{EnvRedisAddress: "redis:6379"},
			wantNS:   "store",
			wantName: "rc-redis-cleanup",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster()
			c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Resources = res(map[string]string{"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}, nil)
			tc.mutate(c)
			job := RedisCleanupJob(c, tc.opts)
			if job.Name != tc.wantName || len(job.Name) > 63 || job.Namespace != "ns" {
				t.Errorf("name %s/%s, want %s", job.Namespace, job.Name, tc.wantName)
			}
			if !metav1.IsControlledBy(job, c) {
				t.Errorf("owners %+v", job.OwnerReferences)
			}
			for _, l := range []map[string]string{job.Labels, job.Spec.Template.Labels} {
				if l[rayv1.LabelNodeType] != NodeTypeRedisCleanup || l[rayv1.LabelCluster] != c.Name || l[rayv1.LabelCreatedBy] != rayv1.CreatedByValue {
					t.Errorf("labels %v", l)
				}
			}
			for _, a := range []map[string]string{job.Annotations, job.Spec.Template.Annotations} {
				if a[AnnotationExternalStorageNamespace] != tc.wantNS || a[AnnotationFTEnabled] != "true" || a[AnnotationPodTemplateHash] != "" {
					t.Errorf("annotations %v", a)
				}
			}
			if ptr.Deref(job.Spec.BackoffLimit, -1) != 0 || ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0) != 300 {
				t.Errorf("backoffLimit %v, activeDeadlineSeconds %v", job.Spec.BackoffLimit, job.Spec.ActiveDeadlineSeconds)
			}
			spec := job.Spec.Template.Spec
			if spec.RestartPolicy != corev1.RestartPolicyNever || len(spec.Containers) != 1 || spec.ServiceAccountName != tc.wantSA {
				t.Fatalf("restartPolicy %s, %d containers, serviceAccountName %q", spec.RestartPolicy, len(spec.Containers), spec.ServiceAccountName)
			}
			ray := spec.Containers[0]
			if ray.Name != "ray-head" || ray.Image != "rayproject/ray:2.52.0" || ray.LivenessProbe != nil || ray.ReadinessProbe != nil {
				t.Errorf("container %s %s, probes %v %v", ray.Name, ray.Image, ray.LivenessProbe, ray.ReadinessProbe)
			}
			if diff := cmp.Diff(res(map[string]string{"cpu": "200m", "memory": "256Mi"}, map[string]string{"cpu": "200m", "memory": "256Mi"}), ray.Resources); diff != "" {
				t.Errorf("resources (-want +got):\n%s", diff)
			}
			env := envMap(ray)
			for k, v := range tc.wantEnv {
				if env[k] != v {
					t.Errorf("env %s = %q, want %q", k, env[k], v)
				}
			}
			if env["RAY_redis_db_connect_retries"] != "120" || env["RAY_redis_db_connect_wait_milliseconds"] != "500" {
				t.Errorf("retry env %v", env)
			}
			if diff := cmp.Diff([]string{"/bin/bash", "-c", "--"}, ray.Command); diff != "" {
				t.Errorf("command (-want +got):\n%s", diff)
			}
			if len(ray.Args) != 1 || !strings.Contains(ray.Args[0], "cleanup_redis_storage(**args)") || strings.Contains(ray.Args[0], "ray start") {
				t.Fatalf("args %q", ray.Args)
			}
			if got := strings.Contains(ray.Args[0], "REDIS_USERNAME"); got != tc.wantUsername {
				t.Errorf("username passed = %v, want %v", got, tc.wantUsername)
			}
			if tc.opts.DefaultTemplate != nil && spec.NodeSelector["pool"] != "cpu" {
				t.Errorf("nodeSelector %v", spec.NodeSelector)
			}
		})
	}
	if job := RedisCleanupJob(&rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: "empty"}}, PodOptions{}); job != nil {
		t.Errorf("a head without containers got a Job: %+v", job)
	}
}
