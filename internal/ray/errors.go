package ray

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"unicode"
)

var (
	// ErrNotFound: the job (or other object) does not exist on the Ray head.
	ErrNotFound = errors.New("not found")
	// ErrAlreadySubmitted: a job with this submission_id exists already; it was not submitted again.
	ErrAlreadySubmitted = errors.New("submission_id already submitted")
	// ErrUnavailable: the Ray head (or the path to it) could not answer now; the call may succeed later.
	ErrUnavailable = errors.New("ray head unavailable")
	// ErrNoEndpoints: the Kubernetes API server's Service proxy found no ready endpoint behind the head Service:
	// the Service does not route to the head (yet), whatever the head's own state. It is also ErrUnavailable.
	ErrNoEndpoints = fmt.Errorf("head service has no ready endpoint (%w)", ErrUnavailable)
	// ErrUnauthorized: the head uses token authentication and the token is missing (401) or wrong (403).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrJobNotTerminal: Ray refused to delete a job that is still pending or running; stop it first.
	ErrJobNotTerminal = errors.New("job is not in a terminal state")
	// ErrMalformedResponse: the head answered with a body this client cannot decode.
	ErrMalformedResponse = errors.New("malformed response")
	// ErrRedirected: the head answered with a redirect. Ray's API never redirects, and following one would send
	// the request (its body, and through the Kubernetes proxy the operator's credentials) wherever the answer
	// says, so the client refuses it.
	ErrRedirected = errors.New("redirect refused")
)

// APIError is an unsuccessful HTTP answer from the Ray head or from the Kubernetes API server proxying to it.
// Its message names the Ray path (GET /api/jobs/<id>), not the address: the message reaches API callers.
type APIError struct {
	Method string
	// Path is the path on the Ray endpoint, e.g. /api/jobs/<id>.
	Path string
	// URL is the full address (head Service or API server proxy path), for logs.
	URL        string
	StatusCode int
	// Body is a short excerpt of the answer: its last line (Ray answers errors in plain text, often a Python
	// traceback that ends in the exception), control characters removed, at most excerptLen characters. The
	// answer itself is never kept: it comes from a head a tenant controls.
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
	msg := fmt.Sprintf("%s %s: %s answered %d", e.Method, e.Path, src, e.StatusCode)
	if e.kind != nil {
		msg += " (" + e.kind.Error() + ")"
	}
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Unwrap lets errors.Is match the sentinel this answer was classified as.
func (e *APIError) Unwrap() error { return e.kind }

// transportError is a request that got no HTTP answer (connection refused, DNS failure, timeout).
type transportError struct {
	method, path string
	cause        error
}

func (e *transportError) Error() string {
	return fmt.Sprintf("%s %s: %s", e.method, e.path, describeCause(e.cause))
}

// Unwrap matches both ErrUnavailable and the cause (e.g. context.DeadlineExceeded).
func (e *transportError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

// describeCause says why a request failed without the address it went to: net/http's *url.Error quotes the whole
// URL, and dial and DNS errors name the host.
func describeCause(err error) string {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded.Error()
	case errors.Is(err, context.Canceled):
		return context.Canceled.Error()
	case errors.As(err, &dns):
		if dns.IsNotFound {
			return "lookup: no such host"
		}
		return "lookup: " + dns.Err
	case errors.As(err, &op):
		if op.Err == nil {
			return op.Op + " failed"
		}
		return op.Op + ": " + describeCause(op.Err)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return describeCause(ue.Err)
	}
	return err.Error()
}

// decodeError is a 2xx answer whose body does not decode.
type decodeError struct {
	method, path string
	excerpt      string
	cause        error
}

func (e *decodeError) Error() string {
	msg := fmt.Sprintf("%s %s: %v: %v", e.method, e.path, ErrMalformedResponse, e.cause)
	if e.excerpt != "" {
		msg += fmt.Sprintf(": %q", e.excerpt)
	}
	return msg
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

// excerptLen bounds the part of an upstream answer that error messages carry.
const excerptLen = 200

// excerpt is what error messages may repeat of an answer from a head: its last non-empty line (the exception of
// a Python traceback), printable characters only, at most excerptLen runes.
func excerpt(raw []byte) string {
	const window = 4 << 10 // the end is enough to find the last line
	if len(raw) > window {
		raw = raw[len(raw)-window:]
	}
	s := strings.TrimRightFunc(strings.ToValidUTF8(string(raw), ""), unicode.IsSpace)
	if i := strings.LastIndexAny(s, "\r\n"); i >= 0 {
		s = s[i+1:]
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if !unicode.IsPrint(r) {
			if r == '\t' {
				r = ' '
			} else {
				continue
			}
		}
		if n == excerptLen {
			b.WriteString("...")
			break
		}
		b.WriteRune(r)
		n++
	}
	return strings.TrimSpace(b.String())
}
