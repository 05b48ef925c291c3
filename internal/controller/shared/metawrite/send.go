package metawrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/transport"
	"k8s.io/client-go/util/flowcontrol"
)

// answers are the buffers the answers to writes are read into. rest.Request.Do reads each answer with io.ReadAll
// into a fresh slice, grown from 512 bytes by doubling: for a Ray pod's metadata (its managedFields list every
// field Manta set) that was the operator's largest allocation site. The answers are decoded at once and nothing
// decoded from them aliases them, so one buffer serves write after write.
var answers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledAnswer bounds the buffers kept: a rare huge answer is left to the collector rather than held for good.
const maxPooledAnswer = 1 << 20

// maxRetries is rest.Request's: how many times a write answered with Retry-After is sent again.
const maxRetries = 10

// maxErrorText is rest.Request's cap on the text of an answer quoted in an error.
const maxErrorText = 2048

// write is one request: verb and path (namespace, resource, name, subresource) and its body in contentType.
type write struct {
	verb, namespace, resource, name, subresource string
	contentType                                  string
	body                                         []byte
}

// endpoint sends one group version's writes through the operator's HTTP transport, as rest.Request.Stream sends
// them, without what Stream spends on each request for what the operator never reads: it builds the request's URL
// three more times over (for the rate-limiter latency metric, which the operator does not register, for a no-op
// backoff, and for the result metric's host), a metric URL template, a DNS trace, and http.Client's redirect and
// header bookkeeping. In the 1,000-cluster profile those were a third of the writes' CPU.
//
// Kept as Stream does it: the wait on the client's token bucket before each attempt, the retries of an answer with
// Retry-After (429 or 5xx, at most maxRetries), rest_client_requests_total per attempt, the answer's warnings to the
// config's warning handler, the config's timeout, and an answer other than 2xx turned into the API server's error
// (its Status decoded). Not kept: the latency and size metrics (the operator does not register them), and logging
// bodies at -v 7 and above. With client-go's backoff set in the environment (KUBE_CLIENT_BACKOFF_BASE and
// _DURATION) every write goes through rest.Request.Stream itself, which applies it.
type endpoint struct {
	rt        http.RoundTripper
	timeout   time.Duration
	base      url.URL // scheme, host and the group version's path: https://host/apis/ray.io/v1
	limiter   flowcontrol.RateLimiter
	userAgent string
	auth      func() string // the Authorization client-go's bearer-token round tripper would set; nil: another sets it
	accept    string
	group     string
	warn      rest.WarningHandlerWithContext
	rc        rest.Interface // client-go's own client for the group version: its base URL, token bucket, and the slow path
	slow      bool           // client-go's backoff is configured: send through rc
}

// newEndpoint makes the endpoint for one group version, sending contentType and asking for metadata in it. It has a
// token bucket of its own at cfg's QPS and burst, as every resource's client the manager makes has
// (controller-runtime builds one REST client per kind), and shares hc's connections.
func newEndpoint(cfg *rest.Config, hc *http.Client, apiPath string, gv schema.GroupVersion, contentType string) (*endpoint, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath = apiPath
	c.GroupVersion = &gv
	c.NegotiatedSerializer = codecs.WithoutConversion()
	c.ContentType = contentType
	c.AcceptContentTypes = contentType + asMetadata
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientForConfigAndClient(c, hc)
	if err != nil {
		return nil, err
	}
	e := &endpoint{rt: hc.Transport, timeout: hc.Timeout, base: *rc.Post().URL(), limiter: rc.GetRateLimiter(),
		userAgent: cfg.UserAgent, accept: c.AcceptContentTypes, group: gv.Group, rc: rc, warn: warningHandler(cfg),
		slow: os.Getenv("KUBE_CLIENT_BACKOFF_BASE") != "" && os.Getenv("KUBE_CLIENT_BACKOFF_DURATION") != ""}
	if e.rt == nil {
		e.rt = http.DefaultTransport
	}
	e.auth = bearerAuth(cfg)
	return e, nil
}

// bearerAuth is the Authorization header client-go's bearer-token round tripper sets on cfg's requests, for the
// endpoint to set first: that round tripper copies every request that has none before setting it. nil where cfg
// authenticates otherwise, or its token file cannot be read now: the round tripper then does as it does.
func bearerAuth(cfg *rest.Config) func() string {
	if cfg.BearerTokenFile == "" {
		if cfg.BearerToken == "" {
			return nil
		}
		h := "Bearer " + cfg.BearerToken
		return func() string { return h }
	}
	// As the round tripper reads the file: cached for a while, the config's token where a read fails.
	source := transport.NewCachedFileTokenSource(cfg.BearerTokenFile)
	bearer := cfg.BearerToken
	if bearer == "" {
		t, err := source.Token()
		if err != nil {
			return nil
		}
		bearer = t.AccessToken
	}
	return func() string {
		if t, err := source.Token(); err == nil {
			return "Bearer " + t.AccessToken
		}
		return "Bearer " + bearer
	}
}

// warningHandler is the handler a rest.Request of cfg reports warnings to: the config's, else client-go's default,
// which logs them.
func warningHandler(cfg *rest.Config) rest.WarningHandlerWithContext {
	switch {
	case cfg.WarningHandlerWithContext != nil:
		return cfg.WarningHandlerWithContext
	case cfg.WarningHandler != nil:
		return warningAdapter{cfg.WarningHandler}
	}
	return rest.WarningLogger{}
}

type warningAdapter struct{ rest.WarningHandler }

func (w warningAdapter) HandleWarningHeaderWithContext(_ context.Context, code int, agent, text string) {
	w.HandleWarningHeader(code, agent, text)
}

// send sends w and hands a successful answer's body to read (nil: the body is discarded), which must not keep it,
// nor anything aliasing it, once it returns: the buffer is reused.
func (e *endpoint) send(ctx context.Context, w write, read func(body []byte) error) error {
	if err := preflight(w.verb, w.namespace, w.name); err != nil {
		return err
	}
	if e.slow {
		return e.sendStream(ctx, w, read)
	}
	u := e.base
	u.Path = e.path(w)
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := e.limiter.Wait(ctx); err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			return fmt.Errorf("client rate limiter Wait returned an error: %w", err)
		}
		wait, err := e.attempt(ctx, &u, w, read, attempt < maxRetries)
		if err != nil || wait < 0 {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// path is w's path under the group version's.
func (e *endpoint) path(w write) string {
	var b strings.Builder
	b.Grow(len(e.base.Path) + len(w.namespace) + len(w.resource) + len(w.name) + len(w.subresource) + 16)
	b.WriteString(e.base.Path)
	if w.namespace != "" {
		b.WriteString("/namespaces/")
		b.WriteString(w.namespace)
	}
	b.WriteByte('/')
	b.WriteString(w.resource)
	if w.name != "" {
		b.WriteByte('/')
		b.WriteString(w.name)
	}
	if w.subresource != "" {
		b.WriteByte('/')
		b.WriteString(w.subresource)
	}
	return b.String()
}

// attempt sends w once. It returns how long to wait before sending it again (negative: not again), or the error
// that ends the write.
func (e *endpoint) attempt(ctx context.Context, u *url.URL, w write, read func([]byte) error, mayRetry bool) (time.Duration, error) {
	if e.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.timeout)
		defer cancel() // after the answer is read: the timeout covers it, as http.Client's does
	}
	req, err := http.NewRequestWithContext(ctx, w.verb, "", nil)
	if err != nil {
		return -1, err
	}
	uc := *u
	req.URL, req.Host = &uc, uc.Host
	req.Header = make(http.Header, 4)
	req.Header["Accept"] = []string{e.accept}
	if w.contentType != "" {
		req.Header["Content-Type"] = []string{w.contentType}
	}
	if e.userAgent != "" {
		// What client-go's user-agent round tripper would set; set here, it does not copy the request to set it.
		req.Header["User-Agent"] = []string{e.userAgent}
	}
	if e.auth != nil {
		req.Header["Authorization"] = []string{e.auth()}
	}
	if w.body != nil {
		body := w.body
		req.ContentLength = int64(len(body))
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	resp, err := e.rt.RoundTrip(req)
	code := "<error>"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	metrics.RequestResult.Increment(ctx, code, w.verb, u.Host)
	if err != nil {
		// As http.Client.Do words a failed request: `Post "https://...": ...`.
		return -1, &url.Error{Op: w.verb[:1] + strings.ToLower(w.verb[1:]), URL: u.String(), Err: err}
	}
	defer resp.Body.Close()
	if len(resp.Header["Warning"]) > 0 {
		warnings, _ := utilnet.ParseWarningHeaders(resp.Header["Warning"])
		for _, wh := range warnings {
			e.warn.HandleWarningHeaderWithContext(ctx, wh.Code, wh.Agent, wh.Text)
		}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return -1, readAnswer(resp.Body, read)
	}
	seconds, hasRetryAfter := retryAfter(resp)
	if mayRetry && hasRetryAfter && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500) {
		_, _ = io.Copy(io.Discard, resp.Body) // the connection carries the next attempt
		return time.Duration(seconds) * time.Second, nil
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1, readError(err)
	}
	return -1, e.answerError(resp, w, body, seconds)
}

// readAnswer reads a successful answer into a pooled buffer and hands it to read (nil: drains it).
func readAnswer(body io.Reader, read func([]byte) error) error {
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

// retryAfter is the answer's Retry-After in whole seconds, if it has one.
func retryAfter(resp *http.Response) (int, bool) {
	if h := resp.Header.Get("Retry-After"); h != "" {
		if i, err := strconv.Atoi(h); err == nil {
			return i, true
		}
	}
	return 0, false
}

// answerError is the error an answer other than 2xx makes, as rest.Request makes it: the API server's Status where
// the body is one that failed, otherwise a generic error of the answer's code quoting a textual body.
func (e *endpoint) answerError(resp *http.Response, w write, body []byte, retryAfterSeconds int) error {
	contentType := resp.Header.Get("Content-Type")
	if contentType == "" {
		contentType = w.contentType
	}
	var info runtime.SerializerInfo
	decodable := false
	if contentType != "" {
		mediaType, _, err := mime.ParseMediaType(contentType)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		info, decodable = runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mediaType)
	}
	if decodable && len(body) > 0 {
		// Decoded as a REST client decodes (its TypeMeta dropped); servers that state no version are taken to mean
		// v1, as rest.Result.Error takes them.
		decoder := codecs.WithoutConversion().DecoderToVersion(info.Serializer, schema.GroupVersion{})
		if out, _, err := decoder.Decode(body, &schema.GroupVersionKind{Version: "v1"}, nil); err == nil {
			if st, ok := out.(*metav1.Status); ok && st.Status == metav1.StatusFailure {
				return apierrors.FromObject(st)
			}
		}
	}
	message := "unknown"
	if isText(resp) {
		if len(body) > maxErrorText {
			body = body[:maxErrorText]
		}
		message = strings.TrimSpace(string(body))
	}
	return apierrors.NewGenericServerResponse(resp.StatusCode, w.verb, schema.GroupResource{Group: e.group, Resource: w.resource},
		w.name, message, retryAfterSeconds, true)
}

// isText says whether the answer is text (or says nothing of its type), whose body an error may quote.
func isText(resp *http.Response) bool {
	contentType := resp.Header.Get("Content-Type")
	if contentType == "" {
		return true
	}
	media, _, err := mime.ParseMediaType(contentType)
	return err == nil && strings.HasPrefix(media, "text/")
}

// sendStream sends w through client-go's rest.Request.Stream, which applies client-go's backoff.
func (e *endpoint) sendStream(ctx context.Context, w write, read func([]byte) error) error {
	req := e.rc.Verb(w.verb).Namespace(w.namespace).Resource(w.resource)
	if w.name != "" {
		req = req.Name(w.name)
	}
	if w.subresource != "" {
		req = req.SubResource(w.subresource)
	}
	if w.contentType != "" {
		req = req.SetHeader("Content-Type", w.contentType)
	}
	if w.body != nil {
		req = req.Body(w.body)
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	return readAnswer(body, read)
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
