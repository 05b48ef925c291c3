// Package operatorproxy holds the RBAC markers of what `manta operator --use-kubernetes-proxy` needs on top of its
// own role: `make generate` turns them into config/rbac/operator-proxy/role.yaml (ClusterRole
// manta-operator-proxy), which the chart binds only when operator.useKubernetesProxy is on. A package of its own
// because controller-gen makes one role per set of packages.
//
// Each verb is the HTTP method the operator sends through internal/ray's proxy transport (GET→get, POST→create,
// PUT→update, PATCH→patch, DELETE→delete):
//   - services/proxy get: GetJob (rayjob), GetServeDetails (rayservice);
//   - services/proxy create: SubmitJob and StopJob (rayjob);
//   - services/proxy update: DeployServeConfigV2 (rayservice, PUT /api/serve/applications/);
//   - pods/proxy get: the Serve proxy's health check on the head pod (rayservice).
//
// The operator never deletes a Ray job or a Serve application through the dashboard, so no delete.
// test/rbac checks these against the requests the operator sends.
package operatorproxy

// +kubebuilder:rbac:groups="",resources=services/proxy,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=pods/proxy,verbs=get
