package apiserver

//lint:file-ignore SA1019 KubeRay's API server passes the deprecated RayService thresholds through, and so does Manta's

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

const submitterContainerName = "ray-job-submitter"

func jobToRay(j *RayJob, ts templates) *rayv1.RayJob {
	rj := &rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{
			Name: j.Name, Namespace: j.Namespace,
			Labels: objectLabels(j.Name, j.User, j.Version, 0),
		},
		Spec: rayv1.RayJobSpec{
			Entrypoint:               j.Entrypoint,
			Metadata:                 maps.Clone(j.Metadata),
			RuntimeEnvYAML:           j.RuntimeEnv,
			JobId:                    j.JobID,
			ShutdownAfterJobFinishes: j.ShutdownAfterJobFinishes,
			ClusterSelector:          maps.Clone(j.ClusterSelector),
			TTLSecondsAfterFinished:  j.TTLSecondsAfterFinished,
			EntrypointNumCpus:        j.EntrypointNumCpus,
			EntrypointNumGpus:        j.EntrypointNumGpus,
			EntrypointResources:      j.EntrypointResources,
		},
	}
	if j.ActiveDeadlineSeconds > 0 {
		rj.Spec.ActiveDeadlineSeconds = ptr.To(j.ActiveDeadlineSeconds)
	}
	if j.ClusterSpec != nil && len(j.ClusterSelector) == 0 {
		spec := clusterSpecToRay(j.ClusterSpec, j.Version, nil, false, ts)
		rj.Spec.RayClusterSpec = &spec
	}
	if s := j.JobSubmitter; s != nil {
		cpu, mem := s.CPU, s.Memory
		if cpu == "" {
			cpu = "1"
		}
		if mem == "" {
			mem = "1Gi"
		}
		rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
		rj.Spec.SubmitterPodTemplate = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: submitterContainerName, Image: s.Image,
				Resources: corev1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()},
			}},
		}}
	}
	return rj
}

func jobFromRay(rj *rayv1.RayJob) RayJob {
	s := rj.Spec
	j := RayJob{
		Name: rj.Name, Namespace: rj.Namespace,
		User: rj.Labels[labelUser], Version: rj.Labels[labelVersion],
		Entrypoint: s.Entrypoint, Metadata: maps.Clone(s.Metadata), RuntimeEnv: s.RuntimeEnvYAML, JobID: s.JobId,
		ShutdownAfterJobFinishes: s.ShutdownAfterJobFinishes, ClusterSelector: maps.Clone(s.ClusterSelector),
		TTLSecondsAfterFinished: s.TTLSecondsAfterFinished,
		EntrypointNumCpus:       s.EntrypointNumCpus, EntrypointNumGpus: s.EntrypointNumGpus,
		EntrypointResources:   s.EntrypointResources,
		ActiveDeadlineSeconds: ptr.Deref(s.ActiveDeadlineSeconds, 0),
		CreatedAt:             timePtr(rj.CreationTimestamp),
		JobStatus:             string(rj.Status.JobStatus),
		JobDeploymentStatus:   string(rj.Status.JobDeploymentStatus),
		Message:               rj.Status.Message,
		RayClusterName:        rj.Status.RayClusterName,
	}
	// The Ray job id as KubeRay's API server reports it: the one the RayJob controller submitted (status.jobId,
	// generated when spec.jobId is empty); the requested one until then.
	if id := rj.Status.JobId; id != "" {
		j.JobID = id
	}
	if rj.DeletionTimestamp != nil {
		j.DeleteAt = timePtr(*rj.DeletionTimestamp)
	}
	if t := rj.Status.StartTime; t != nil {
		j.StartTime = timePtr(*t)
	}
	if t := rj.Status.EndTime; t != nil {
		j.EndTime = timePtr(*t)
	}
	if s.RayClusterSpec != nil {
		j.ClusterSpec = clusterSpecFromRay(s.RayClusterSpec)
	}
	if pt := s.SubmitterPodTemplate; pt != nil && len(pt.Spec.Containers) > 0 {
		c := pt.Spec.Containers[0]
		js := &RayJobSubmitter{Image: c.Image}
		if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
			js.CPU = q.String()
		}
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			js.Memory = q.String()
		}
		j.JobSubmitter = js
	}
	return j
}

func serviceToRay(s *RayService, ts templates) *rayv1.RayService {
	rs := &rayv1.RayService{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name, Namespace: s.Namespace,
			Labels: objectLabels(s.Name, s.User, s.Version, 0),
		},
		Spec: rayv1.RayServiceSpec{
			ServeConfigV2:  s.ServeConfigV2,
			RayClusterSpec: clusterSpecToRay(s.ClusterSpec, s.Version, nil, true, ts),
		},
	}
	if s.ServiceUnhealthySecondThreshold > 0 {
		rs.Spec.ServiceUnhealthySecondThreshold = ptr.To(s.ServiceUnhealthySecondThreshold)
	}
	if s.DeploymentUnhealthySecondThreshold > 0 {
		rs.Spec.DeploymentUnhealthySecondThreshold = ptr.To(s.DeploymentUnhealthySecondThreshold)
	}
	return rs
}

func serviceFromRay(rs *rayv1.RayService) RayService {
	s := RayService{
		Name: rs.Name, Namespace: rs.Namespace,
		User: rs.Labels[labelUser], Version: rs.Labels[labelVersion],
		ServeConfigV2:                      rs.Spec.ServeConfigV2,
		ServiceUnhealthySecondThreshold:    ptr.Deref(rs.Spec.ServiceUnhealthySecondThreshold, 0),
		DeploymentUnhealthySecondThreshold: ptr.Deref(rs.Spec.DeploymentUnhealthySecondThreshold, 0),
		ClusterSpec:                        clusterSpecFromRay(&rs.Spec.RayClusterSpec),
		CreatedAt:                          timePtr(rs.CreationTimestamp),
	}
	if rs.DeletionTimestamp != nil {
		s.DeleteAt = timePtr(*rs.DeletionTimestamp)
	}
	active := rs.Status.ActiveServiceStatus
	st := &RayServiceStatus{
		RayClusterName:  active.RayClusterName,
		RayClusterState: string(active.RayClusterStatus.State),
		ServiceEndpoint: maps.Clone(active.RayClusterStatus.Endpoints),
	}
	for _, name := range sortedKeys(active.Applications) {
		app := active.Applications[name]
		as := ServeApplicationStatus{Name: name, Status: app.Status, Message: app.Message}
		for _, dn := range sortedKeys(app.Deployments) {
			d := app.Deployments[dn]
			as.ServeDeploymentStatus = append(as.ServeDeploymentStatus, ServeDeploymentStatus{DeploymentName: dn, Status: d.Status, Message: d.Message})
		}
		st.ServeApplicationStatus = append(st.ServeApplicationStatus, as)
	}
	if st.RayClusterName != "" || st.RayClusterState != "" || len(st.ServeApplicationStatus) > 0 || len(st.ServiceEndpoint) > 0 {
		s.RayServiceStatus = st
	}
	return s
}

func imagePullJobToK8s(j *ImagePullJob) *mantav1alpha1.ImagePullJob {
	o := &mantav1alpha1.ImagePullJob{
		ObjectMeta: metav1.ObjectMeta{
			Name: j.Name, Namespace: j.Namespace,
			Labels: map[string]string{labelAppName: appNameKubeRay, labelManagedBy: managedByAPIServer},
		},
		Spec: mantav1alpha1.ImagePullJobSpec{
			Image:           j.Image,
			ImagePullPolicy: mantav1alpha1.ImagePullPolicy(j.ImagePullPolicy),
			PullSecrets:     slices.Clone(j.PullSecrets),
			CompletionPolicy: mantav1alpha1.CompletionPolicy{
				Type: mantav1alpha1.CompletionPolicyType(j.CompletionPolicy),
			},
		},
	}
	if len(j.NodeNames) > 0 || len(j.NodeSelector) > 0 {
		o.Spec.Selector = &mantav1alpha1.ImagePullJobNodeSelector{Names: slices.Clone(j.NodeNames)}
		if len(j.NodeSelector) > 0 {
			o.Spec.Selector.MatchLabels = maps.Clone(j.NodeSelector)
		}
	}
	if j.Parallelism != nil {
		o.Spec.Parallelism = ptr.To(*j.Parallelism)
	}
	if j.TimeoutSeconds > 0 || j.BackoffLimit != nil {
		o.Spec.PullPolicy = &mantav1alpha1.PullPolicy{}
		if j.TimeoutSeconds > 0 {
			o.Spec.PullPolicy.TimeoutSeconds = ptr.To(j.TimeoutSeconds)
		}
		if j.BackoffLimit != nil {
			o.Spec.PullPolicy.BackoffLimit = ptr.To(*j.BackoffLimit)
		}
	}
	if j.ActiveDeadlineSeconds > 0 {
		o.Spec.CompletionPolicy.ActiveDeadlineSeconds = ptr.To(j.ActiveDeadlineSeconds)
	}
	if j.TTLSecondsAfterFinished > 0 {
		o.Spec.CompletionPolicy.TTLSecondsAfterFinished = ptr.To(j.TTLSecondsAfterFinished)
	}
	for _, t := range j.Tolerations {
		o.Spec.Tolerations = append(o.Spec.Tolerations, corev1.Toleration{
			Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value, Effect: corev1.TaintEffect(t.Effect),
		})
	}
	return o
}

func imagePullJobFromK8s(o *mantav1alpha1.ImagePullJob) ImagePullJob {
	s := o.Spec
	j := ImagePullJob{
		Name: o.Name, Namespace: o.Namespace, Image: s.Image,
		ImagePullPolicy:         string(s.ImagePullPolicy),
		PullSecrets:             slices.Clone(s.PullSecrets),
		Parallelism:             cloneInt32(s.Parallelism),
		CompletionPolicy:        string(s.CompletionPolicy.Type),
		CreatedAt:               timePtr(o.CreationTimestamp),
		ActiveDeadlineSeconds:   ptr.Deref(s.CompletionPolicy.ActiveDeadlineSeconds, 0),
		TTLSecondsAfterFinished: ptr.Deref(s.CompletionPolicy.TTLSecondsAfterFinished, 0),
	}
	if sel := s.Selector; sel != nil {
		j.NodeNames = slices.Clone(sel.Names)
		j.NodeSelector = maps.Clone(sel.MatchLabels)
	}
	if p := s.PullPolicy; p != nil {
		j.TimeoutSeconds = ptr.Deref(p.TimeoutSeconds, 0)
		j.BackoffLimit = cloneInt32(p.BackoffLimit)
	}
	for _, t := range s.Tolerations {
		j.Tolerations = append(j.Tolerations, PodToleration{Key: t.Key, Operator: string(t.Operator), Value: t.Value, Effect: string(t.Effect)})
	}
	st := o.Status
	j.Status = &ImagePullJobStatus{Desired: st.Desired, Active: st.Active, Succeeded: st.Succeeded, Failed: st.Failed, Message: st.Message}
	if st.StartTime != nil {
		j.Status.StartTime = timePtr(*st.StartTime)
	}
	if st.CompletionTime != nil {
		j.Status.CompletionTime = timePtr(*st.CompletionTime)
	}
	for _, f := range st.FailedNodes {
		j.Status.FailedNodes = append(j.Status.FailedNodes, FailedNode{Name: f.Name, Reason: f.Reason, Message: f.Message})
	}
	return j
}

func cloneInt32(p *int32) *int32 {
	if p == nil {
		return nil
	}
	return ptr.To(*p)
}
