package clusterbuild

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// AutoscalerContainer is the Ray autoscaler sidecar of the head pod, with autoscalerOptions applied.
func AutoscalerContainer(c *rayv1.RayCluster, rayImage string) corev1.Container {
	start := "ray kuberay-autoscaler --cluster-name $(RAY_CLUSTER_NAME) --cluster-namespace $(RAY_CLUSTER_NAMESPACE)"
	q := func(s string) resource.Quantity { return resource.MustParse(s) }
	ctr := corev1.Container{
		Name:            AutoscalerContainerName,
		Image:           rayImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         ShellCommand(),
		Args:            []string{start},
		Env: []corev1.EnvVar{
			fieldEnv("RAY_CLUSTER_NAME", "metadata.labels['"+rayv1.LabelCluster+"']"),
			fieldEnv("RAY_CLUSTER_NAMESPACE", "metadata.namespace"),
			fieldEnv("RAY_HEAD_POD_NAME", "metadata.name"),
			{Name: "KUBERAY_CRD_VER", Value: CRDVersion},
			{Name: EnvAutoscalerStartCmd, Value: start},
		},
		Resources: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{corev1.ResourceCPU: q("500m"), corev1.ResourceMemory: q("512Mi")},
			Requests: corev1.ResourceList{corev1.ResourceCPU: q("500m"), corev1.ResourceMemory: q("512Mi")},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: RayLogsVolumeName, MountPath: RayLogsMountPath}},
	}
	if TLSEnabled(c) {
		// The autoscaler dials the GCS at 127.0.0.1, which the head's certificate always names.
		setContainerTLS(&ctr)
	}
	o := c.Spec.AutoscalerOptions
	if o == nil {
		return ctr
	}
	if o.Image != nil && *o.Image != "" {
		ctr.Image = *o.Image
	}
	if o.ImagePullPolicy != nil && *o.ImagePullPolicy != "" {
		ctr.ImagePullPolicy = *o.ImagePullPolicy
	}
	if o.Resources != nil {
		ctr.Resources = *o.Resources.DeepCopy()
	}
	if o.SecurityContext != nil {
		ctr.SecurityContext = o.SecurityContext.DeepCopy()
	}
	if len(o.Command) > 0 {
		ctr.Command = append([]string(nil), o.Command...)
	}
	if len(o.Args) > 0 {
		ctr.Args = append([]string(nil), o.Args...)
	}
	ctr.Env = append(ctr.Env, o.Env...)
	ctr.EnvFrom = append(ctr.EnvFrom, o.EnvFrom...)
	ctr.VolumeMounts = append(ctr.VolumeMounts, o.VolumeMounts...)
	return ctr
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

// AutoscalerServiceAccount is the identity of the head pod when the autoscaler runs.
func AutoscalerServiceAccount(c *rayv1.RayCluster) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: autoscalerMeta(c, AutoscalerServiceAccountName(c))}
}

// AutoscalerRole lets the autoscaler read and patch pods and the RayCluster (it writes replicas and
// workersToDelete).
func AutoscalerRole(c *rayv1.RayCluster) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: autoscalerMeta(c, AutoscalerRoleName(c)),
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"pods/resize"}, Verbs: []string{"patch"}},
			{APIGroups: []string{rayv1.GroupVersion.Group}, Resources: []string{"rayclusters"}, Verbs: []string{"get", "patch"}},
		},
	}
}

// AutoscalerRoleBinding binds AutoscalerRole to AutoscalerServiceAccount.
func AutoscalerRoleBinding(c *rayv1.RayCluster) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: autoscalerMeta(c, AutoscalerRoleName(c)),
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: AutoscalerServiceAccountName(c), Namespace: c.Namespace}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: AutoscalerRoleName(c)},
	}
}

func autoscalerMeta(c *rayv1.RayCluster, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       c.Namespace,
		Labels:          map[string]string{rayv1.LabelCluster: c.Name, rayv1.LabelAppName: rayv1.AppNameValue, rayv1.LabelCreatedBy: rayv1.CreatedByValue},
		OwnerReferences: []metav1.OwnerReference{*OwnerReference(c)},
	}
}
