package apiserver

// What `manta apiserver` itself needs: it authenticates callers with TokenReview, asks SubjectAccessReview whether
// each caller may do what the request means, and then acts with its own credentials. `make generate` turns these
// markers into config/rbac/apiserver/role.yaml (ClusterRole manta-apiserver). Secrets: only get, by name, of a
// RayCluster's Ray auth token (factoryDashboard); never list or watch. Reaching dashboards through the Kubernetes
// proxy (--use-kubernetes-proxy) needs services/proxy, which is a role of its own (internal/rbac/apiserverproxy)
// bound only when that mode is on. Namespaces: list, so the console can offer the namespaces in which
// SubjectAccessReview says the caller may list Ray objects (console.go).

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;create;delete
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters;rayjobs;rayservices,verbs=get;list;create;update;delete
// +kubebuilder:rbac:groups=manta.dev,resources=imagepulljobs,verbs=get;list;create;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=list
// +kubebuilder:rbac:groups="",resources=services;secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=list
