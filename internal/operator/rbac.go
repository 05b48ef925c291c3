package operator

// The metrics endpoint authenticates each scrape with TokenReview and authorises it with SubjectAccessReview
// (get on the non-resource URL /metrics), as controller-runtime's filters.WithAuthenticationAndAuthorization does.
// `make generate` adds these to config/rbac/operator/role.yaml (ClusterRole manta-operator), with the controllers'
// own markers.

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
