// Package apiserverproxy holds the RBAC markers of what `manta apiserver --use-kubernetes-proxy` needs on top of
// its own role: `make generate` turns them into config/rbac/apiserver-proxy/role.yaml (ClusterRole
// manta-apiserver-proxy), which the chart binds only when apiserver.useKubernetesProxy is on. A package of its own
// because controller-gen makes one role per set of packages.
//
// Each verb is the HTTP method the job submission routes (internal/apiserver/submissions.go) send to a head's
// dashboard through internal/ray's proxy transport (GET→get, POST→create, DELETE→delete):
//   - services/proxy get: GetJob, ListJobs, GetJobLogs;
//   - services/proxy create: SubmitJob, StopJob;
//   - services/proxy delete: DeleteJob.
//
// The API server never talks to a pod, so no pods/proxy. test/rbac checks these against the requests it sends.
package apiserverproxy

// +kubebuilder:rbac:groups="",resources=services/proxy,verbs=get;create;delete
