package raycluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

// A RayCluster created by a RayJob or RayService (owner reference or origin label) may not carry an
// upgradeStrategy; other clusters may.
func TestValidateUpgradeStrategyOwner(t *testing.T) {
	owner := func(kind string) func(*rayv1.RayCluster) {
		return func(c *rayv1.RayCluster) {
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: rayv1.GroupVersion.String(), Kind: kind, Name: "p", UID: "u"}}
		}
	}
	tests := []struct {
		name     string
		mutate   func(*rayv1.RayCluster)
		recreate bool
		want     string // substring of the message; "" means valid
	}{
		{"standalone with Recreate", func(*rayv1.RayCluster) {}, true, ""},
		{"RayJob owner without upgradeStrategy", owner(clusterbuild.KindRayJob), false, ""},
		{"RayJob owner", owner(clusterbuild.KindRayJob), true, "upgradeStrategy cannot be set when RayCluster is created by RayJob"},
		{"RayService owner", owner(clusterbuild.KindRayService), true, "upgradeStrategy cannot be set when RayCluster is created by RayService"},
		{"RayService origin label", func(c *rayv1.RayCluster) {
			c.Labels = map[string]string{rayv1.LabelOriginCRD: clusterbuild.KindRayService}
		}, true, "created by RayService"},
		{"unrelated owner", func(c *rayv1.RayCluster) {
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", UID: "u"}}
		}, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := testutil.MakeRayCluster("ns", "rc").Workers("small", 1)
			if tc.recreate {
				w = w.Recreate()
			}
			c := w.Obj()
			tc.mutate(c)
			f := validate(c)
			switch {
			case tc.want == "" && f != nil:
				t.Errorf("refused: %+v", f)
			case tc.want != "" && (f == nil || f.reason != ReasonUpgradeStrategyNotAllowed || !strings.Contains(f.message, tc.want)):
				t.Errorf("validate = %+v, want %q", f, tc.want)
			}
		})
	}
}

func autoscale(c *rayv1.RayCluster) { c.Spec.EnableInTreeAutoscaling = ptr.To(true) }

// What KubeRay refuses in a spec, Manta refuses too, naming the field, instead of building pods Ray cannot start.
func TestValidateSpec(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*rayv1.RayCluster)
		want   string // substring of the message; "" means valid
	}{
		{"valid", func(*rayv1.RayCluster) {}, ""},
		{"53 characters", func(c *rayv1.RayCluster) { c.Name = strings.Repeat("a", 53) }, ""},
		{"54 characters", func(c *rayv1.RayCluster) { c.Name = strings.Repeat("a", 54) }, "at most 53 characters"},
		{"not DNS-1035", func(c *rayv1.RayCluster) { c.Name = "1abc" }, "DNS-1035"},
		{"resources twice", func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs[0].RayStartParams = map[string]string{"num-cpus": "1"}
			c.Spec.WorkerGroupSpecs[0].Resources = map[string]string{"cpu": "1"}
		}, "spec.workerGroupSpecs[0]: rayStartParams[num-cpus] and resources both"},
		{"rayStartParams labels", func(c *rayv1.RayCluster) {
			c.Spec.HeadGroupSpec.RayStartParams = map[string]string{"labels": "a=b"}
		}, "spec.headGroupSpec.rayStartParams[labels]"},
		{"bad label value", func(c *rayv1.RayCluster) {
			c.Spec.HeadGroupSpec.Labels = map[string]string{"a": "not ok!"}
		}, "spec.headGroupSpec.labels[a]"},
		{"not a quantity", func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs[0].Resources = map[string]string{"memory": "8 gigs"}
		}, "spec.workerGroupSpecs[0].resources[memory]"},
		{"FT annotation and options", func(c *rayv1.RayCluster) {
			c.Annotations = map[string]string{clusterbuild.AnnotationFTEnabled: "true"}
			c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{RedisAddress: "r:6379"}
		}, "use only the options"},
		{"Redis address without FT", func(c *rayv1.RayCluster) {
			c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "RAY_REDIS_ADDRESS", Value: "r:6379"}}
		}, "RAY_REDIS_ADDRESS is set"},
		{"password in rayStartParams with options", func(c *rayv1.RayCluster) {
			c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{RedisAddress: "r:6379"}
			c.Spec.HeadGroupSpec.RayStartParams = map[string]string{"redis-password": "pw"}
		}, "rayStartParams[redis-password]"},
		{"FT by options", func(c *rayv1.RayCluster) {
			c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{RedisAddress: "r:6379"}
		}, ""},
		{"quantities", func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs[0].Resources = map[string]string{"memory": "8Gi", "cpu": "500m"}
		}, ""},
		{"autoscaler v2 by env without autoscaling", func(c *rayv1.RayCluster) {
			c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: clusterbuild.EnvAutoscalerV2, Value: "true"}}
		}, "env[RAY_enable_autoscaler_v2]: \"true\" asks for autoscaler v2, which needs spec.enableInTreeAutoscaling"},
		{"autoscaler v1 by env without autoscaling", func(c *rayv1.RayCluster) {
			c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: clusterbuild.EnvAutoscalerV2, Value: "0"}}
		}, ""},
		{"autoscaler v2 by env with autoscaling", func(c *rayv1.RayCluster) {
			autoscale(c)
			c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: clusterbuild.EnvAutoscalerV2, Value: "1"}}
		}, ""},
		{"suspended group with autoscaling", func(c *rayv1.RayCluster) {
			autoscale(c)
			c.Spec.WorkerGroupSpecs[0].Suspend = ptr.To(true)
		}, "spec.workerGroupSpecs[0].suspend: worker group \"small\" cannot be suspended while the autoscaler runs"},
		{"suspended group without autoscaling (RayJob DeleteWorkers)", func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs[0].Suspend = ptr.To(true)
		}, ""},
		{"autoscaler version twice", func(c *rayv1.RayCluster) {
			autoscale(c)
			c.Spec.AutoscalerOptions = &rayv1.AutoscalerOptions{Version: ptr.To(rayv1.AutoscalerVersionV1)}
			c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: clusterbuild.EnvAutoscalerV2, Value: "false"}}
		}, "use only spec.autoscalerOptions.version"},
		{"head restarts under autoscaler v2", func(c *rayv1.RayCluster) {
			autoscale(c)
			c.Spec.AutoscalerOptions = &rayv1.AutoscalerOptions{Version: ptr.To(rayv1.AutoscalerVersionV2)}
			c.Spec.HeadGroupSpec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
		}, "spec.headGroupSpec.template.spec.restartPolicy: Always; autoscaler v2 needs Never"},
		{"worker restarts under autoscaler v2", func(c *rayv1.RayCluster) {
			autoscale(c)
			c.Spec.AutoscalerOptions = &rayv1.AutoscalerOptions{Version: ptr.To(rayv1.AutoscalerVersionV2)}
			c.Spec.HeadGroupSpec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
			c.Spec.WorkerGroupSpecs[0].Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		}, "spec.workerGroupSpecs[0].template.spec.restartPolicy: OnFailure"},
		{"restarts under autoscaler v1", func(c *rayv1.RayCluster) {
			autoscale(c)
			c.Spec.AutoscalerOptions = &rayv1.AutoscalerOptions{Version: ptr.To(rayv1.AutoscalerVersionV1)}
			c.Spec.WorkerGroupSpecs[0].Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
		}, ""},
		{"minReplicas above maxReplicas (KubeRay v1.5.0 runs maxReplicas)", func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs[0].MinReplicas = ptr.To[int32](5)
			c.Spec.WorkerGroupSpecs[0].MaxReplicas = ptr.To[int32](2)
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := testutil.MakeRayCluster("ns", "rc").Workers("small", 1).Obj()
			tc.mutate(c)
			f := validate(c)
			switch {
			case tc.want == "" && f != nil:
				t.Errorf("refused: %+v", f)
			case tc.want != "" && (f == nil || f.reason != ReasonInvalidSpec || !strings.Contains(f.message, tc.want)):
				t.Errorf("validate = %+v, want %q", f, tc.want)
			}
		})
	}
}
