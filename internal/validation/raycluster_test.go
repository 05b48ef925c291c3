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
