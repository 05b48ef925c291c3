// Package apiserver is Manta's REST API server: the paths and JSON shapes of KubeRay's API server v1
// (/apis/v1/namespaces/{ns}/clusters, compute_templates, jobs, services, jobsubmissions/{cluster}) plus Manta's
// image pull jobs, backed by Kubernetes objects (RayCluster, RayJob, RayService, ImagePullJob, and ConfigMaps for
// compute templates), and KubeRay's v2 resource API (/apis/ray.io/v1/..., v2.go), passed to Kubernetes.
//
// Requests are authenticated with the caller's Kubernetes token (TokenReview; "Bearer <token>" or, as KubeRay's
// clients send it, the bare token). v1 operations are authorised with a SubjectAccessReview for the Kubernetes
// resource and verb behind each, so the API lets a user do exactly what RBAC lets them do; v2 requests go to
// Kubernetes with the caller's own token. v1 bodies are decoded as protobuf's JSON mapping reads them (decode.go),
// unknown fields are reported (Warning headers) or refused (Strict field validation), and every 4xx answer is a
// google.rpc.Status whose BadRequest detail names the offending fields.
//
// The route table (routes.go) is the single source for the HTTP mux, the authorisation checks and the OpenAPI 3
// document served at /openapi.json; request and response schemas are generated from the Go model types
// (models.go).
package apiserver
