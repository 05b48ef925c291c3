package ray

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxJobLogBytes is how much of a job's logs GetJobLogs returns: the end, where a failed job's error is.
const MaxJobLogBytes = 1 << 20

// GetJobLogs returns the job's driver output so far. Ray answers {"logs": "<everything the driver printed>"},
// which can be gigabytes: the answer is decoded as a stream into a buffer of MaxJobLogBytes, so reading it costs a
// bounded amount of memory. Longer logs come back as the line "[... N bytes truncated ...]" followed by their last
// MaxJobLogBytes bytes (less the start of a character cut in two).
func (c *DashboardClient) GetJobLogs(ctx context.Context, id string) (string, error) {
	path := "/api/jobs/" + url.PathEscape(id) + "/logs"
	resp, cancel, err := c.stream(ctx, http.MethodGet, path)
	if err != nil {
		return "", fmt.Errorf("get logs of job %q: %w", id, err)
	}
	defer cancel()
	defer func() { _ = resp.Body.Close() }()
	logs, err := readJobLogs(resp.Body, MaxJobLogBytes)
	var syn *jsonSyntaxError
	switch {
	case errors.As(err, &syn):
		return "", fmt.Errorf("get logs of job %q: %w", id, &decodeError{method: http.MethodGet, path: path, cause: syn})
	case err != nil:
		return "", fmt.Errorf("get logs of job %q: %w", id, &transportError{method: http.MethodGet, path: path, cause: err})
	}
	return logs, nil
}

// jsonSyntaxError: the answer is not the JSON object GetJobLogs expects.
type jsonSyntaxError struct{ msg string }

func (e *jsonSyntaxError) Error() string { return e.msg }

func syntaxErr(format string, args ...any) error {
	return &jsonSyntaxError{msg: fmt.Sprintf(format, args...)}
}

// readJobLogs decodes {"logs": "..."} from r, keeping the last max bytes of the string. Other members are skipped
// without being kept.
func readJobLogs(r io.Reader, max int) (string, error) {
	s := &jsonStream{r: bufio.NewReaderSize(r, 32<<10)}
	if err := s.expect('{'); err != nil {
		return "", err
	}
	var logs *tailBuffer
	c, err := s.nonSpace()
	if err != nil {
		return "", err
	}
	for c != '}' {
		if c != '"' {
			return "", syntaxErr("want a member name, found %q", c)
		}
		key := &tailBuffer{max: 64}
		if err := s.stringInto(key); err != nil {
			return "", err
		}
		if err := s.expect(':'); err != nil {
			return "", err
		}
		if c, err = s.nonSpace(); err != nil {
			return "", err
		}
		if c == '"' && !key.truncated() && strings.EqualFold(key.String(), "logs") {
			logs = &tailBuffer{max: max}
			err = s.stringInto(logs)
		} else {
			err = s.skipValue(c)
		}
		if err != nil {
			return "", err
		}
		if c, err = s.nonSpace(); err != nil {
			return "", err
		}
		switch c {
		case ',':
			if c, err = s.nonSpace(); err != nil {
				return "", err
			}
		case '}':
		default:
			return "", syntaxErr("want ',' or '}' after a member, found %q", c)
		}
	}
	if c, err := s.nonSpace(); err != io.EOF {
		if err != nil {
			return "", err
		}
		return "", syntaxErr("data after the object: %q", c)
	}
	if logs == nil {
		return "", syntaxErr(`no "logs" field`)
	}
	return strings.ToValidUTF8(logs.String(), "\uFFFD"), nil
}

// jsonStream reads JSON tokens from a stream without holding a whole value.
type jsonStream struct{ r *bufio.Reader }

// nonSpace returns the next byte that is not JSON whitespace. At the end of the stream it returns io.EOF.
func (s *jsonStream) nonSpace() (byte, error) {
	for {
		c, err := s.r.ReadByte()
		if err != nil {
			return 0, err
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c, nil
		}
	}
}

func (s *jsonStream) expect(want byte) error {
	c, err := s.nonSpace()
	if err != nil {
		return unexpectedEOF(err)
	}
	if c != want {
		return syntaxErr("want %q, found %q", want, c)
	}
	return nil
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return syntaxErr("unexpected end of the answer")
	}
	return err
}

// stringInto decodes the rest of a string whose opening quote was read, writing its bytes to w.
func (s *jsonStream) stringInto(w *tailBuffer) error {
	for {
		if s.r.Buffered() == 0 {
			if _, err := s.r.Peek(1); err != nil {
				return unexpectedEOF(err)
			}
		}
		buf, _ := s.r.Peek(s.r.Buffered())
		i := 0
		for i < len(buf) && buf[i] != '"' && buf[i] != '\\' && buf[i] >= 0x20 {
			i++
		}
		w.Write(buf[:i])
		_, _ = s.r.Discard(i)
		if i == len(buf) {
			continue
		}
		c, _ := s.r.ReadByte()
		switch {
		case c == '"':
			return nil
		case c < 0x20:
			return syntaxErr("control character %q in a string", c)
		}
		if err := s.escape(w); err != nil {
			return err
		}
	}
}

// escape decodes one escape sequence whose backslash was read.
func (s *jsonStream) escape(w *tailBuffer) error {
	c, err := s.r.ReadByte()
	if err != nil {
		return unexpectedEOF(err)
	}
	var b byte
	switch c {
	case '"', '\\', '/':
		b = c
	case 'b':
		b = '\b'
	case 'f':
		b = '\f'
	case 'n':
		b = '\n'
	case 'r':
		b = '\r'
	case 't':
		b = '\t'
	case 'u':
		r, err := s.hex4()
		if err != nil {
			return err
		}
		if utf16.IsSurrogate(r) {
			// A pair is two escapes; a lone half becomes U+FFFD, as encoding/json decodes it.
			r2 := utf8.RuneError
			if next, _ := s.r.Peek(2); string(next) == `\u` {
				_, _ = s.r.Discard(2)
				lo, err := s.hex4()
				if err != nil {
					return err
				}
				if r2 = utf16.DecodeRune(r, lo); r2 == utf8.RuneError {
					w.writeRune(utf8.RuneError)
					r2 = lo
				}
			}
			r = r2
		}
		w.writeRune(r)
		return nil
	default:
		return syntaxErr("invalid escape %q in a string", c)
	}
	w.writeByte(b)
	return nil
}

func (s *jsonStream) hex4() (rune, error) {
	var r rune
	for range 4 {
		c, err := s.r.ReadByte()
		if err != nil {
			return 0, unexpectedEOF(err)
		}
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, syntaxErr("invalid \\u escape: %q is not a hex digit", c)
		}
		r = r<<4 | rune(d)
	}
	return r, nil
}

// skipValue reads past a value whose first byte c was read, keeping nothing of it.
func (s *jsonStream) skipValue(c byte) error {
	discard := &tailBuffer{}
	switch c {
	case '"':
		return s.stringInto(discard)
	case '{', '[':
		for depth := 1; depth > 0; {
			c, err := s.r.ReadByte()
			if err != nil {
				return unexpectedEOF(err)
			}
			switch c {
			case '"':
				if err := s.stringInto(discard); err != nil {
					return err
				}
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
		}
		return nil
	}
	// A number or a literal: read up to the next delimiter.
	for n := 0; ; n++ {
		if !strings.ContainsRune("-+.0123456789eEtruefalsn", rune(c)) || n > 64 {
			return syntaxErr("invalid value starting %q", c)
		}
		next, err := s.r.Peek(1)
		if err != nil || strings.IndexByte(",}] \t\r\n", next[0]) >= 0 {
			return nil
		}
		c, _ = s.r.ReadByte()
	}
}

// tailBuffer keeps the last max bytes written to it, and counts them all.
type tailBuffer struct {
	max     int
	buf     []byte // once len(buf) == max, a ring whose oldest byte is buf[start]
	start   int
	total   int64
	scratch [utf8.UTFMax]byte
}

func (t *tailBuffer) Write(p []byte) {
	t.total += int64(len(p))
	if len(t.buf) < t.max {
		n := min(len(p), t.max-len(t.buf))
		t.buf = append(t.buf, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 || t.max == 0 {
		return
	}
	if len(p) >= t.max {
		copy(t.buf, p[len(p)-t.max:])
		t.start = 0
		return
	}
	n := copy(t.buf[t.start:], p)
	copy(t.buf, p[n:])
	t.start = (t.start + len(p)) % t.max
}

// writeByte and writeRune write through a buffer of the tailBuffer's own: a slice of a local array passed to
// Write would be allocated on the heap, once per escape sequence of a log of millions.
func (t *tailBuffer) writeByte(b byte) {
	t.scratch[0] = b
	t.Write(t.scratch[:1])
}

func (t *tailBuffer) writeRune(r rune) {
	t.Write(t.scratch[:utf8.EncodeRune(t.scratch[:], r)])
}

func (t *tailBuffer) truncated() bool { return t.total > int64(len(t.buf)) }

// String is what was written, or, when more than max bytes were, a marker line and the last bytes from the first
// character boundary on.
func (t *tailBuffer) String() string {
	if !t.truncated() {
		return string(t.buf)
	}
	head, tail := t.buf[t.start:], t.buf[:t.start]
	// Drop the continuation bytes of a character whose start was overwritten.
	for range utf8.UTFMax - 1 {
		if len(head) > 0 && !utf8.RuneStart(head[0]) {
			head = head[1:]
		}
	}
	kept := len(head) + len(tail)
	var b strings.Builder
	marker := fmt.Sprintf("[... %d bytes truncated ...]\n", t.total-int64(kept))
	b.Grow(len(marker) + kept)
	b.WriteString(marker)
	b.Write(head)
	b.Write(tail)
	return b.String()
}
