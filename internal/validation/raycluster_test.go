package validation

import (
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// topSpec matches the paths that start at the spec (not template.spec).
var topSpec = regexp.MustCompile(`(^|[ (])spec\.`)

func cluster() *rayv1.RayCluster {
	pod := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray", Image: "rayproject/ray"}}}}
	return &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "rc"},
		Spec: rayv1.RayClusterSpec{
			HeadGroupSpec:    rayv1.HeadGroupSpec{Template: pod},
			WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{GroupName: "small", Template: pod}},
		},
	}
}

// The rules name the field under the path they are given, so a RayJob's or a RayService's embedded spec is
// reported where the user wrote it, with the same words as a RayCluster's.
func TestClusterSpecNamesTheFieldUnderPath(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*rayv1.RayCluster)
		want   string // the message under path spec
	}{
		{"no head container", func(c *rayv1.RayCluster) { c.Spec.HeadGroupSpec.Template.Spec.Containers = nil },
			"spec.headGroupSpec.template.spec.containers: the head needs at least one container"},
		{"worker without container", func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].Template.Spec.Containers = nil },
			`spec.workerGroupSpecs[0].template.spec.containers: worker group "small" needs at least one container`},
		{"resources twice", func(c *rayv1.RayCluster) {
			c.Spec.WorkerGroupSpecs[0].Resources = map[string]string{"CPU": "1"}
			c.Spec.WorkerGroupSpecs[0].RayStartParams = map[string]string{"num-cpus": "1"}
		}, "spec.workerGroupSpecs[0]: rayStartParams[num-cpus] and resources both set the group's resources; use only one"},
		{"label value", func(c *rayv1.RayCluster) { c.Spec.HeadGroupSpec.Labels = map[string]string{"a": "b c"} },
			`spec.headGroupSpec.labels[a]: invalid value "b c": `},
		{"suspended group under the autoscaler", func(c *rayv1.RayCluster) {
			c.Spec.EnableInTreeAutoscaling = ptr.To(true)
			c.Spec.WorkerGroupSpecs[0].Suspend = ptr.To(true)
		}, `spec.workerGroupSpecs[0].suspend: worker group "small" cannot be suspended while the autoscaler runs (spec.enableInTreeAutoscaling)`},
		{"redis password in params", func(c *rayv1.RayCluster) {
			c.Spec.GcsFaultToleranceOptions = &rayv1.GcsFaultToleranceOptions{RedisAddress: "redis:6379"}
			c.Spec.HeadGroupSpec.RayStartParams = map[string]string{"redis-password": "x"}
		}, "spec.headGroupSpec.rayStartParams[redis-password]: use spec.gcsFaultToleranceOptions.redisPassword"},
		{"token auth without a Ray version", func(c *rayv1.RayCluster) {
			c.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}
		}, "spec.rayVersion: spec.authOptions.mode: token needs Ray 2.52.0 or later"},
		{"token auth on an old Ray", func(c *rayv1.RayCluster) {
			c.Spec.RayVersion = "2.51.1"
			c.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}
		}, `spec.rayVersion: 2.51.1: spec.authOptions.mode: token needs Ray 2.52.0 or later`},
		{"token auth, version not a version", func(c *rayv1.RayCluster) {
			c.Spec.RayVersion = "latest"
			c.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}
		}, `spec.rayVersion: "latest" is not a version`},
		{"k8s token auth without mode token", func(c *rayv1.RayCluster) {
			c.Spec.AuthOptions = &rayv1.AuthOptions{EnableK8sTokenAuth: ptr.To(true)}
		}, "spec.authOptions.enableK8sTokenAuth: needs spec.authOptions.mode: token"},
		{"k8s token auth on Ray 2.52", func(c *rayv1.RayCluster) {
			c.Spec.RayVersion = "2.52.0"
			c.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, EnableK8sTokenAuth: ptr.To(true)}
		}, `spec.rayVersion: 2.52.0: spec.authOptions.enableK8sTokenAuth needs Ray 2.55.0 or later`},
		{"k8s token auth with a secret", func(c *rayv1.RayCluster) {
			c.Spec.RayVersion = "2.55.0"
			c.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, EnableK8sTokenAuth: ptr.To(true), SecretName: ptr.To("s")}
		}, "spec.authOptions.secretName: Ray checks Kubernetes tokens when spec.authOptions.enableK8sTokenAuth is true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster()
			tc.mutate(c)
			if got := Message(RayCluster(c)); !strings.HasPrefix(got, tc.want) {
				t.Errorf("RayCluster: %q, want it to start with %q", got, tc.want)
			}
			under := field.NewPath("spec", "rayClusterConfig")
			want := topSpec.ReplaceAllString(tc.want, "${1}spec.rayClusterConfig.")
			if got := Message(ClusterSpec(&c.Spec, c.Annotations, under)); !strings.HasPrefix(got, want) {
				t.Errorf("embedded: %q, want it to start with %q", got, want)
			}
		})
	}
	if errs := RayCluster(cluster()); len(errs) > 0 {
		t.Errorf("a valid cluster is refused: %v", errs)
	}
	for _, o := range []*rayv1.AuthOptions{
		{Mode: rayv1.AuthModeToken}, {Mode: rayv1.AuthModeToken, SecretName: ptr.To("s")},
		{Mode: rayv1.AuthModeDisabled}, {Mode: rayv1.AuthModeToken, EnableK8sTokenAuth: ptr.To(true)},
	} {
		c := cluster()
		c.Spec.RayVersion = "2.55.0"
		c.Spec.AuthOptions = o
		if errs := RayCluster(c); len(errs) > 0 {
			t.Errorf("authOptions %+v refused: %v", o, errs)
		}
	}
}

// A RayJob's or RayService's cluster may not use Kubernetes token authentication (KubeRay refuses it too).
func TestNoK8sTokenAuth(t *testing.T) {
	spec := &cluster().Spec
	p := field.NewPath("spec", "rayClusterSpec")
	if errs := NoK8sTokenAuth(spec, p); len(errs) > 0 {
		t.Errorf("no authOptions refused: %v", errs)
	}
	spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, EnableK8sTokenAuth: ptr.To(true)}
	if got, want := Message(NoK8sTokenAuth(spec, p)), "spec.rayClusterSpec.authOptions.enableK8sTokenAuth: Kubernetes token authentication is for standalone RayClusters only"; !strings.HasPrefix(got, want) {
		t.Errorf("%q, want it to start with %q", got, want)
	}
}

// A missing head container does not stop the other rules, and the rules that read it are skipped.
func TestClusterSpecWithoutHeadContainerReportsTheRest(t *testing.T) {
	c := cluster()
	c.Spec.HeadGroupSpec.Template.Spec.Containers = nil
	c.Spec.EnableInTreeAutoscaling = ptr.To(true)
	c.Spec.WorkerGroupSpecs[0].Template.Spec.Containers = nil
	errs := ClusterSpec(&c.Spec, nil, field.NewPath("spec"))
	if len(errs) != 2 || errs[0].Field != "spec.headGroupSpec.template.spec.containers" || errs[1].Field != "spec.workerGroupSpecs[0].template.spec.containers" {
		t.Errorf("errors %v, want the head's then the worker's containers", errs)
	}
}

func TestRayClusterName(t *testing.T) {
	c := cluster()
	c.Name = strings.Repeat("a", MaxClusterNameLen+1)
	if got := Message(RayCluster(c)); !strings.HasPrefix(got, "metadata.name: a RayCluster name may have at most 53 characters") {
		t.Errorf("long name: %q", got)
	}
	c.Name = "1abc"
	if got := Message(RayCluster(c)); !strings.HasPrefix(got, `metadata.name: "1abc" is not a DNS-1035 label`) {
		t.Errorf("DNS-1035: %q", got)
	}
}

func TestGroupResourcesAreQuantities(t *testing.T) {
	if errs := group(field.NewPath("p"), nil, map[string]string{"cpu": "500m", "memory": "8Gi", "x": "1"}, nil); len(errs) > 0 {
		t.Errorf("quantities refused: %v", errs)
	}
	errs := group(field.NewPath("spec", "headGroupSpec"), nil, map[string]string{"cpu": "lots"}, nil)
	if len(errs) != 1 || errs[0].Field != "spec.headGroupSpec.resources[cpu]" {
		t.Errorf("errs = %v, want the field named", errs)
	}
}

// KubeRay v1.7 refuses the worker group fields only autoscaler v2 reads on a cluster that does not ask for it, a
// priority older Ray cannot read, and a user value for the autoscaler's generated start command; each error names
// its field and says what KubeRay says.
func TestAutoscalerV2OnlyFields(t *testing.T) {
	v2 := func(c *rayv1.RayCluster) {
		c.Spec.EnableInTreeAutoscaling = ptr.To(true)
		c.Spec.AutoscalerOptions = &rayv1.AutoscalerOptions{Version: ptr.To(rayv1.AutoscalerVersionV2)}
	}
	tests := []struct {
		name   string
		mutate func(*rayv1.RayCluster)
		want   string // the message; empty: accepted
	}{
		{"idle timeout without autoscaler v2", func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].IdleTimeoutSeconds = ptr.To[int32](30) },
			"spec.workerGroupSpecs[0].idleTimeoutSeconds: worker group small: idleTimeoutSeconds is set, but autoscaler v2 is not enabled. Please set .spec.autoscalerOptions.version to 'v2' (or set RAY_enable_autoscaler_v2 environment variable to 'true' in the head pod if using KubeRay < 1.4.0)"},
		{"idle timeout under autoscaler v1", func(c *rayv1.RayCluster) {
			v2(c)
			c.Spec.AutoscalerOptions.Version = ptr.To(rayv1.AutoscalerVersionV1)
			c.Spec.WorkerGroupSpecs[0].IdleTimeoutSeconds = ptr.To[int32](30)
		}, "spec.workerGroupSpecs[0].idleTimeoutSeconds: worker group small: idleTimeoutSeconds is set, but autoscaler v2 is not enabled."},
		{"idle timeout with autoscaler v2", func(c *rayv1.RayCluster) { v2(c); c.Spec.WorkerGroupSpecs[0].IdleTimeoutSeconds = ptr.To[int32](30) }, ""},
		{"idle timeout with the v2 env", func(c *rayv1.RayCluster) {
			c.Spec.EnableInTreeAutoscaling = ptr.To(true)
			c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "RAY_enable_autoscaler_v2", Value: "1"}}
			c.Spec.WorkerGroupSpecs[0].IdleTimeoutSeconds = ptr.To[int32](30)
		}, ""},
		{"negative idle timeout", func(c *rayv1.RayCluster) { v2(c); c.Spec.WorkerGroupSpecs[0].IdleTimeoutSeconds = ptr.To[int32](-1) },
			"spec.workerGroupSpecs[0].idleTimeoutSeconds: worker group small: idleTimeoutSeconds must be non-negative, got -1"},
		{"negative cluster idle timeout", func(c *rayv1.RayCluster) { v2(c); c.Spec.AutoscalerOptions.IdleTimeoutSeconds = ptr.To[int32](-5) },
			"spec.autoscalerOptions.idleTimeoutSeconds: autoscalerOptions.idleTimeoutSeconds must be non-negative, got -5"},
		{"priority 0 needs nothing", func(c *rayv1.RayCluster) { c.Spec.WorkerGroupSpecs[0].Priority = ptr.To[int32](0) }, ""},
		{"priority without a Ray version", func(c *rayv1.RayCluster) { v2(c); c.Spec.WorkerGroupSpecs[0].Priority = ptr.To[int32](3) },
			"spec.workerGroupSpecs[0].priority: worker group small: priority is set, but RayVersion was not specified. Ray version 2.56.0 or later is required"},
		{"priority with an unparsable Ray version", func(c *rayv1.RayCluster) {
			v2(c)
			c.Spec.RayVersion = "latest"
			c.Spec.WorkerGroupSpecs[0].Priority = ptr.To[int32](3)
		}, "spec.rayVersion: worker group small: priority is set, but RayVersion format is invalid: latest, "},
		{"priority on Ray 2.55", func(c *rayv1.RayCluster) {
			v2(c)
			c.Spec.RayVersion = "2.55.1"
			c.Spec.WorkerGroupSpecs[0].Priority = ptr.To[int32](3)
		}, "spec.workerGroupSpecs[0].priority: worker group small: priority is set, but minimum Ray version is 2.56.0, got 2.55.1"},
		{"priority on Ray 2.56 without autoscaler v2", func(c *rayv1.RayCluster) {
			c.Spec.RayVersion = "2.56.0"
			c.Spec.WorkerGroupSpecs[0].Priority = ptr.To[int32](3)
		}, "spec.workerGroupSpecs[0].priority: worker group small: priority is set to 3, but autoscaler v2 is not enabled. Priority is only supported with autoscaler v2 enabled"},
		{"priority on Ray 2.56 with autoscaler v2", func(c *rayv1.RayCluster) {
			v2(c)
			c.Spec.RayVersion = "2.56.0"
			c.Spec.WorkerGroupSpecs[0].Priority = ptr.To[int32](3)
		}, ""},
		{"autoscaler start command set by the user", func(c *rayv1.RayCluster) {
			v2(c)
			c.Spec.AutoscalerOptions.Env = []corev1.EnvVar{{Name: "KUBERAY_GEN_AUTOSCALER_START_CMD", Value: "ray kuberay-autoscaler"}}
		}, "spec.autoscalerOptions.env[KUBERAY_GEN_AUTOSCALER_START_CMD]: autoscalerOptions.env must not contain KUBERAY_GEN_AUTOSCALER_START_CMD: it is managed by the operator and injected automatically into the autoscaler container"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster()
			tc.mutate(c)
			got := Message(RayCluster(c))
			if tc.want == "" {
				if got != "" {
					t.Fatalf("refused: %s", got)
				}
				return
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("got %q, want it to start with %q", got, tc.want)
			}
			// The same rule for a RayService's embedded spec, named where the user wrote it.
			under := field.NewPath("spec", "rayClusterConfig")
			if got := Message(ClusterSpec(&c.Spec, c.Annotations, under)); !strings.HasPrefix(got, topSpec.ReplaceAllString(tc.want, "${1}spec.rayClusterConfig.")) {
				t.Errorf("embedded: %q", got)
			}
		})
	}
}

// Under an explicitly chosen autoscaler v1, worker groups that restart in place are warned about (KubeRay v1.7),
// not refused, and the pods keep the template's policy.
func TestAutoscalerV1RestartPolicyWarning(t *testing.T) {
	c := cluster()
	c.Spec.EnableInTreeAutoscaling = ptr.To(true)
	c.Spec.AutoscalerOptions = &rayv1.AutoscalerOptions{Version: ptr.To(rayv1.AutoscalerVersionV1)}
	c.Spec.WorkerGroupSpecs = append(c.Spec.WorkerGroupSpecs, *c.Spec.WorkerGroupSpecs[0].DeepCopy(), *c.Spec.WorkerGroupSpecs[0].DeepCopy())
	c.Spec.WorkerGroupSpecs[0].Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	c.Spec.WorkerGroupSpecs[1].GroupName = "never"
	c.Spec.WorkerGroupSpecs[1].Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	c.Spec.WorkerGroupSpecs[2].GroupName = "onfailure"
	c.Spec.WorkerGroupSpecs[2].Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	if errs := RayCluster(c); len(errs) > 0 {
		t.Fatalf("refused: %v", errs)
	}
	want := "spec.workerGroupSpecs[0].template.spec.restartPolicy, spec.workerGroupSpecs[2].template.spec.restartPolicy: " +
		"restartPolicy for worker groups [small, onfailure] should be Never or unset when using autoscaler V1"
	if got := AutoscalerV1RestartPolicy(&c.Spec, field.NewPath("spec")); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	// Only an explicit v1: unset (v2 by Ray's default) and v2 (refused elsewhere) say nothing here.
	c.Spec.AutoscalerOptions.Version = nil
	if got := AutoscalerV1RestartPolicy(&c.Spec, field.NewPath("spec")); got != "" {
		t.Errorf("without a version: %q", got)
	}
	c.Spec.AutoscalerOptions.Version = ptr.To(rayv1.AutoscalerVersionV1)
	c.Spec.EnableInTreeAutoscaling = nil
	if got := AutoscalerV1RestartPolicy(&c.Spec, field.NewPath("spec")); got != "" {
		t.Errorf("without the autoscaler: %q", got)
	}
}
