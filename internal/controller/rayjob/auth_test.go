package rayjob

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
)

func authEnv(secret string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "RAY_AUTH_MODE", Value: "token"},
		{Name: "RAY_AUTH_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "auth_token"}}},
	}
}

func pick(env []corev1.EnvVar, names ...string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, n := range names {
		for _, e := range env {
			if e.Name == n {
				out = append(out, e)
			}
		}
	}
	return out
}

// The submitter calls the dashboard with `ray job submit`, which takes the token from RAY_AUTH_TOKEN: in both
// modes it gets the cluster's Secret by reference (the cluster's own name: the Secret the RayCluster controller
// creates for it), or the Secret the user names.
func TestSubmitterAuthEnv(t *testing.T) {
	for _, tc := range []struct {
		name, secret string
		opts         *rayv1.AuthOptions
	}{
		{"generated secret", "j-abcde", &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}},
		{"named secret", "mine", &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, SecretName: ptr.To("mine")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := job(func(j *rayv1.RayJob) { j.Spec.RayClusterSpec.AuthOptions = tc.opts })
			cluster := ClusterFor(j, "j-abcde")
			sub := SubmitterJob(j, cluster, "http://j-abcde-head-svc.ns.svc.cluster.local:8265").Spec.Template.Spec.Containers[0]
			if diff := cmp.Diff(authEnv(tc.secret), pick(sub.Env, "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")); diff != "" {
				t.Errorf("K8sJobMode submitter env (-want +got):\n%s", diff)
			}

			j.Spec.SubmissionMode = rayv1.SidecarMode
			head := ClusterFor(j, "j-abcde").Spec.HeadGroupSpec.Template.Spec
			if len(head.Containers) != 2 || head.Containers[1].Name != SubmitterContainerName {
				t.Fatalf("head containers = %+v", head.Containers)
			}
			if diff := cmp.Diff(authEnv(tc.secret), pick(head.Containers[1].Env, "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")); diff != "" {
				t.Errorf("SidecarMode submitter env (-want +got):\n%s", diff)
			}
			// The head's Ray container gets it from the builder, as every cluster's does.
			sidecarCluster := ClusterFor(j, "j-abcde")
			pod := clusterbuild.HeadPod(sidecarCluster, clusterbuild.PodOptions{})
			if diff := cmp.Diff(authEnv(tc.secret), pick(pod.Spec.Containers[0].Env, "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")); diff != "" {
				t.Errorf("head Ray container env (-want +got):\n%s", diff)
			}
		})
	}
	j := job(nil)
	sub := SubmitterJob(j, ClusterFor(j, "j-abcde"), "http://x:8265").Spec.Template.Spec.Containers[0]
	if got := pick(sub.Env, "RAY_AUTH_MODE", "RAY_AUTH_TOKEN"); len(got) > 0 {
		t.Errorf("submitter of a cluster without auth got %+v", got)
	}
}

// KubeRay refuses enableK8sTokenAuth for a RayJob's cluster: the submitter holds no ServiceAccount token Ray
// would accept.
func TestValidateRefusesK8sTokenAuth(t *testing.T) {
	j := job(func(j *rayv1.RayJob) {
		j.Spec.RayClusterSpec.RayVersion = "2.55.0"
		j.Spec.RayClusterSpec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, EnableK8sTokenAuth: ptr.To(true)}
	})
	errs := Validate(j)
	if len(errs) == 0 || errs[0].Field != "spec.rayClusterSpec.authOptions.enableK8sTokenAuth" {
		t.Errorf("errors = %v", errs)
	}
}
