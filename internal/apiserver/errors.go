package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// gRPC status codes used in error bodies; KubeRay's v1 clients read "code" as a gRPC code.
const (
	codeInvalidArgument    = 3
	codeNotFound           = 5
	codeAlreadyExists      = 6
	codePermissionDenied   = 7
	codeResourceExhausted  = 8
	codeFailedPrecondition = 9
	codeAborted            = 10
	codeUnimplemented      = 12
	codeInternal           = 13
	codeUnavailable        = 14
	codeUnauthenticated    = 16
)

// FieldViolation names one bad field of a request and why it is bad: google.rpc.BadRequest.FieldViolation.
type FieldViolation struct {
	Field       string `json:"field" api:"required" doc:"JSON path of the offending field, e.g. clusterSpec.headGroupSpec.imagePullPolicy"`
	Description string `json:"description" api:"required" doc:"what is wrong with it"`
}

// typeBadRequest is the Any type URL of google.rpc.BadRequest.
const typeBadRequest = "type.googleapis.com/google.rpc.BadRequest"

// BadRequest is a google.rpc.BadRequest packed in an Any, the one detail error answers carry.
type BadRequest struct {
	Type            string           `json:"@type" api:"required" doc:"always type.googleapis.com/google.rpc.BadRequest"`
	FieldViolations []FieldViolation `json:"fieldViolations" api:"required"`
}

// Status is the body of every error answer: google.rpc.Status in protobuf's JSON mapping, as grpc-gateway (and so
// KubeRay's API server) answers, decodable by protojson. Field errors are one BadRequest detail.
type Status struct {
	Code    int          `json:"code" api:"required" doc:"gRPC status code (3 InvalidArgument, 5 NotFound, 6 AlreadyExists, 7 PermissionDenied, 8 ResourceExhausted, 9 FailedPrecondition, 10 Aborted, 12 Unimplemented, 13 Internal, 14 Unavailable, 16 Unauthenticated)"`
	Message string       `json:"message" api:"required"`
	Details []BadRequest `json:"details,omitempty" doc:"google.protobuf.Any messages; field errors are a google.rpc.BadRequest"`
}

// Violations lists the field violations of every BadRequest detail.
func (s Status) Violations() []FieldViolation {
	var out []FieldViolation
	for _, d := range s.Details {
		out = append(out, d.FieldViolations...)
	}
	return out
}

// apiError is an error with the HTTP status and body to answer with.
type apiError struct {
	httpStatus int
	Status
	// cause is what went wrong inside, for the server's log only: it may name this server's ServiceAccount or
	// in-cluster URLs, which callers are not told.
	cause error
}

func (e *apiError) Error() string { return e.Message }

// internalError answers with msg and keeps err for the server's log.
func internalError(httpStatus, code int, err error, format string, args ...any) *apiError {
	e := newError(httpStatus, code, format, args...)
	e.cause = err
	return e
}

func newError(httpStatus, code int, format string, args ...any) *apiError {
	return &apiError{httpStatus: httpStatus, Status: Status{Code: code, Message: fmt.Sprintf(format, args...)}}
}

// invalid is a 400 naming the given fields; the message lists them so clients that only print "message" still
// show which field is wrong.
func invalid(vs ...FieldViolation) *apiError {
	return fieldError(http.StatusBadRequest, codeInvalidArgument, vs)
}

func fieldError(httpStatus, code int, vs []FieldViolation) *apiError {
	parts := make([]string, 0, len(vs))
	for _, v := range vs {
		parts = append(parts, v.Field+": "+v.Description)
	}
	st := Status{Code: code, Message: "invalid request: " + strings.Join(parts, "; ")}
	if len(vs) > 0 {
		st.Details = []BadRequest{{Type: typeBadRequest, FieldViolations: vs}}
	}
	return &apiError{httpStatus: httpStatus, Status: st}
}

func notFound(format string, args ...any) *apiError {
	return newError(http.StatusNotFound, codeNotFound, format, args...)
}

// fromKubernetes maps an error from the Kubernetes API server to an answer. what names the object, e.g.
// `cluster "a" in namespace "b"`.
func fromKubernetes(err error, what string) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		// The request's deadline passed (or the caller left) while Kubernetes was answering: not a server bug.
		return newError(http.StatusServiceUnavailable, codeUnavailable, "%s: kubernetes did not answer in time, retry later", what)
	case apierrors.IsNotFound(err):
		return notFound("%s not found", what)
	case apierrors.IsAlreadyExists(err):
		return newError(http.StatusConflict, codeAlreadyExists, "%s already exists", what)
	case apierrors.IsConflict(err):
		return newError(http.StatusConflict, codeAborted, "%s was changed concurrently: %s", what, statusMessage(err))
	case apierrors.IsInvalid(err):
		// Admission (CRD schema, CEL) refused the object: pass its field causes on.
		var vs []FieldViolation
		var se apierrors.APIStatus
		if errors.As(err, &se) && se.Status().Details != nil {
			for _, c := range se.Status().Details.Causes {
				vs = append(vs, FieldViolation{Field: c.Field, Description: c.Message})
			}
		}
		if len(vs) == 0 {
			vs = []FieldViolation{{Field: "", Description: statusMessage(err)}}
		}
		e := fieldError(http.StatusUnprocessableEntity, codeInvalidArgument, vs)
		e.Message = fmt.Sprintf("%s was refused by Kubernetes: %s", what, statusMessage(err))
		return e
	case apierrors.IsBadRequest(err):
		return newError(http.StatusBadRequest, codeInvalidArgument, "%s: %s", what, statusMessage(err))
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		return fieldError(http.StatusBadRequest, codeInvalidArgument, []FieldViolation{{Field: "continue", Description: "the continue token has expired; list again from the start"}})
	case apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err):
		return internalError(http.StatusServiceUnavailable, codeUnavailable, err, "%s: kubernetes is busy, retry later", what)
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		// The server's own identity lacks a permission: a deployment problem, not the caller's. Kubernetes' message
		// names that identity, which is the operator's business, so it goes to the log only.
		return internalError(http.StatusInternalServerError, codeInternal, err, "%s: the API server is not permitted to do this; its administrator should check its RBAC (details in its log)", what)
	default:
		// Transport errors carry the API server's in-cluster URL.
		return internalError(http.StatusInternalServerError, codeInternal, err, "%s: internal error (details in the API server's log)", what)
	}
}

func statusMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		if m := se.Status().Message; m != "" {
			return m
		}
		return string(se.Status().Reason)
	}
	return err.Error()
}
