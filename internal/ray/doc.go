// Package ray is the operator's client for a Ray head's HTTP endpoints: the dashboard's Jobs API, the Serve REST
// API, the dashboard's GCS health check, and the Serve HTTP proxy's health check.
//
// Requests reach the head through a Transport: either directly (http://<head-svc>.<ns>.svc.<domain>:<port>, or
// the head pod's IP for Serve health) or through the Kubernetes API server's service and pod proxy subresources,
// for operators that cannot reach pods. A Factory picks the transport from Options.UseKubernetesProxy.
//
// Every call takes a context and is bounded by the client's timeout. Failures are reported with typed errors that
// controllers can act on with errors.Is: ErrNotFound, ErrAlreadySubmitted, ErrUnavailable (retry later),
// ErrUnauthorized, ErrMalformedResponse; *APIError carries the HTTP status and body.
package ray
