package clusterbuild

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

func tokenRef(secret string) corev1.EnvVar {
	return corev1.EnvVar{Name: EnvRayAuthToken, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "auth_token"}}}
}

func envNamed(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func containerNamed(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// Every Ray process of a token-auth cluster gets RAY_AUTH_MODE and the token by reference to the Secret, never
// inline: the head's Ray container, the autoscaler (it calls the GCS), each worker and its wait-for-GCS init
// container; other containers and init containers the user brings are left alone, as KubeRay leaves them.
func TestAuthEnvOnEveryRayContainer(t *testing.T) {
	for _, tc := range []struct {
		name, secret string
		opts         *rayv1.AuthOptions
	}{
		{"generated secret", "rc", &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}},
		{"named secret", "mine", &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, SecretName: ptr.To("mine")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster()
			c.Spec.AuthOptions = tc.opts
			c.Spec.EnableInTreeAutoscaling = ptr.To(true)
			c.Spec.HeadGroupSpec.Template.Spec.Containers = append(c.Spec.HeadGroupSpec.Template.Spec.Containers, corev1.Container{Name: "logger", Image: "busybox"})
			c.Spec.WorkerGroupSpecs[0].Template.Spec.InitContainers = []corev1.Container{{Name: "fetch-data", Image: "busybox"}}
			head := HeadPod(c, PodOptions{})
			worker := WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{})
			want := []*corev1.Container{
				&head.Spec.Containers[RayContainerIndex],
				containerNamed(head.Spec.Containers, AutoscalerContainerName),
				&worker.Spec.Containers[RayContainerIndex],
				containerNamed(worker.Spec.InitContainers, WaitGCSInitContainerName),
			}
			for _, ctr := range want {
				if ctr == nil {
					t.Fatal("a Ray container is missing")
				}
				mode := envNamed(ctr, EnvRayAuthMode)
				if mode == nil || mode.Value != "token" {
					t.Errorf("%s: RAY_AUTH_MODE = %+v, want token", ctr.Name, mode)
				}
				if diff := cmp.Diff(ptr.To(tokenRef(tc.secret)), envNamed(ctr, EnvRayAuthToken)); diff != "" {
					t.Errorf("%s: RAY_AUTH_TOKEN (-want +got):\n%s", ctr.Name, diff)
				}
			}
			for _, ctr := range []*corev1.Container{containerNamed(head.Spec.Containers, "logger"), containerNamed(worker.Spec.InitContainers, "fetch-data")} {
				if envNamed(ctr, EnvRayAuthMode) != nil || envNamed(ctr, EnvRayAuthToken) != nil {
					t.Errorf("%s: got Ray auth env, which only Ray containers get", ctr.Name)
				}
			}
		})
	}
}

// Without authOptions, or with mode disabled, nothing changes: the pods are those of a cluster without the field.
func TestAuthOffBuildsNothing(t *testing.T) {
	plain := cluster()
	for _, o := range []*rayv1.AuthOptions{nil, {Mode: rayv1.AuthModeDisabled}, {}} {
		c := cluster()
		c.Spec.AuthOptions = o
		if diff := cmp.Diff(HeadPod(plain, PodOptions{}), HeadPod(c, PodOptions{})); diff != "" {
			t.Errorf("%+v: head differs (-plain +got):\n%s", o, diff)
		}
		if diff := cmp.Diff(WorkerPod(plain, &plain.Spec.WorkerGroupSpecs[0], PodOptions{}), WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{})); diff != "" {
			t.Errorf("%+v: worker differs (-plain +got):\n%s", o, diff)
		}
	}
}

// A variable the user set on the Ray container wins over the operator's, as in KubeRay (which adds its own only
// when the name is absent).
func TestAuthEnvKeepsTheUsers(t *testing.T) {
	c := cluster()
	c.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}
	own := corev1.EnvVar{Name: EnvRayAuthToken, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "vault"}, Key: "t"}}}
	c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Env = []corev1.EnvVar{own}
	head := HeadPod(c, PodOptions{})
	n := 0
	for _, e := range head.Spec.Containers[0].Env {
		if e.Name == EnvRayAuthToken {
			n++
			if diff := cmp.Diff(own, e); diff != "" {
				t.Errorf("RAY_AUTH_TOKEN (-user +got):\n%s", diff)
			}
		}
	}
	if n != 1 {
		t.Errorf("RAY_AUTH_TOKEN appears %d times", n)
	}
}

// enableK8sTokenAuth: Ray checks ServiceAccount tokens, so no Secret; the projected token is mounted where Ray
// reads it.
func TestK8sTokenAuthPods(t *testing.T) {
	c := cluster()
	c.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, EnableK8sTokenAuth: ptr.To(true)}
	for _, pod := range []*corev1.Pod{HeadPod(c, PodOptions{}), WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], PodOptions{})} {
		ray := &pod.Spec.Containers[RayContainerIndex]
		if e := envNamed(ray, EnvRayK8sTokenAuth); e == nil || e.Value != "true" {
			t.Errorf("%s: %s = %+v", pod.GenerateName, EnvRayK8sTokenAuth, e)
		}
		if e := envNamed(ray, EnvRayAuthToken); e != nil {
			t.Errorf("%s: RAY_AUTH_TOKEN set with enableK8sTokenAuth: %+v", pod.GenerateName, e)
		}
		var mounted, projected bool
		for _, m := range ray.VolumeMounts {
			mounted = mounted || (m.Name == RayTokenVolumeName && m.MountPath == "/var/run/secrets/ray.io/serviceaccount" && m.ReadOnly)
		}
		for _, v := range pod.Spec.Volumes {
			projected = projected || (v.Name == RayTokenVolumeName && v.Projected != nil && v.Projected.Sources[0].ServiceAccountToken.Path == "token")
		}
		if !mounted || !projected {
			t.Errorf("%s: token mount %v, projected volume %v", pod.GenerateName, mounted, projected)
		}
	}
	if AuthSecretWanted(c) {
		t.Error("a Secret is wanted with enableK8sTokenAuth")
	}
}

func TestAuthSecret(t *testing.T) {
	c := cluster()
	c.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}
	if !AuthSecretWanted(c) {
		t.Fatal("no Secret wanted for mode token")
	}
	a, err := AuthSecret(c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := AuthSecret(c)
	if a.Name != "rc" || a.Namespace != "ns" || a.Labels[rayv1.LabelCluster] != "rc" {
		t.Errorf("secret meta %+v", a.ObjectMeta)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{*OwnerReference(c)}, a.OwnerReferences); diff != "" {
		t.Errorf("owner (-want +got):\n%s", diff)
	}
	raw, err := base64.StdEncoding.DecodeString(string(a.Data["auth_token"]))
	if err != nil || len(raw) != 32 {
		t.Errorf("token %q: %d random bytes, %v", a.Data["auth_token"], len(raw), err)
	}
	if string(a.Data["auth_token"]) == string(b.Data["auth_token"]) {
		t.Error("two Secrets got the same token")
	}
	for _, o := range []*rayv1.AuthOptions{nil, {Mode: rayv1.AuthModeDisabled}, {Mode: rayv1.AuthModeToken, SecretName: ptr.To("mine")}} {
		c.Spec.AuthOptions = o
		if AuthSecretWanted(c) {
			t.Errorf("%+v: Secret wanted", o)
		}
	}
}

// The operator's Secret has KubeRay's name, so tools that look for it there (kubectl ray get token) find it.
func TestAuthSecretName(t *testing.T) {
	long := strings.Repeat("a", 10) + strings.Repeat("b", 43) // 53 characters, the longest RayCluster name
	for name, want := range map[string]string{
		"rc":                           "rc",
		long:                           long[3:],
		"x-" + strings.Repeat("1", 50): "r" + strings.Repeat("1", 49),
	} {
		c := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if got := AuthSecretName(c); got != want {
			t.Errorf("AuthSecretName(%q) = %q, want %q", name, got, want)
		}
	}
}
