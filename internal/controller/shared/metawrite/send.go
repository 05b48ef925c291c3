package metawrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"k8s.io/client-go/rest"
)

// answers are the buffers the answers to writes are read into. rest.Request.Do reads each answer with io.ReadAll
// into a fresh slice, grown from 512 bytes by doubling: for a Ray pod's metadata (its managedFields list every
// field Manta set) that was the operator's largest allocation site. The answers are decoded at once and nothing
// decoded from them aliases them, so one buffer serves write after write.
var answers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledAnswer bounds the buffers kept: a rare huge answer is left to the collector rather than held for good.
const maxPooledAnswer = 1 << 20

// send sends req and hands a successful answer's body to read (nil: the body is discarded), which must not keep
// it, nor anything aliasing it, once it returns: the buffer is reused. verb, namespace and name are req's.
//
// It is req.Do(ctx) but for where the answer goes. rest.Request.Stream, as Do, waits on the client's token bucket
// (and reports the wait), retries on Retry-After, counts each attempt in rest_client_requests_total, reports the
// answer's warnings, and turns an answer other than 2xx into the API server's error (its Status decoded:
// apierrors.IsAlreadyExists, IsConflict, IsNotFound... work on it). What Do does beyond that is not done here: the
// latency and size metrics (the operator does not register them), logging bodies at -v 7 and above, and the check
// below of an empty namespace, made here with Do's words.
func send(ctx context.Context, req *rest.Request, verb, namespace, name string, read func(body []byte) error) error {
	if err := preflight(verb, namespace, name); err != nil {
		return err
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	if read == nil {
		// io.Discard reads through a pooled buffer of its own; draining lets the connection carry the next request.
		if _, err := io.Copy(io.Discard, body); err != nil {
			return readError(err)
		}
		return nil
	}
	buf := answers.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledAnswer {
			answers.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(body); err != nil {
		return readError(err)
	}
	return read(buf.Bytes())
}

// preflight refuses what rest.Request.Do refuses before sending (requestPreflightCheck): a namespaced write with
// an empty namespace, which would otherwise reach the cluster-wide path.
func preflight(verb, namespace, name string) error {
	if namespace != "" {
		return nil
	}
	switch {
	case verb == http.MethodPost:
		return errors.New("an empty namespace may not be set during creation")
	case (verb == http.MethodPut || verb == http.MethodDelete) && name != "":
		return errors.New("an empty namespace may not be set when a resource name is provided")
	}
	return nil
}

// readError is a failure to read an answer already begun, worded as rest.Request.Do words it.
func readError(err error) error {
	return fmt.Errorf("unexpected error when reading response body. Please retry. Original error: %w", err)
}
