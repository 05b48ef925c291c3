package ray

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNotFound: the job (or other object) does not exist on the Ray head.
	ErrNotFound = errors.New("not found")
	// ErrAlreadySubmitted: a job with this submission_id exists already; it was not submitted again.
	ErrAlreadySubmitted = errors.New("submission_id already submitted")
	// ErrUnavailable: the Ray head (or the path to it) could not answer now; the call may succeed later.
	ErrUnavailable = errors.New("ray head unavailable")
	// ErrUnauthorized: the head uses token authentication and the token is missing (401) or wrong (403).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrJobNotTerminal: Ray refused to delete a job that is still pending or running; stop it first.
	ErrJobNotTerminal = errors.New("job is not in a terminal state")
	// ErrMalformedResponse: the head answered with a body this client cannot decode.
	ErrMalformedResponse = errors.New("malformed response")
)

// APIError is an unsuccessful HTTP answer from the Ray head or from the Kubernetes API server proxying to it.
type APIError struct {
	Method     string
	URL        string
	StatusCode int
	// Body is the (possibly truncated) response body: Ray answers errors in plain text, often a Python traceback.
	Body string
	// FromProxy is true when the Kubernetes API server produced the answer itself (a metav1.Status), rather than
	// passing on Ray's.
	FromProxy bool
	kind      error
}

func (e *APIError) Error() string {
	src := "ray"
	if e.FromProxy {
		src = "kubernetes proxy"
	}
	msg := fmt.Sprintf("%s %s: %s answered %d", e.Method, e.URL, src, e.StatusCode)
	if e.kind != nil {
		msg += " (" + e.kind.Error() + ")"
	}
	if b := strings.TrimSpace(e.Body); b != "" {
		msg += ": " + lastLines(b, 3)
	}
	return msg
}

// Unwrap lets errors.Is match the sentinel this answer was classified as.
func (e *APIError) Unwrap() error { return e.kind }

// transportError is a request that got no HTTP answer (connection refused, DNS failure, timeout).
type transportError struct {
	method, url string
	cause       error
}

func (e *transportError) Error() string {
	return fmt.Sprintf("%s %s: %v", e.method, e.url, e.cause)
}

// Unwrap matches both ErrUnavailable and the cause (e.g. context.DeadlineExceeded).
func (e *transportError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

// decodeError is a 2xx answer whose body does not decode.
type decodeError struct {
	method, url string
	body        string
	cause       error
}

func (e *decodeError) Error() string {
	return fmt.Sprintf("%s %s: %v: %v: %q", e.method, e.url, ErrMalformedResponse, e.cause, truncate(e.body, 200))
}

func (e *decodeError) Unwrap() []error { return []error{ErrMalformedResponse, e.cause} }

// classify maps an HTTP error answer from Ray to a sentinel, or nil when none fits.
func classify(status int, body string) error {
	switch {
	case isAlreadySubmitted(body):
		// Ray 2.52 answers 500 with a traceback ending in this text (measured in test/ray); the head's own
		// validation path answers 400 for a ValueError, so accept the text whatever the status.
		return ErrAlreadySubmitted
	case isNotTerminal(body):
		// Ray 2.52 answers a DELETE of a running job with 500 and "RuntimeError: Attempted to delete job '<id>',
		// but it is in a non-terminal state RUNNING." (measured in test/ray): a refusal, not an outage.
		return ErrJobNotTerminal
	case status == 404:
		return ErrNotFound
	case status == 401 || status == 403:
		return ErrUnauthorized
	case status >= 500 || status == 408 || status == 429:
		return ErrUnavailable
	}
	return nil
}

// isAlreadySubmitted recognises Ray's answer to a second submission with the same submission_id:
// "Job with submission_id <id> already exists. Please use a different submission_id."
func isAlreadySubmitted(body string) bool {
	return strings.Contains(body, "Please use a different submission_id") ||
		(strings.Contains(body, "submission_id") && strings.Contains(body, "already exists"))
}

// isNotTerminal recognises Ray's refusal to delete a job that has not finished.
func isNotTerminal(body string) bool {
	return strings.Contains(body, "non-terminal state")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// lastLines keeps the end of a Python traceback, where the exception message is.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return truncate(strings.Join(lines, " | "), 500)
}
