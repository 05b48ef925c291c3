package v1

// Label keys (and values) on the objects Manta makes, KubeRay's, defined once here for the operator, its builders
// and its caches. Real clients (the Ray autoscaler, Kueue, Flyte) select on these.
const (
	LabelIsRayNode    = "ray.io/is-ray-node"
	LabelCluster      = "ray.io/cluster"
	LabelNodeType     = "ray.io/node-type"
	LabelGroup        = "ray.io/group"
	LabelIdentifier   = "ray.io/identifier"
	LabelServe        = "ray.io/serve"
	LabelAppName      = "app.kubernetes.io/name"
	LabelCreatedBy    = "app.kubernetes.io/created-by"
	LabelOriginCRD    = "ray.io/originated-from-crd"
	LabelOriginCRName = "ray.io/originated-from-cr-name"
	// LabelReplicaIndex numbers the replicas of a worker group (0, 1, ...; the lowest free index is reused).
	LabelReplicaIndex = "ray.io/worker-group-replica-index"
	// LabelReplicaName groups the numOfHosts pods of one multi-host replica.
	LabelReplicaName = "ray.io/worker-group-replica-name"
	// LabelHostIndex is a pod's host number within its multi-host replica.
	LabelHostIndex = "ray.io/replica-host-index"
	// LabelDisableProvisionedHeadRestart set to "true" on a RayCluster (SidecarMode RayJobs set it): once the
	// cluster has been provisioned, a head pod that terminates is not replaced. KubeRay sets it as an annotation;
	// earlier Manta versions set it as a label, which is still honoured.
	LabelDisableProvisionedHeadRestart = "ray.io/disable-provisioned-head-restart"
	// LabelJobSubmissionMode on a RayJob's RayCluster is the RayJob's submission mode (KubeRay v1.6+).
	LabelJobSubmissionMode = "ray.io/job-submission-mode"
	// LabelHeadlessWorkerService marks the headless Service of a cluster's multi-host workers; its value is the cluster.
	LabelHeadlessWorkerService = "ray.io/headless-worker-svc"
	// LabelSchedulerName selects a KubeRay batch-scheduler plugin (volcano, yunikorn, kai-scheduler).
	LabelSchedulerName = "ray.io/scheduler-name"

	AppNameValue   = "kuberay"
	CreatedByValue = "kuberay-operator"

	NodeTypeHead   = "head"
	NodeTypeWorker = "worker"
	HeadGroupName  = "headgroup"
)
