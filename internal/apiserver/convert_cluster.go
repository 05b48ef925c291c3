package apiserver

import (
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

const (
	// DefaultRayVersion is the image tag used when a request names no version.
	DefaultRayVersion   = "2.52.0"
	headContainerName   = "ray-head"
	workerContainerName = "ray-worker"
)

// templates maps compute template names to templates, for one namespace.
type templates map[string]*ComputeTemplate

func defaultImage(version string) string {
	if version == "" {
		version = DefaultRayVersion
	}
	return "rayproject/ray:" + version
}

// objectLabels are the labels of every CR the API server creates; List and Get only return objects with them.
func objectLabels(name, user, version string, env Environment) map[string]string {
	l := map[string]string{
		labelClusterName: name,
		labelUser:        user,
		labelAppName:     appNameKubeRay,
		labelManagedBy:   managedByAPIServer,
		labelEnvironment: env.String(),
	}
	if version != "" {
		l[labelVersion] = version
	}
	return l
}

func isManaged(m metav1.Object) bool {
	return m.GetLabels()[labelManagedBy] == managedByAPIServer
}

// clusterToRay converts a validated Cluster whose compute templates all exist.
func clusterToRay(c *Cluster, ts templates) *rayv1.RayCluster {
	rc := &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{
			Name:        c.Name,
			Namespace:   c.Namespace,
			Labels:      objectLabels(c.Name, c.User, c.Version, c.Environment),
			Annotations: maps.Clone(c.Annotations),
		},
		Spec: clusterSpecToRay(c.ClusterSpec, c.Version, c.Envs, c.Annotations[annotationEnableServe] == "true", ts),
	}
	return rc
}

func clusterSpecToRay(s *ClusterSpec, version string, envs *EnvironmentVariables, serve bool, ts templates) rayv1.RayClusterSpec {
	h := s.HeadGroupSpec
	spec := rayv1.RayClusterSpec{
		RayVersion:             version,
		HeadServiceAnnotations: maps.Clone(s.HeadServiceAnnotations),
		HeadGroupSpec: rayv1.HeadGroupSpec{
			ServiceType:    corev1.ServiceType(h.ServiceType),
			RayStartParams: maps.Clone(h.RayStartParams),
			Template: podTemplate(groupSettings{
				container: headContainerName, template: ts[h.ComputeTemplate], image: h.Image, version: version,
				pullPolicy: h.ImagePullPolicy, serviceAccount: h.ServiceAccount, pullSecret: h.ImagePullSecret,
				env: []*EnvironmentVariables{envs, h.Environment}, annotations: h.Annotations, labels: h.Labels,
				volumes: h.Volumes, securityContext: h.SecurityContext, ports: headPorts(serve),
			}),
		},
	}
	if spec.HeadGroupSpec.RayStartParams == nil {
		spec.HeadGroupSpec.RayStartParams = map[string]string{}
	}
	if h.EnableIngress {
		spec.HeadGroupSpec.EnableIngress = ptr.To(true)
	}
	for _, w := range s.WorkerGroupSpec {
		// KubeRay's API server stores minReplicas = replicas when minReplicas is 0 (unset in proto3), so a group
		// created with only replicas is not scaled below it by the autoscaler.
		minReplicas := w.MinReplicas
		if minReplicas == 0 {
			minReplicas = w.Replicas
		}
		spec.WorkerGroupSpecs = append(spec.WorkerGroupSpecs, rayv1.WorkerGroupSpec{
			GroupName:      w.GroupName,
			Replicas:       ptr.To(w.Replicas),
			MinReplicas:    ptr.To(minReplicas),
			MaxReplicas:    ptr.To(w.MaxReplicas),
			RayStartParams: nonNilMap(w.RayStartParams),
			Template: podTemplate(groupSettings{
				container: workerContainerName, template: ts[w.ComputeTemplate], image: w.Image, version: version,
				pullPolicy: w.ImagePullPolicy, serviceAccount: w.ServiceAccount, pullSecret: w.ImagePullSecret,
				env: []*EnvironmentVariables{envs, w.Environment}, annotations: w.Annotations, labels: w.Labels,
				volumes: w.Volumes, securityContext: w.SecurityContext,
			}),
		})
	}
	if s.EnableInTreeAutoscaling {
		spec.EnableInTreeAutoscaling = ptr.To(true)
	}
	if a := s.AutoscalerOptions; a != nil {
		o := &rayv1.AutoscalerOptions{Env: envValuesToK8s(a.Envs), EnvFrom: envFromSources(a.Envs)}
		if a.IdleTimeoutSeconds > 0 {
			o.IdleTimeoutSeconds = ptr.To(a.IdleTimeoutSeconds)
		}
		if a.UpscalingMode != "" {
			o.UpscalingMode = ptr.To(rayv1.UpscalingMode(a.UpscalingMode))
		}
		if a.Image != "" {
			o.Image = ptr.To(a.Image)
		}
		if a.ImagePullPolicy != "" {
			o.ImagePullPolicy = ptr.To(corev1.PullPolicy(a.ImagePullPolicy))
		}
		if a.CPU != "" || a.Memory != "" {
			rl := corev1.ResourceList{}
			if a.CPU != "" {
				rl[corev1.ResourceCPU] = resource.MustParse(a.CPU)
			}
			if a.Memory != "" {
				rl[corev1.ResourceMemory] = resource.MustParse(a.Memory)
			}
			o.Resources = &corev1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()}
		}
		for _, v := range a.Volumes {
			o.VolumeMounts = append(o.VolumeMounts, volumeMount(v))
		}
		spec.AutoscalerOptions = o
	}
	return spec
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}

func headPorts(serve bool) []corev1.ContainerPort {
	ports := []corev1.ContainerPort{
		{Name: "redis", ContainerPort: 6379, Protocol: corev1.ProtocolTCP},
		{Name: "head", ContainerPort: 10001, Protocol: corev1.ProtocolTCP},
		{Name: "dashboard", ContainerPort: 8265, Protocol: corev1.ProtocolTCP},
		{Name: "metrics", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
	}
	if serve {
		ports = append(ports,
			corev1.ContainerPort{Name: "dashboard-agent", ContainerPort: 52365, Protocol: corev1.ProtocolTCP},
			corev1.ContainerPort{Name: "serve", ContainerPort: 8000, Protocol: corev1.ProtocolTCP})
	}
	return ports
}

type groupSettings struct {
	container       string
	template        *ComputeTemplate
	image, version  string
	pullPolicy      string
	serviceAccount  string
	pullSecret      string
	env             []*EnvironmentVariables
	annotations     map[string]string
	labels          map[string]string
	volumes         []Volume
	securityContext *SecurityContext
	ports           []corev1.ContainerPort
}

func podTemplate(g groupSettings) corev1.PodTemplateSpec {
	image := g.image
	if image == "" {
		image = defaultImage(g.version)
	}
	ann := maps.Clone(g.annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	ann[annotationTemplate] = g.template.Name
	ann[annotationImage] = image
	vols, mounts := volumesToK8s(g.volumes)
	rl := g.template.resources()
	c := corev1.Container{
		Name:            g.container,
		Image:           image,
		ImagePullPolicy: corev1.PullPolicy(g.pullPolicy),
		Env:             withKubeRayEnv(g.container, envToK8s(g.env...)),
		Ports:           g.ports,
		Resources:       corev1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()},
		VolumeMounts:    mounts,
	}
	if g.container == workerContainerName {
		c.Lifecycle = workerLifecycle()
	}
	if sc := g.securityContext; sc != nil {
		c.SecurityContext = &corev1.SecurityContext{Privileged: sc.Privileged}
		if sc.Capabilities != nil {
			c.SecurityContext.Capabilities = &corev1.Capabilities{}
			for _, a := range sc.Capabilities.Add {
				c.SecurityContext.Capabilities.Add = append(c.SecurityContext.Capabilities.Add, corev1.Capability(a))
			}
			for _, d := range sc.Capabilities.Drop {
				c.SecurityContext.Capabilities.Drop = append(c.SecurityContext.Capabilities.Drop, corev1.Capability(d))
			}
		}
	}
	pt := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: ann, Labels: maps.Clone(g.labels)},
		Spec: corev1.PodSpec{
			ServiceAccountName: g.serviceAccount,
			Tolerations:        g.template.k8sTolerations(),
			Volumes:            vols,
			Containers:         []corev1.Container{c},
		},
	}
	if g.pullSecret != "" {
		pt.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: g.pullSecret}}
	}
	return pt
}

// clusterFromRay converts a RayCluster (created by this server or not) to the API model.
func clusterFromRay(rc *rayv1.RayCluster) Cluster {
	c := Cluster{
		Name:            rc.Name,
		Namespace:       rc.Namespace,
		User:            rc.Labels[labelUser],
		Version:         rc.Labels[labelVersion],
		Environment:     Environment(index(environmentNames, rc.Labels[labelEnvironment])),
		Annotations:     maps.Clone(rc.Annotations),
		ClusterState:    string(rc.Status.State),
		CreatedAt:       timePtr(rc.CreationTimestamp),
		ServiceEndpoint: maps.Clone(rc.Status.Endpoints),
	}
	if c.Version == "" {
		c.Version = rc.Spec.RayVersion
	}
	if rc.DeletionTimestamp != nil {
		c.DeletedAt = timePtr(*rc.DeletionTimestamp)
	}
	c.ClusterSpec = clusterSpecFromRay(&rc.Spec)
	return c
}

func timePtr(t metav1.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func clusterSpecFromRay(s *rayv1.RayClusterSpec) *ClusterSpec {
	h := s.HeadGroupSpec
	g := groupFromTemplate(&h.Template)
	out := &ClusterSpec{
		HeadGroupSpec: &HeadGroupSpec{
			ComputeTemplate: g.template, Image: g.image, ServiceType: string(h.ServiceType),
			EnableIngress:  ptr.Deref(h.EnableIngress, false),
			RayStartParams: nonNilMap(h.RayStartParams),
			Volumes:        g.volumes, ServiceAccount: g.serviceAccount, ImagePullSecret: g.pullSecret,
			Environment: g.env, Annotations: g.annotations, Labels: g.labels, ImagePullPolicy: g.pullPolicy,
			SecurityContext: g.securityContext,
		},
		EnableInTreeAutoscaling: ptr.Deref(s.EnableInTreeAutoscaling, false),
		HeadServiceAnnotations:  maps.Clone(s.HeadServiceAnnotations),
	}
	for _, w := range s.WorkerGroupSpecs {
		g := groupFromTemplate(&w.Template)
		out.WorkerGroupSpec = append(out.WorkerGroupSpec, WorkerGroupSpec{
			GroupName: w.GroupName, ComputeTemplate: g.template, Image: g.image,
			Replicas: ptr.Deref(w.Replicas, 0), MinReplicas: ptr.Deref(w.MinReplicas, 0), MaxReplicas: ptr.Deref(w.MaxReplicas, 0),
			RayStartParams: maps.Clone(w.RayStartParams),
			Volumes:        g.volumes, ServiceAccount: g.serviceAccount, ImagePullSecret: g.pullSecret,
			Environment: g.env, Annotations: g.annotations, Labels: g.labels, ImagePullPolicy: g.pullPolicy,
			SecurityContext: g.securityContext,
		})
	}
	if a := s.AutoscalerOptions; a != nil {
		o := &AutoscalerOptions{
			IdleTimeoutSeconds: ptr.Deref(a.IdleTimeoutSeconds, 0),
			UpscalingMode:      string(ptr.Deref(a.UpscalingMode, "")),
			Image:              ptr.Deref(a.Image, ""),
			ImagePullPolicy:    string(ptr.Deref(a.ImagePullPolicy, "")),
			Envs:               autoscalerEnvFromK8s(a.Env, a.EnvFrom),
		}
		if a.Resources != nil {
			if q, ok := a.Resources.Limits[corev1.ResourceCPU]; ok {
				o.CPU = q.String()
			}
			if q, ok := a.Resources.Limits[corev1.ResourceMemory]; ok {
				o.Memory = q.String()
			}
		}
		for _, m := range a.VolumeMounts {
			v := Volume{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly}
			if m.MountPropagation != nil {
				v.MountPropagationMode = MountPropagationMode(index(propagations, *m.MountPropagation))
			}
			o.Volumes = append(o.Volumes, v)
		}
		out.AutoscalerOptions = o
	}
	return out
}

type groupFields struct {
	template, image, pullPolicy, serviceAccount, pullSecret string
	env                                                     *EnvironmentVariables
	annotations, labels                                     map[string]string
	volumes                                                 []Volume
	securityContext                                         *SecurityContext
}

func groupFromTemplate(pt *corev1.PodTemplateSpec) groupFields {
	g := groupFields{
		template:       pt.Annotations[annotationTemplate],
		serviceAccount: pt.Spec.ServiceAccountName,
		labels:         maps.Clone(pt.Labels),
	}
	ann := maps.Clone(pt.Annotations)
	delete(ann, annotationTemplate)
	delete(ann, annotationImage)
	if len(ann) > 0 {
		g.annotations = ann
	}
	if len(pt.Spec.ImagePullSecrets) > 0 {
		g.pullSecret = pt.Spec.ImagePullSecrets[0].Name
	}
	if len(pt.Spec.Containers) == 0 {
		return g
	}
	c := pt.Spec.Containers[0]
	g.image = c.Image
	g.pullPolicy = string(c.ImagePullPolicy)
	g.env = envFromK8s(withoutKubeRayEnv(c.Name, c.Env))
	g.volumes = volumesFromK8s(pt.Spec.Volumes, c.VolumeMounts)
	if sc := c.SecurityContext; sc != nil && (sc.Privileged != nil || sc.Capabilities != nil) {
		g.securityContext = &SecurityContext{Privileged: sc.Privileged}
		if sc.Capabilities != nil {
			g.securityContext.Capabilities = &Capabilities{}
			for _, a := range sc.Capabilities.Add {
				g.securityContext.Capabilities.Add = append(g.securityContext.Capabilities.Add, string(a))
			}
			for _, d := range sc.Capabilities.Drop {
				g.securityContext.Capabilities.Drop = append(g.securityContext.Capabilities.Drop, string(d))
			}
		}
	}
	return g
}

// templateNames lists the compute templates a spec refers to, with the field that names each.
func templateNames(s *ClusterSpec, field string) []FieldViolation {
	if s == nil {
		return nil
	}
	var out []FieldViolation
	if s.HeadGroupSpec != nil {
		out = append(out, FieldViolation{Field: field + ".headGroupSpec.computeTemplate", Description: s.HeadGroupSpec.ComputeTemplate})
	}
	for i, w := range s.WorkerGroupSpec {
		out = append(out, FieldViolation{Field: field + ".workerGroupSpec[" + itoa(i) + "].computeTemplate", Description: w.ComputeTemplate})
	}
	return out
}
