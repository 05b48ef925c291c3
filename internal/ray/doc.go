// Package ray is the operator's client for a Ray head's HTTP endpoints: the dashboard's Jobs API, the Serve REST
// API, the dashboard's GCS health check, and the Serve HTTP proxy's health check.
//
// Requests reach the head through a Transport: either directly (http://<head-svc>.<ns>.svc.<domain>:<port>, or
// the head pod's IP for Serve health) or through the Kubernetes API server's service and pod proxy subresources,
// for operators that cannot reach pods. A Factory picks the transport from Options.UseKubernetesProxy.
//
// Every call takes a context and is bounded by the client's timeout. Failures are reported with typed errors that
// controllers can act on with errors.Is: ErrNotFound, ErrAlreadySubmitted, ErrUnavailable (retry later),
// ErrUnauthorized, ErrMalformedResponse; *APIError carries the HTTP status and an excerpt of the body.
//
// A head is run by a tenant and answers what the tenant wants, so the client trusts nothing it says: redirects are
// refused (ErrRedirected; through the API server a followed redirect would carry the operator's token), the names
// URLs are built from are validated (ErrInvalidTarget), JSON answers are read up to MaxResponseBytes
// (ErrResponseTooLarge) and job logs up to their last MaxJobLogBytes, and error messages repeat at most a short
// printable excerpt of an answer and name Ray paths, not addresses.
package ray
