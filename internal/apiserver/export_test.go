package apiserver

import "time"

// What the external unit tests (package apiserver_test) reach inside the package. They are external so that they
// share apiservertest's request models with the envtests: apiservertest imports this package, so an in-package
// test could not import it.

type (
	APIError  = apiError
	Templates = templates
)

var (
	DecodeJSON = decodeJSON
	Invalid    = invalid
	NotFound   = notFound
	NewError   = newError
	WriteError = writeError

	ValidateComputeTemplate = validateComputeTemplate
	ValidateCluster         = validateCluster
	ValidateJob             = validateJob
	ValidateService         = validateService
	ValidateSubmission      = validateSubmission
	ValidateImagePullJob    = validateImagePullJob

	TemplateToConfigMap   = templateToConfigMap
	TemplateFromConfigMap = templateFromConfigMap
	ClusterToRay          = clusterToRay
	ClusterFromRay        = clusterFromRay
	JobToRay              = jobToRay
	JobFromRay            = jobFromRay
	ServiceToRay          = serviceToRay
	ServiceFromRay        = serviceFromRay
	ImagePullJobToK8s     = imagePullJobToK8s
	ImagePullJobFromK8s   = imagePullJobFromK8s
	TemplateNames         = templateNames

	FieldEnv    = fieldEnv
	ResourceEnv = resourceEnv
)

// HTTPStatus is the HTTP status the error is answered with.
func (e *apiError) HTTPStatus() int { return e.httpStatus }

// RecheckCertificates makes the server's next TLS handshake look at the certificate files again, as it does once a
// check interval has passed.
func RecheckCertificates(s *Server) {
	s.certs.mu.Lock()
	s.certs.checked = time.Time{}
	s.certs.mu.Unlock()
}
