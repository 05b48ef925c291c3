package apiserver

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// What KubeRay's API server puts into the Ray container of every pod template it builds, and so what its clients
// and samples rely on: rayStartParams such as node-ip-address: $MY_POD_IP expand only because MY_POD_IP is
// defined, and workers leave the cluster cleanly because of the preStop hook. These come first in the container's
// env, before the user's variables and before the operator's generated ray start command that may use them.

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

func resourceEnv(name, container, res string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: container, Resource: res}}}
}

// kubeRayEnv is the env KubeRay's API server gives the container named container (ray-head or ray-worker).
// KubeRay's MEMORY_* variables read the memory resources (older KubeRay releases read CPU for them by mistake).
func kubeRayEnv(container string) []corev1.EnvVar {
	if container == headContainerName {
		return []corev1.EnvVar{fieldEnv("MY_POD_IP", "status.podIP")}
	}
	return []corev1.EnvVar{
		{Name: "RAY_DISABLE_DOCKER_CPU_WARNING", Value: "1"},
		{Name: "TYPE", Value: "worker"},
		resourceEnv("CPU_REQUEST", container, "requests.cpu"),
		resourceEnv("CPU_LIMITS", container, "limits.cpu"),
		resourceEnv("MEMORY_REQUESTS", container, "requests.memory"),
		resourceEnv("MEMORY_LIMITS", container, "limits.memory"),
		fieldEnv("MY_POD_NAME", "metadata.name"),
		fieldEnv("MY_POD_IP", "status.podIP"),
	}
}

// withKubeRayEnv puts KubeRay's variables before the user's; a variable the user sets keeps the user's value.
func withKubeRayEnv(container string, user []corev1.EnvVar) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, e := range kubeRayEnv(container) {
		if !slices.ContainsFunc(user, func(u corev1.EnvVar) bool { return u.Name == e.Name }) {
			out = append(out, e)
		}
	}
	return append(out, user...)
}

// withoutKubeRayEnv drops the variables withKubeRayEnv added (exactly as added), so reading a template back gives
// the user's environment.
func withoutKubeRayEnv(container string, env []corev1.EnvVar) []corev1.EnvVar {
	added := map[string]corev1.EnvVar{}
	for _, e := range kubeRayEnv(container) {
		added[e.Name] = e
	}
	var out []corev1.EnvVar
	for _, e := range env {
		if a, ok := added[e.Name]; ok && equality.Semantic.DeepEqual(a, e) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// workerLifecycle stops Ray on the worker before its container is killed, as KubeRay's API server does.
func workerLifecycle() *corev1.Lifecycle {
	return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "ray stop"}}}}
}

// envValuesToK8s is the plain values of an env set, sorted (the autoscaler's env).
func envValuesToK8s(e *EnvironmentVariables) []corev1.EnvVar {
	if e == nil {
		return nil
	}
	return envToK8s(&EnvironmentVariables{Values: e.Values})
}

// envFromSources turns the autoscaler's valuesFrom into envFrom, as KubeRay's API server does: each CONFIGMAP or
// SECRET entry imports the whole ConfigMap or Secret named by name (validation refuses other sources and key).
func envFromSources(e *EnvironmentVariables) []corev1.EnvFromSource {
	if e == nil {
		return nil
	}
	var out []corev1.EnvFromSource
	for _, k := range sortedKeys(e.ValuesFrom) {
		src := e.ValuesFrom[k]
		ref := corev1.LocalObjectReference{Name: src.Name}
		switch src.Source {
		case EnvFromConfigMap:
			out = append(out, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref}})
		case EnvFromSecret:
			out = append(out, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref}})
		}
	}
	return out
}

// autoscalerEnvFromK8s reads the autoscaler's env and envFrom back. envFrom entries have no variable name; they are
// keyed by the ConfigMap or Secret name.
func autoscalerEnvFromK8s(env []corev1.EnvVar, from []corev1.EnvFromSource) *EnvironmentVariables {
	e := envFromK8s(env)
	for _, f := range from {
		var src EnvValueFrom
		switch {
		case f.ConfigMapRef != nil:
			src = EnvValueFrom{Source: EnvFromConfigMap, Name: f.ConfigMapRef.Name}
		case f.SecretRef != nil:
			src = EnvValueFrom{Source: EnvFromSecret, Name: f.SecretRef.Name}
		default:
			continue
		}
		if e == nil {
			e = &EnvironmentVariables{}
		}
		if e.ValuesFrom == nil {
			e.ValuesFrom = map[string]EnvValueFrom{}
		}
		e.ValuesFrom[src.Name] = src
	}
	return e
}
