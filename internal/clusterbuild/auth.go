package clusterbuild

import (
	"crypto/rand"
	"encoding/base64"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// Ray token authentication (spec.authOptions), with the names KubeRay v1.7 uses, so that Secrets, tools and
// manifests written for KubeRay find each other here.
const (
	// EnvRayAuthMode turns on Ray's token authentication ("token").
	EnvRayAuthMode = "RAY_AUTH_MODE"
	// EnvRayAuthToken carries the token into every Ray process and the submitter.
	EnvRayAuthToken = "RAY_AUTH_TOKEN" // #nosec G101 -- a variable name, not a credential
	// EnvRayK8sTokenAuth makes Ray check Kubernetes ServiceAccount tokens instead of a shared one.
	EnvRayK8sTokenAuth = "RAY_ENABLE_K8S_TOKEN_AUTH" // #nosec G101 -- a variable name
	// AuthTokenSecretKey is the key of the token in the Secret.
	AuthTokenSecretKey = "auth_token" // #nosec G101 -- a key name
	// RayTokenVolumeName is the projected ServiceAccount token volume of enableK8sTokenAuth.
	RayTokenVolumeName = "ray-token"
	// RayTokenMountPath is where Ray reads that token.
	RayTokenMountPath = "/var/run/secrets/ray.io/serviceaccount" // #nosec G101 -- a path

	authTokenBytes = 32
)

// AuthEnabled says whether the cluster's Ray processes require a token (authOptions.mode: token).
func AuthEnabled(spec *rayv1.RayClusterSpec) bool {
	return spec.AuthOptions != nil && spec.AuthOptions.Mode == rayv1.AuthModeToken
}

// K8sTokenAuth says whether Ray checks Kubernetes ServiceAccount tokens (authOptions.enableK8sTokenAuth).
func K8sTokenAuth(spec *rayv1.RayClusterSpec) bool {
	return spec.AuthOptions != nil && ptr.Deref(spec.AuthOptions.EnableK8sTokenAuth, false)
}

// AuthSecretName is the Secret holding the cluster's token: authOptions.secretName, else KubeRay's name for the
// one the operator creates (the cluster's name, cut to its last 50 characters and made to start with a letter).
func AuthSecretName(c *rayv1.RayCluster) string {
	if o := c.Spec.AuthOptions; o != nil && ptr.Deref(o.SecretName, "") != "" {
		return *o.SecretName
	}
	s := c.Name
	if len(s) > 50 {
		s = s[len(s)-50:]
	}
	if s != "" && (unicode.IsDigit(rune(s[0])) || unicode.IsPunct(rune(s[0]))) {
		s = "r" + s[1:]
	}
	return s
}

// AuthSecretWanted says whether the operator creates the token Secret: as KubeRay, whenever authOptions is set and
// not disabled, unless the user names a Secret or Ray checks Kubernetes tokens instead.
func AuthSecretWanted(c *rayv1.RayCluster) bool {
	o := c.Spec.AuthOptions
	return o != nil && o.Mode != rayv1.AuthModeDisabled && !K8sTokenAuth(&c.Spec) && ptr.Deref(o.SecretName, "") == ""
}

// AuthSecret is the token Secret the operator creates for c, holding a fresh random token. The cluster owns it, so
// it goes with the cluster; it is never rewritten, since running Ray processes hold the token they started with.
func AuthSecret(c *rayv1.RayCluster) (*corev1.Secret, error) {
	b := make([]byte, authTokenBytes)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: AuthSecretName(c), Namespace: c.Namespace,
			Labels:          map[string]string{rayv1.LabelCluster: c.Name},
			OwnerReferences: []metav1.OwnerReference{*OwnerReference(c)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{AuthTokenSecretKey: []byte(base64.StdEncoding.EncodeToString(b))},
	}, nil
}

// AddAuthEnv gives a container what Ray's token authentication needs, when the cluster asks for it: the mode, and
// the token from the Secret (never inline), or with enableK8sTokenAuth the ServiceAccount token's mount. A variable
// or mount the container already has is kept, so users can override them.
func AddAuthEnv(ctr *corev1.Container, c *rayv1.RayCluster) {
	if !AuthEnabled(&c.Spec) {
		return
	}
	setEnv(ctr, EnvRayAuthMode, string(rayv1.AuthModeToken))
	if K8sTokenAuth(&c.Spec) {
		setEnv(ctr, EnvRayK8sTokenAuth, "true")
		for _, m := range ctr.VolumeMounts {
			if m.Name == RayTokenVolumeName {
				return
			}
		}
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: RayTokenVolumeName, MountPath: RayTokenMountPath, ReadOnly: true})
		return
	}
	for _, e := range ctr.Env {
		if e.Name == EnvRayAuthToken {
			return
		}
	}
	ctr.Env = append(ctr.Env, corev1.EnvVar{Name: EnvRayAuthToken, ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: AuthSecretName(c)},
			Key:                  AuthTokenSecretKey,
		},
	}})
}

// AddAuthVolume adds the projected ServiceAccount token volume enableK8sTokenAuth mounts (AddAuthEnv).
func AddAuthVolume(spec *corev1.PodSpec, c *rayv1.RayCluster) {
	if !AuthEnabled(&c.Spec) || !K8sTokenAuth(&c.Spec) {
		return
	}
	for _, v := range spec.Volumes {
		if v.Name == RayTokenVolumeName {
			return
		}
	}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: RayTokenVolumeName, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
		}},
	}})
}

// addPodAuth applies AddAuthEnv to the pod's Ray container and the wait-for-GCS init container (which calls the
// GCS, where Ray checks the token too), and adds the volume they mount.
func addPodAuth(pod *corev1.Pod, c *rayv1.RayCluster) {
	if !AuthEnabled(&c.Spec) {
		return
	}
	AddAuthEnv(&pod.Spec.Containers[RayContainerIndex], c)
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == WaitGCSInitContainerName {
			AddAuthEnv(&pod.Spec.InitContainers[i], c)
		}
	}
	AddAuthVolume(&pod.Spec, c)
}
