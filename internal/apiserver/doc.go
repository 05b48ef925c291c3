// Package apiserver is Manta's REST API server: the paths and JSON shapes of KubeRay's API server v1
// (/apis/v1/namespaces/{ns}/clusters, compute_templates, jobs, services, jobsubmissions/{cluster}) plus Manta's
// image pull jobs, backed by Kubernetes objects (RayCluster, RayJob, RayService, ImagePullJob, and ConfigMaps for
// compute templates).
//
// Requests are authenticated with the caller's Kubernetes bearer token (TokenReview) and authorised with a
// SubjectAccessReview for the Kubernetes resource and verb behind each operation, so the API lets a user do
// exactly what RBAC lets them do. Bodies are decoded strictly (unknown fields are refused) and validated; every
// 4xx answer is a JSON Status that names the offending field.
//
// The route table (routes.go) is the single source for both the HTTP mux and the OpenAPI 3 document served at
// /openapi.json; request and response schemas are generated from the Go model types (models.go).
package apiserver
