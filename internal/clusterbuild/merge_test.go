package clusterbuild

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// The default-PodTemplate merge follows Kubernetes' strategic merge: lists are merged by their real merge key or
// replaced, the user's template wins, one-of fields are never combined (issue 11).
func TestMergePodTemplateStrategic(t *testing.T) {
	ray := func(c corev1.Container) corev1.PodTemplateSpec {
		c.Name = "ray"
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	}
	nodeAffinity := func(values ...string) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: values}}}},
		}}}
	}
	secret := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}
	tests := []struct {
		name      string
		def, user corev1.PodTemplateSpec
		check     func(t *testing.T, got *corev1.PodTemplateSpec)
	}{{
		name: "args with repeated values are the user's, not de-duplicated",
		def:  corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "default", Args: []string{"--x", "1"}}}}},
		user: ray(corev1.Container{Args: []string{"--a", "1", "--b", "1"}}),
		check: func(t *testing.T, got *corev1.PodTemplateSpec) {
			if diff := cmp.Diff([]string{"--a", "1", "--b", "1"}, got.Spec.Containers[0].Args); diff != "" {
				t.Error(diff)
			}
		},
	}, {
		name: "two mounts of one volume are both kept (merge key mountPath)",
		def: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "default",
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}},
		user: ray(corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/cache", SubPath: "c"}}}),
		check: func(t *testing.T, got *corev1.PodTemplateSpec) {
			want := []corev1.VolumeMount{{Name: "data", MountPath: "/cache", SubPath: "c"}, {Name: "data", MountPath: "/data"}}
			if diff := cmp.Diff(want, got.Spec.Containers[0].VolumeMounts); diff != "" {
				t.Error(diff)
			}
		},
	}, {
		name: "node affinity terms are the user's, not appended",
		def:  corev1.PodTemplateSpec{Spec: corev1.PodSpec{Affinity: nodeAffinity("a")}},
		user: func() corev1.PodTemplateSpec {
			p := ray(corev1.Container{})
			p.Spec.Affinity = nodeAffinity("b")
			return p
		}(),
		check: func(t *testing.T, got *corev1.PodTemplateSpec) {
			if diff := cmp.Diff(nodeAffinity("b"), got.Spec.Affinity); diff != "" {
				t.Error(diff)
			}
		},
	}, {
		name: "env valueFrom replaces a default value, never both",
		def: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "default",
			Env: []corev1.EnvVar{{Name: "TOKEN", Value: "default"}, {Name: "PROXY", Value: "p"}}}}}},
		user: ray(corev1.Container{Env: []corev1.EnvVar{{Name: "TOKEN", ValueFrom: secret}, {Name: "URL", Value: "$(PROXY)/x"}}}),
		check: func(t *testing.T, got *corev1.PodTemplateSpec) {
			want := []corev1.EnvVar{{Name: "PROXY", Value: "p"}, {Name: "TOKEN", ValueFrom: secret}, {Name: "URL", Value: "$(PROXY)/x"}}
			if diff := cmp.Diff(want, got.Spec.Containers[0].Env); diff != "" {
				t.Error(diff)
			}
		},
	}, {
		name: "a volume of the user's name replaces the default's source",
		def: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{
			{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}},
		user: func() corev1.PodTemplateSpec {
			p := ray(corev1.Container{})
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}}}
			return p
		}(),
		check: func(t *testing.T, got *corev1.PodTemplateSpec) {
			for _, v := range got.Spec.Volumes {
				if v.Name == "data" && (v.EmptyDir != nil || v.ConfigMap == nil) {
					t.Errorf("volume data combined sources: %+v", v.VolumeSource)
				}
			}
			if len(got.Spec.Volumes) != 2 {
				t.Errorf("volumes %+v", got.Spec.Volumes)
			}
		},
	}, {
		name: "a probe the user sets replaces the default's handler",
		def: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "primary",
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}}}}},
		user: ray(corev1.Container{LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{}}}}),
		check: func(t *testing.T, got *corev1.PodTemplateSpec) {
			if p := got.Spec.Containers[0].LivenessProbe; p.Exec != nil || p.TCPSocket == nil {
				t.Errorf("probe %+v", p.ProbeHandler)
			}
		},
	}, {
		name: "Flyte's default-init and primary-init are bases of init containers",
		def: corev1.PodTemplateSpec{Spec: corev1.PodSpec{InitContainers: []corev1.Container{
			{Name: "default-init", Env: []corev1.EnvVar{{Name: "ALL", Value: "1"}}},
			{Name: "primary-init", Image: "init-image"},
			{Name: "extra-init", Image: "e"},
		}}},
		user: func() corev1.PodTemplateSpec {
			p := ray(corev1.Container{})
			p.Spec.InitContainers = []corev1.Container{{Name: "first"}, {Name: "second", Image: "mine"}}
			return p
		}(),
		check: func(t *testing.T, got *corev1.PodTemplateSpec) {
			want := []corev1.Container{
				{Name: "first", Image: "init-image", Env: []corev1.EnvVar{{Name: "ALL", Value: "1"}}},
				{Name: "second", Image: "mine", Env: []corev1.EnvVar{{Name: "ALL", Value: "1"}}},
				{Name: "extra-init", Image: "e"},
			}
			if diff := cmp.Diff(want, got.Spec.InitContainers); diff != "" {
				t.Error(diff)
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MergePodTemplate(&tc.def, &tc.user)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, got)
		})
	}
}
