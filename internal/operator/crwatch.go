package operator

import (
	"bufio"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/manta-dev/manta/internal/controller/shared/optimize"
)

// Manta's custom resources have no protobuf: their watches are JSON, which client-go scans about five times per
// event (the framer, the WatchEvent's kind and body, the object's kind and body), and each event carries
// metadata.managedFields, often a third of its bytes, which stripUnread (the cache's transform for every kind here)
// throws away once decoded. pruneCRWatches cuts managedFields from each event's bytes before client-go reads them.

// crWatchResources are the watched custom resources, by "group/version", whose caches strip managedFields: the
// manager's cache holds them all, under stripUnread (in cacheObject, cacheOptions' DefaultTransform).
var crWatchResources = map[string][]string{
	"ray.io/v1":          {"rayclusters", "rayjobs", "rayservices", "raycronjobs"},
	"manta.dev/v1alpha1": {"imagepulljobs"},
}

// prunedCREvents and keptCREvents count the custom resource watch events pruneCRWatches rewrote and passed as they
// came (read by its tests).
var prunedCREvents, keptCREvents atomic.Int64

// pruneCRWatches wraps the operator's transport: the response of a JSON watch of one of crWatchResources is read
// through a crWatchBody. Every other request passes untouched.
func pruneCRWatches(sw *optimize.Switches) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err != nil || resp.StatusCode != http.StatusOK || !isCRWatch(r) || !isJSONWatch(resp) {
				return resp, err
			}
			resp.Body = newCRWatchBody(resp.Body, sw)
			return resp, nil
		})
	}
}

// isCRWatch says whether r watches one of crWatchResources (of all namespaces, or of one).
func isCRWatch(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	if w := r.URL.Query().Get("watch"); w != "true" && w != "1" {
		return false
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var resource string
	switch {
	case len(parts) == 4: // apis/<group>/<version>/<resource>
		resource = parts[3]
	case len(parts) == 6 && parts[3] == "namespaces": // apis/<group>/<version>/namespaces/<ns>/<resource>
		resource = parts[5]
	default:
		return false
	}
	if parts[0] != "apis" {
		return false
	}
	for _, res := range crWatchResources[parts[1]+"/"+parts[2]] {
		if res == resource {
			return true
		}
	}
	return false
}

// isJSONWatch says whether a watch's response is JSON. The API server marks a JSON watch "application/json" alone
// (only other media types get ";stream=watch"); either is taken.
func isJSONWatch(resp *http.Response) bool {
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return err == nil && mt == "application/json" && (params["stream"] == "" || params["stream"] == "watch") &&
		resp.Header.Get("Content-Encoding") == ""
}

// crWatchBody reads a JSON watch stream, one event per line as the API server writes it (compact JSON and "\n";
// JSON has no raw newline inside a value), and hands on each line with object.metadata.managedFields cut out. A
// line that is not a whole, valid event with managedFields (an ERROR event's Status, a BOOKMARK, anything else) is
// handed on as it came, and so is a stream's unterminated tail.
type crWatchBody struct {
	rewrittenStream
	r    *bufio.Reader
	long []byte // a line longer than r's buffer, gathered; kept for the next
	sw   *optimize.Switches
}

func newCRWatchBody(body io.ReadCloser, sw *optimize.Switches) *crWatchBody {
	return &crWatchBody{rewrittenStream: rewrittenStream{body: body}, r: bufio.NewReaderSize(body, 64<<10), sw: sw}
}

func (b *crWatchBody) Read(p []byte) (int, error) { return b.read(p, b) }

// next reads one line into b.out (pruned in place: a line that fits r's buffer is read from it without a copy) and
// returns the error that ended the stream, if it did.
func (b *crWatchBody) next() error {
	line, err := b.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		b.long = append(b.long[:0], line...)
		for err == bufio.ErrBufferFull {
			line, err = b.r.ReadSlice('\n')
			b.long = append(b.long, line...)
		}
		line = b.long
	}
	if err == nil {
		var ok bool
		if line, ok = pruneManagedFields(line); ok {
			prunedCREvents.Add(1)
			b.sw.Acted(optimize.CRWatchPruning)
		} else {
			keptCREvents.Add(1)
		}
	}
	b.out, b.off = line, 0
	return err
}

// pruneManagedFields cuts the managedFields member, and a comma beside it, out of line's object.metadata, in place,
// if line is one valid JSON watch event (ADDED, MODIFIED or DELETED) with it. Otherwise it returns line unchanged
// and false.
func pruneManagedFields(line []byte) ([]byte, bool) {
	var s eventScan
	i := skipSpace(line, 0)
	if i == len(line) || line[i] != '{' {
		return line, false
	}
	i = s.object(line, i, 0, 1)
	if i < 0 || skipSpace(line, i) != len(line) || s.bad || s.mfStart < 0 || s.seen != [3]int{1, 1, 1} {
		return line, false
	}
	// An ERROR event's object is a Status, a BOOKMARK's has no managedFields.
	if t := string(s.typ); t != `"ADDED"` && t != `"MODIFIED"` && t != `"DELETED"` {
		return line, false
	}
	start, end := s.mfStart, s.mfEnd
	switch {
	case s.mfNext >= 0: // the key, its value and the comma after, up to the next key
		end = s.mfNext
	case s.mfPrevEnd >= 0: // the last member: from the end of the one before, its comma included
		start = s.mfPrevEnd
	}
	n := copy(line[start:], line[end:])
	return line[:start+n], true
}

// maxDepth bounds the nesting the scan follows (encoding/json's own bound is 10,000); deeper lines pass unchanged.
const maxDepth = 1000

// eventScan validates a watch event's JSON as it looks for object.metadata.managedFields. The keys it looks for
// must each appear once, unescaped, for the cut to leave what json.Unmarshal reads of the rest unchanged.
type eventScan struct {
	typ  []byte // the event's type, quotes included
	seen [3]int // how often each of eventKeys appeared at its level
	bad  bool   // an escaped key where a looked-for one could be
	// managedFields' key start and value end, the end of the value before it and the start of the key after it
	mfStart, mfEnd, mfPrevEnd, mfNext int
}

// the key looked for at each level: in the event, in its object, in the object's metadata.
var eventKeys = [3]string{"object", "metadata", "managedFields"}

// object scans the object at b[i] ('{') at level (0: the event, 1: its object, 2: metadata, 3: not looked into) and
// returns its end, or -1 if it is not valid JSON.
func (s *eventScan) object(b []byte, i, level, depth int) int {
	if depth > maxDepth {
		return -1
	}
	if level == 0 {
		s.mfStart, s.mfEnd, s.mfPrevEnd, s.mfNext = -1, -1, -1, -1
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	prevEnd, wantNext := -1, false
	for {
		if i >= len(b) || b[i] != '"' {
			return -1
		}
		keyStart := i
		end, escaped := scanString(b, i)
		if end < 0 {
			return -1
		}
		if wantNext {
			s.mfNext, wantNext = keyStart, false
		}
		key := b[keyStart+1 : end-1]
		if i = skipSpace(b, end); i >= len(b) || b[i] != ':' {
			return -1
		}
		if i = skipSpace(b, i+1); i >= len(b) {
			return -1
		}
		valStart := i
		match := level < 3 && string(key) == eventKeys[level]
		if match {
			s.seen[level]++
		}
		if level < 3 && escaped {
			s.bad = true
		}
		switch {
		case match && level < 2 && b[i] == '{':
			i = s.object(b, i, level+1, depth+1)
		default:
			i = s.value(b, i, depth)
		}
		if i < 0 {
			return -1
		}
		switch {
		case match && level == 2:
			s.mfStart, s.mfEnd, s.mfPrevEnd, wantNext = keyStart, i, prevEnd, true
		case level == 0 && string(key) == "type":
			s.typ = b[valStart:i]
		}
		prevEnd = i
		if i = skipSpace(b, i); i >= len(b) {
			return -1
		}
		switch b[i] {
		case '}':
			return i + 1
		case ',':
			i = skipSpace(b, i+1)
		default:
			return -1
		}
	}
}

// value scans the JSON value at b[i] and returns its end, or -1 if it is not valid.
func (s *eventScan) value(b []byte, i, depth int) int {
	switch c := b[i]; {
	case c == '{':
		return s.object(b, i, 3, depth+1)
	case c == '[':
		return s.array(b, i, depth+1)
	case c == '"':
		end, _ := scanString(b, i)
		return end
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return scanNumber(b, i)
	}
	return -1
}

func (s *eventScan) array(b []byte, i, depth int) int {
	if depth > maxDepth {
		return -1
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1
	}
	for {
		if i >= len(b) {
			return -1
		}
		if i = s.value(b, i, depth); i < 0 {
			return -1
		}
		if i = skipSpace(b, i); i >= len(b) {
			return -1
		}
		switch b[i] {
		case ']':
			return i + 1
		case ',':
			i = skipSpace(b, i+1)
		default:
			return -1
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the end of the string at b[i] ('"'), or -1 if it is not valid, and whether it has escapes.
func scanString(b []byte, i int) (int, bool) {
	escaped := false
	for i++; i < len(b); {
		for i < len(b) && plainStringByte[b[i]] { // most of a line's bytes
			i++
		}
		if i == len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, escaped
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return -1, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return -1, false
				}
				i += 6
			default:
				return -1, false
			}
		case c < 0x20:
			return -1, false
		default:
			i++
		}
	}
	return -1, false
}

// plainStringByte: the bytes a string holds as they are (not '"', '\\' or a control character).
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// scanNumber returns the end of the number at b[i], or -1 if it is not valid JSON.
func scanNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case isDigit(b[i]):
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i++; i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i
}

func literal(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}
