package apiserver

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

var (
	hostPathTypes = []corev1.HostPathType{corev1.HostPathDirectory, corev1.HostPathFile}
	propagations  = []corev1.MountPropagationMode{corev1.MountPropagationNone, corev1.MountPropagationHostToContainer, corev1.MountPropagationBidirectional}
	accessModes   = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany}
)

func index[T comparable](s []T, v T) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return 0
}

func volumeMount(v Volume) corev1.VolumeMount {
	m := corev1.VolumeMount{Name: v.Name, MountPath: v.MountPath, ReadOnly: v.ReadOnly}
	if v.MountPropagationMode != PropagationNone && int(v.MountPropagationMode) < len(propagations) {
		m.MountPropagation = ptr.To(propagations[v.MountPropagationMode])
	}
	return m
}

// volumesToK8s turns API volumes into pod volumes and the Ray container's mounts. Input is validated.
func volumesToK8s(vols []Volume) ([]corev1.Volume, []corev1.VolumeMount) {
	var out []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, v := range vols {
		kv := corev1.Volume{Name: v.Name}
		switch v.VolumeType {
		case VolumePVC:
			kv.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.Source, ReadOnly: v.ReadOnly}
		case VolumeHostPath:
			kv.HostPath = &corev1.HostPathVolumeSource{Path: v.Source, Type: ptr.To(hostPathTypes[v.HostPathType%2])}
		case VolumeEphemeral:
			spec := corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{accessModes[int(v.AccessMode)%len(accessModes)]},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(v.Storage)}},
			}
			if v.StorageClassName != "" {
				spec.StorageClassName = ptr.To(v.StorageClassName)
			}
			kv.Ephemeral = &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: spec}}
		case VolumeConfigMap:
			kv.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: v.Source}, Items: keyToPaths(v.Items)}
		case VolumeSecret:
			kv.Secret = &corev1.SecretVolumeSource{SecretName: v.Source, Items: keyToPaths(v.Items)}
		case VolumeEmptyDir:
			kv.EmptyDir = &corev1.EmptyDirVolumeSource{}
			if v.Storage != "" {
				kv.EmptyDir.SizeLimit = ptr.To(resource.MustParse(v.Storage))
			}
		}
		out = append(out, kv)
		mounts = append(mounts, volumeMount(v))
	}
	return out, mounts
}

func keyToPaths(items map[string]string) []corev1.KeyToPath {
	var out []corev1.KeyToPath
	for _, k := range sortedKeys(items) {
		out = append(out, corev1.KeyToPath{Key: k, Path: items[k]})
	}
	return out
}

// volumesFromK8s is the inverse of volumesToK8s for the volumes the Ray container mounts.
func volumesFromK8s(vols []corev1.Volume, mounts []corev1.VolumeMount) []Volume {
	byName := map[string]corev1.Volume{}
	for _, v := range vols {
		byName[v.Name] = v
	}
	var out []Volume
	for _, m := range mounts {
		kv, ok := byName[m.Name]
		if !ok {
			continue
		}
		v := Volume{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly}
		if m.MountPropagation != nil {
			v.MountPropagationMode = MountPropagationMode(index(propagations, *m.MountPropagation))
		}
		switch {
		case kv.PersistentVolumeClaim != nil:
			v.VolumeType, v.Source = VolumePVC, kv.PersistentVolumeClaim.ClaimName
		case kv.HostPath != nil:
			v.VolumeType, v.Source = VolumeHostPath, kv.HostPath.Path
			if kv.HostPath.Type != nil {
				v.HostPathType = HostPathType(index(hostPathTypes, *kv.HostPath.Type))
			}
		case kv.Ephemeral != nil && kv.Ephemeral.VolumeClaimTemplate != nil:
			v.VolumeType = VolumeEphemeral
			spec := kv.Ephemeral.VolumeClaimTemplate.Spec
			if len(spec.AccessModes) > 0 {
				v.AccessMode = AccessMode(index(accessModes, spec.AccessModes[0]))
			}
			if spec.StorageClassName != nil {
				v.StorageClassName = *spec.StorageClassName
			}
			if q, ok := spec.Resources.Requests[corev1.ResourceStorage]; ok {
				v.Storage = q.String()
			}
		case kv.ConfigMap != nil:
			v.VolumeType, v.Source, v.Items = VolumeConfigMap, kv.ConfigMap.Name, pathsToItems(kv.ConfigMap.Items)
		case kv.Secret != nil:
			v.VolumeType, v.Source, v.Items = VolumeSecret, kv.Secret.SecretName, pathsToItems(kv.Secret.Items)
		case kv.EmptyDir != nil:
			v.VolumeType = VolumeEmptyDir
			if kv.EmptyDir.SizeLimit != nil {
				v.Storage = kv.EmptyDir.SizeLimit.String()
			}
		default:
			continue // a volume kind the v1 model cannot express
		}
		out = append(out, v)
	}
	return out
}

func pathsToItems(ks []corev1.KeyToPath) map[string]string {
	if len(ks) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, k := range ks {
		out[k.Key] = k.Path
	}
	return out
}

// envToK8s merges environment variable sets in order (later sets win) into a sorted env list.
func envToK8s(sets ...*EnvironmentVariables) []corev1.EnvVar {
	vals := map[string]corev1.EnvVar{}
	for _, e := range sets {
		if e == nil {
			continue
		}
		for k, v := range e.Values {
			vals[k] = corev1.EnvVar{Name: k, Value: v}
		}
		for k, src := range e.ValuesFrom {
			ev := corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{}}
			switch src.Source {
			case EnvFromConfigMap:
				ev.ValueFrom.ConfigMapKeyRef = &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: src.Name}, Key: src.Key}
			case EnvFromSecret:
				ev.ValueFrom.SecretKeyRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: src.Name}, Key: src.Key}
			case EnvFromResourceField:
				ev.ValueFrom.ResourceFieldRef = &corev1.ResourceFieldSelector{ContainerName: src.Name, Resource: src.Key}
			case EnvFromField:
				// KubeRay's API server takes a FIELD source's path from key.
				ev.ValueFrom.FieldRef = &corev1.ObjectFieldSelector{FieldPath: src.Key}
			}
			vals[k] = ev
		}
	}
	var out []corev1.EnvVar
	for _, k := range sortedKeys(vals) {
		out = append(out, vals[k])
	}
	return out
}

func envFromK8s(env []corev1.EnvVar) *EnvironmentVariables {
	if len(env) == 0 {
		return nil
	}
	e := &EnvironmentVariables{}
	for _, ev := range env {
		if ev.ValueFrom == nil {
			if e.Values == nil {
				e.Values = map[string]string{}
			}
			e.Values[ev.Name] = ev.Value
			continue
		}
		var src EnvValueFrom
		switch f := ev.ValueFrom; {
		case f.ConfigMapKeyRef != nil:
			src = EnvValueFrom{Source: EnvFromConfigMap, Name: f.ConfigMapKeyRef.Name, Key: f.ConfigMapKeyRef.Key}
		case f.SecretKeyRef != nil:
			src = EnvValueFrom{Source: EnvFromSecret, Name: f.SecretKeyRef.Name, Key: f.SecretKeyRef.Key}
		case f.ResourceFieldRef != nil:
			src = EnvValueFrom{Source: EnvFromResourceField, Name: f.ResourceFieldRef.ContainerName, Key: f.ResourceFieldRef.Resource}
		case f.FieldRef != nil:
			src = EnvValueFrom{Source: EnvFromField, Key: f.FieldRef.FieldPath}
		default:
			continue
		}
		if e.ValuesFrom == nil {
			e.ValuesFrom = map[string]EnvValueFrom{}
		}
		e.ValuesFrom[ev.Name] = src
	}
	return e
}
