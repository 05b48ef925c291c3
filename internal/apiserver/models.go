package apiserver

import "time"

// The request and response bodies of the v1 API. JSON names and shapes follow KubeRay's API server v1
// (proto3 JSON: camelCase, enums as numbers, zero values omitted). Struct tags drive the OpenAPI document and the
// decoder: proto:"..." (the proto field name, accepted on input like the JSON name, as protobuf's JSON mapping
// does; absent when it equals the JSON name), api:"required" (must be present and non-empty), api:"readonly" (output only, ignored on
// input), api:"name" (a DNS-1123 label), doc:"..." (description).

// ComputeTemplate is a named amount of CPU, memory, GPUs and extended resources, with tolerations, that head and
// worker groups refer to. It is stored as a ConfigMap named after it.
type ComputeTemplate struct {
	Name              string            `json:"name" api:"required,name" doc:"name of the compute template"`
	Namespace         string            `json:"namespace" api:"required,name" doc:"namespace; must equal the namespace in the path"`
	CPU               uint32            `json:"cpu" api:"required" doc:"number of CPUs (requests = limits); must be > 0"`
	Memory            uint32            `json:"memory" api:"required" doc:"amount of memory in memoryUnit; must be > 0"`
	GPU               uint32            `json:"gpu,omitempty" doc:"number of GPUs"`
	GPUAccelerator    string            `json:"gpuAccelerator,omitempty" proto:"gpu_accelerator" doc:"GPU resource name; default nvidia.com/gpu"`
	Tolerations       []PodToleration   `json:"tolerations,omitempty"`
	ExtendedResources map[string]uint32 `json:"extendedResources,omitempty" proto:"extended_resources" doc:"extra resource names and amounts, e.g. vpc.amazonaws.com/efa"`
	MemoryUnit        string            `json:"memoryUnit,omitempty" proto:"memory_unit" doc:"unit of memory: Ki, Mi, Gi or Ti (default Gi)"`
}

// PodToleration is a toleration of a compute template.
type PodToleration struct {
	Key      string `json:"key" api:"required"`
	Operator string `json:"operator" api:"required" doc:"Exists or Equal"`
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect" api:"required" doc:"NoSchedule, PreferNoSchedule or NoExecute"`
}

// ListComputeTemplatesResponse lists compute templates.
type ListComputeTemplatesResponse struct {
	ComputeTemplates []ComputeTemplate `json:"computeTemplates" api:"required"`
	Continue         string            `json:"continue,omitempty" doc:"token for the next page; empty on the last page"`
}

// Cluster is a Ray cluster, stored as a RayCluster.
type Cluster struct {
	Name            string                `json:"name" api:"required,name" doc:"unique cluster name"`
	Namespace       string                `json:"namespace" api:"required,name" doc:"namespace; must equal the namespace in the path"`
	User            string                `json:"user" api:"required" doc:"the user who owns the cluster"`
	Version         string                `json:"version,omitempty" doc:"Ray version; the default image is rayproject/ray:<version>"`
	Environment     Environment           `json:"environment,omitempty"`
	ClusterSpec     *ClusterSpec          `json:"clusterSpec,omitempty" proto:"cluster_spec" api:"required" doc:"the head and worker groups"`
	Annotations     map[string]string     `json:"annotations,omitempty" doc:"annotations of the RayCluster"`
	Envs            *EnvironmentVariables `json:"envs,omitempty" doc:"environment variables of every Ray container"`
	CreatedAt       *time.Time            `json:"createdAt,omitempty" proto:"created_at" api:"readonly"`
	DeletedAt       *time.Time            `json:"deletedAt,omitempty" proto:"deleted_at" api:"readonly"`
	ClusterState    string                `json:"clusterState,omitempty" proto:"cluster_state" api:"readonly" doc:"the RayCluster's status.state, e.g. ready"`
	Events          []ClusterEvent        `json:"events,omitempty" api:"readonly"`
	ServiceEndpoint map[string]string     `json:"serviceEndpoint,omitempty" proto:"service_endpoint" api:"readonly" doc:"head service ports by name"`
}

// ClusterSpec describes the groups of a cluster.
type ClusterSpec struct {
	HeadGroupSpec           *HeadGroupSpec     `json:"headGroupSpec,omitempty" proto:"head_group_spec" api:"required"`
	WorkerGroupSpec         []WorkerGroupSpec  `json:"workerGroupSpec,omitempty" proto:"worker_group_spec"`
	EnableInTreeAutoscaling bool               `json:"enableInTreeAutoscaling,omitempty"`
	AutoscalerOptions       *AutoscalerOptions `json:"autoscalerOptions,omitempty"`
	HeadServiceAnnotations  map[string]string  `json:"headServiceAnnotations,omitempty"`
}

// HeadGroupSpec is the head group.
type HeadGroupSpec struct {
	ComputeTemplate string                `json:"computeTemplate" proto:"compute_template" api:"required" doc:"name of a compute template in the cluster's namespace"`
	Image           string                `json:"image,omitempty"`
	ServiceType     string                `json:"serviceType,omitempty" proto:"service_type" doc:"ClusterIP, NodePort or LoadBalancer"`
	EnableIngress   bool                  `json:"enableIngress,omitempty"`
	RayStartParams  map[string]string     `json:"rayStartParams" proto:"ray_start_params" api:"required" doc:"ray start parameters; must not be empty"`
	Volumes         []Volume              `json:"volumes,omitempty"`
	ServiceAccount  string                `json:"serviceAccount,omitempty" proto:"service_account"`
	ImagePullSecret string                `json:"imagePullSecret,omitempty" proto:"image_pull_secret"`
	Environment     *EnvironmentVariables `json:"environment,omitempty"`
	Annotations     map[string]string     `json:"annotations,omitempty" doc:"annotations of the head pod"`
	Labels          map[string]string     `json:"labels,omitempty" doc:"labels of the head pod"`
	ImagePullPolicy string                `json:"imagePullPolicy,omitempty" doc:"empty, Always, Never or IfNotPresent"`
	SecurityContext *SecurityContext      `json:"securityContext,omitempty" proto:"security_context"`
}

// WorkerGroupSpec is one worker group.
type WorkerGroupSpec struct {
	GroupName       string                `json:"groupName" proto:"group_name" api:"required" doc:"group name, unique in the cluster"`
	ComputeTemplate string                `json:"computeTemplate" proto:"compute_template" api:"required" doc:"name of a compute template in the cluster's namespace"`
	Image           string                `json:"image,omitempty"`
	Replicas        int32                 `json:"replicas,omitempty" doc:"desired workers; between minReplicas and maxReplicas"`
	MinReplicas     int32                 `json:"minReplicas,omitempty" proto:"min_replicas"`
	MaxReplicas     int32                 `json:"maxReplicas" proto:"max_replicas" api:"required" doc:"maximum workers; must be > 0"`
	RayStartParams  map[string]string     `json:"rayStartParams,omitempty" proto:"ray_start_params"`
	Volumes         []Volume              `json:"volumes,omitempty"`
	ServiceAccount  string                `json:"serviceAccount,omitempty" proto:"service_account"`
	ImagePullSecret string                `json:"imagePullSecret,omitempty" proto:"image_pull_secret"`
	Environment     *EnvironmentVariables `json:"environment,omitempty"`
	Annotations     map[string]string     `json:"annotations,omitempty"`
	Labels          map[string]string     `json:"labels,omitempty"`
	ImagePullPolicy string                `json:"imagePullPolicy,omitempty" doc:"empty, Always, Never or IfNotPresent"`
	SecurityContext *SecurityContext      `json:"securityContext,omitempty" proto:"security_context"`
}

// AutoscalerOptions configure the in-tree autoscaler sidecar.
type AutoscalerOptions struct {
	IdleTimeoutSeconds int32                 `json:"idleTimeoutSeconds,omitempty"`
	UpscalingMode      string                `json:"upscalingMode,omitempty" doc:"Default, Aggressive or Conservative"`
	Image              string                `json:"image,omitempty"`
	ImagePullPolicy    string                `json:"imagePullPolicy,omitempty" doc:"empty, Always, Never or IfNotPresent"`
	CPU                string                `json:"cpu,omitempty" doc:"CPU quantity, default 500m"`
	Memory             string                `json:"memory,omitempty" doc:"memory quantity, default 512Mi"`
	Envs               *EnvironmentVariables `json:"envs,omitempty"`
	Volumes            []Volume              `json:"volumes,omitempty" doc:"volume mounts of the autoscaler (the volumes must be declared on the head group)"`
}

// EnvironmentVariables are plain values and values taken from elsewhere.
type EnvironmentVariables struct {
	Values     map[string]string       `json:"values,omitempty"`
	ValuesFrom map[string]EnvValueFrom `json:"valuesFrom,omitempty"`
}

// EnvValueFrom takes an environment variable from a ConfigMap, Secret, resource field or pod field.
type EnvValueFrom struct {
	Source EnvSource `json:"source,omitempty"`
	Name   string    `json:"name,omitempty" doc:"ConfigMap or Secret name, or container name for a resource field; not used by FIELD"`
	Key    string    `json:"key,omitempty" doc:"key in the ConfigMap or Secret, resource name (e.g. limits.cpu), or for FIELD the field path (e.g. status.podIP); not used in autoscalerOptions.envs, whose valuesFrom import a whole ConfigMap or Secret (envFrom)"`
}

// SecurityContext is the Ray container's security context.
type SecurityContext struct {
	Capabilities *Capabilities `json:"capabilities,omitempty"`
	Privileged   *bool         `json:"privileged,omitempty"`
}

// Capabilities are POSIX capabilities added to or dropped from the container.
type Capabilities struct {
	Add  []string `json:"add,omitempty"`
	Drop []string `json:"drop,omitempty"`
}

// Volume is a volume mounted into the Ray container.
type Volume struct {
	MountPath            string               `json:"mountPath,omitempty" proto:"mount_path" doc:"required: absolute path in the container"`
	VolumeType           VolumeType           `json:"volumeType,omitempty" proto:"volume_type"`
	Name                 string               `json:"name,omitempty" doc:"required: volume name, unique in the group"`
	Source               string               `json:"source,omitempty" doc:"claim name, host path, ConfigMap or Secret name"`
	ReadOnly             bool                 `json:"readOnly,omitempty" proto:"read_only"`
	HostPathType         HostPathType         `json:"hostPathType,omitempty" proto:"host_path_type"`
	MountPropagationMode MountPropagationMode `json:"mountPropagationMode,omitempty" proto:"mount_propagation_mode"`
	StorageClassName     string               `json:"storageClassName,omitempty" doc:"storage class of an ephemeral volume"`
	AccessMode           AccessMode           `json:"accessMode,omitempty"`
	Storage              string               `json:"storage,omitempty" doc:"size of an ephemeral (required) or emptyDir volume"`
	Items                map[string]string    `json:"items,omitempty" doc:"ConfigMap or Secret keys to paths"`
}

// ClusterEvent is a Kubernetes event about a cluster.
type ClusterEvent struct {
	ID             string     `json:"id,omitempty"`
	Name           string     `json:"name,omitempty"`
	CreatedAt      *time.Time `json:"createdAt,omitempty" proto:"created_at"`
	FirstTimestamp *time.Time `json:"firstTimestamp,omitempty" proto:"first_timestamp"`
	LastTimestamp  *time.Time `json:"lastTimestamp,omitempty" proto:"last_timestamp"`
	Reason         string     `json:"reason,omitempty"`
	Message        string     `json:"message,omitempty"`
	Type           string     `json:"type,omitempty"`
	Count          int32      `json:"count,omitempty"`
}

// ListClustersResponse lists clusters.
type ListClustersResponse struct {
	Clusters []Cluster `json:"clusters" api:"required"`
	Continue string    `json:"continue,omitempty" doc:"token for the next page; empty on the last page"`
}

// RayJob is a Ray job, stored as a RayJob.
type RayJob struct {
	Name                     string            `json:"name" api:"required,name"`
	Namespace                string            `json:"namespace" api:"required,name"`
	User                     string            `json:"user" api:"required"`
	Version                  string            `json:"version,omitempty" doc:"Ray version (image tag)"`
	Entrypoint               string            `json:"entrypoint" api:"required"`
	Metadata                 map[string]string `json:"metadata,omitempty"`
	RuntimeEnv               string            `json:"runtimeEnv,omitempty" proto:"runtime_env" doc:"runtime environment as YAML"`
	JobID                    string            `json:"jobId,omitempty" proto:"job_id"`
	ShutdownAfterJobFinishes bool              `json:"shutdownAfterJobFinishes,omitempty" proto:"shutdown_after_job_finishes"`
	ClusterSelector          map[string]string `json:"clusterSelector,omitempty" proto:"cluster_selector" doc:"labels of an existing cluster to run on; otherwise clusterSpec is required"`
	ClusterSpec              *ClusterSpec      `json:"clusterSpec,omitempty" proto:"cluster_spec"`
	TTLSecondsAfterFinished  int32             `json:"ttlSecondsAfterFinished,omitempty" proto:"ttl_seconds_after_finished"`
	JobSubmitter             *RayJobSubmitter  `json:"jobSubmitter,omitempty"`
	EntrypointNumCpus        float32           `json:"entrypointNumCpus,omitempty"`
	EntrypointNumGpus        float32           `json:"entrypointNumGpus,omitempty"`
	EntrypointResources      string            `json:"entrypointResources,omitempty" doc:"JSON object of custom resource amounts"`
	ActiveDeadlineSeconds    int32             `json:"activeDeadlineSeconds,omitempty"`
	CreatedAt                *time.Time        `json:"createdAt,omitempty" proto:"created_at" api:"readonly"`
	DeleteAt                 *time.Time        `json:"deleteAt,omitempty" proto:"delete_at" api:"readonly"`
	JobStatus                string            `json:"jobStatus,omitempty" proto:"job_status" api:"readonly"`
	JobDeploymentStatus      string            `json:"jobDeploymentStatus,omitempty" proto:"job_deployment_status" api:"readonly"`
	Message                  string            `json:"message,omitempty" api:"readonly"`
	StartTime                *time.Time        `json:"startTime,omitempty" proto:"start_time" api:"readonly"`
	EndTime                  *time.Time        `json:"endTime,omitempty" proto:"end_time" api:"readonly"`
	RayClusterName           string            `json:"rayClusterName,omitempty" proto:"ray_cluster_name" api:"readonly"`
}

// RayJobSubmitter configures the submitter pod of a job.
type RayJobSubmitter struct {
	Image  string `json:"image" api:"required"`
	CPU    string `json:"cpu,omitempty" doc:"CPU quantity, default 1"`
	Memory string `json:"memory,omitempty" doc:"memory quantity, default 1Gi"`
}

// ListRayJobsResponse lists jobs.
type ListRayJobsResponse struct {
	Jobs     []RayJob `json:"jobs" api:"required"`
	Continue string   `json:"continue,omitempty" doc:"token for the next page; empty on the last page"`
}

// RayService is a Ray Serve service, stored as a RayService.
type RayService struct {
	Name                               string            `json:"name" api:"required,name"`
	Namespace                          string            `json:"namespace" api:"required,name"`
	User                               string            `json:"user" api:"required"`
	Version                            string            `json:"version,omitempty"`
	ServeConfigV2                      string            `json:"serveConfigV2" proto:"serve_config_V2" api:"required" doc:"Serve config (YAML)"`
	ServiceUnhealthySecondThreshold    int32             `json:"serviceUnhealthySecondThreshold,omitempty" proto:"service_unhealthy_second_threshold"`
	DeploymentUnhealthySecondThreshold int32             `json:"deploymentUnhealthySecondThreshold,omitempty" proto:"deployment_unhealthy_second_threshold"`
	ClusterSpec                        *ClusterSpec      `json:"clusterSpec,omitempty" proto:"cluster_spec" api:"required"`
	RayServiceStatus                   *RayServiceStatus `json:"rayServiceStatus,omitempty" proto:"ray_service_status" api:"readonly"`
	CreatedAt                          *time.Time        `json:"createdAt,omitempty" proto:"created_at" api:"readonly"`
	DeleteAt                           *time.Time        `json:"deleteAt,omitempty" proto:"delete_at" api:"readonly"`
}

// RayServiceStatus is the observed state of a service.
type RayServiceStatus struct {
	RayClusterName         string                   `json:"rayClusterName,omitempty" proto:"ray_cluster_name"`
	RayClusterState        string                   `json:"rayClusterState,omitempty" proto:"ray_cluster_state"`
	ServiceEndpoint        map[string]string        `json:"serviceEndpoint,omitempty" proto:"service_endpoint"`
	ServeApplicationStatus []ServeApplicationStatus `json:"serveApplicationStatus,omitempty" proto:"serve_application_status"`
	RayServiceEvents       []ClusterEvent           `json:"rayServiceEvents,omitempty" proto:"ray_service_events" doc:"Kubernetes events about the RayService (on get)"`
}

// ServeApplicationStatus is one Serve application.
type ServeApplicationStatus struct {
	Name                  string                  `json:"name,omitempty"`
	Status                string                  `json:"status,omitempty"`
	Message               string                  `json:"message,omitempty"`
	ServeDeploymentStatus []ServeDeploymentStatus `json:"serveDeploymentStatus,omitempty" proto:"serve_deployment_status"`
}

// ServeDeploymentStatus is one Serve deployment.
type ServeDeploymentStatus struct {
	DeploymentName string `json:"deploymentName,omitempty" proto:"deployment_name"`
	Status         string `json:"status,omitempty"`
	Message        string `json:"message,omitempty"`
}

// ListRayServicesResponse lists services. v1 pages services with pageSize/pageToken; limit/continue work too.
type ListRayServicesResponse struct {
	Services      []RayService `json:"services" api:"required"`
	TotalSize     int32        `json:"totalSize,omitempty"`
	NextPageToken string       `json:"nextPageToken,omitempty"`
	Continue      string       `json:"continue,omitempty"`
}

// RayJobSubmission is a job submitted to a running cluster's Ray dashboard.
type RayJobSubmission struct {
	Entrypoint          string            `json:"entrypoint" api:"required"`
	SubmissionID        string            `json:"submissionId,omitempty" proto:"submission_id"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	RuntimeEnv          string            `json:"runtimeEnv,omitempty" proto:"runtime_env" doc:"runtime environment as YAML"`
	EntrypointNumCpus   float32           `json:"entrypointNumCpus,omitempty" proto:"entrypoint_num_cpus"`
	EntrypointNumGpus   float32           `json:"entrypointNumGpus,omitempty" proto:"entrypoint_num_gpus"`
	EntrypointResources map[string]string `json:"entrypointResources,omitempty" proto:"entrypoint_resources" doc:"custom resource amounts (numbers as strings)"`
}

// SubmitRayJobReply answers a submission.
type SubmitRayJobReply struct {
	SubmissionID string `json:"submissionId" api:"required"`
}

// JobSubmissionInfo describes a submitted job.
type JobSubmissionInfo struct {
	Entrypoint   string            `json:"entrypoint,omitempty"`
	JobID        string            `json:"jobId,omitempty"`
	SubmissionID string            `json:"submissionId,omitempty"`
	Status       string            `json:"status,omitempty" doc:"PENDING, RUNNING, STOPPED, SUCCEEDED or FAILED"`
	Message      string            `json:"message,omitempty"`
	ErrorType    string            `json:"errorType,omitempty"`
	StartTime    uint64            `json:"startTime,omitempty,string" doc:"Unix milliseconds (a uint64, so a string in proto3 JSON)"`
	EndTime      uint64            `json:"endTime,omitempty,string" doc:"Unix milliseconds (a uint64, so a string in proto3 JSON)"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	RuntimeEnv   map[string]string `json:"runtimeEnv,omitempty"`
}

// ListJobSubmissionInfo lists submitted jobs.
type ListJobSubmissionInfo struct {
	Submissions []JobSubmissionInfo `json:"submissions,omitempty"`
}

// GetJobLogReply is a job's log so far.
type GetJobLogReply struct {
	Log string `json:"log,omitempty"`
}

// ImagePullJob pre-pulls an image onto nodes (Manta's manta.dev/v1alpha1 ImagePullJob).
type ImagePullJob struct {
	Name                    string              `json:"name" api:"required,name"`
	Namespace               string              `json:"namespace" api:"required,name"`
	Image                   string              `json:"image" api:"required"`
	ImagePullPolicy         string              `json:"imagePullPolicy,omitempty" doc:"Always or IfNotPresent (default)"`
	PullSecrets             []string            `json:"pullSecrets,omitempty"`
	NodeNames               []string            `json:"nodeNames,omitempty" doc:"pull only on these nodes"`
	NodeSelector            map[string]string   `json:"nodeSelector,omitempty" doc:"pull only on nodes with these labels (not with nodeNames)"`
	Parallelism             *int32              `json:"parallelism,omitempty" doc:"nodes pulled at once; default 1, 0 pauses the job"`
	TimeoutSeconds          int32               `json:"timeoutSeconds,omitempty" doc:"per-node pull timeout; default 600"`
	BackoffLimit            *int32              `json:"backoffLimit,omitempty" doc:"retries per node, at most 100; default 3, 0 means none"`
	CompletionPolicy        string              `json:"completionPolicy,omitempty" doc:"Always (default) or Never"`
	ActiveDeadlineSeconds   int64               `json:"activeDeadlineSeconds,omitempty" doc:"only with completionPolicy Always; not shorter than timeoutSeconds"`
	TTLSecondsAfterFinished int32               `json:"ttlSecondsAfterFinished,omitempty"`
	Tolerations             []PodToleration     `json:"tolerations,omitempty"`
	CreatedAt               *time.Time          `json:"createdAt,omitempty" api:"readonly"`
	Status                  *ImagePullJobStatus `json:"status,omitempty" api:"readonly"`
}

// ImagePullJobStatus is the progress of an image pull job.
type ImagePullJobStatus struct {
	Desired        int32        `json:"desired"`
	Active         int32        `json:"active"`
	Succeeded      int32        `json:"succeeded"`
	Failed         int32        `json:"failed"`
	Message        string       `json:"message,omitempty"`
	FailedNodes    []FailedNode `json:"failedNodes,omitempty"`
	StartTime      *time.Time   `json:"startTime,omitempty"`
	CompletionTime *time.Time   `json:"completionTime,omitempty"`
}

// FailedNode is a node where the image could not be pulled.
type FailedNode struct {
	Name    string `json:"name"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// ListImagePullJobsResponse lists image pull jobs.
type ListImagePullJobsResponse struct {
	ImagePullJobs []ImagePullJob `json:"imagePullJobs" api:"required"`
	Continue      string         `json:"continue,omitempty"`
}

// Empty is the body of successful deletes and stops ({}), as in v1.
type Empty struct{}
