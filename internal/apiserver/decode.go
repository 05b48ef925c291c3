package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// maxBodyBytes bounds request bodies; a cluster with many groups and volumes is a few KiB.
const maxBodyBytes = 1 << 20

// maxViolations bounds how many field violations one answer lists.
const maxViolations = 20

// FieldValidation says what happens to fields of a request body that the model does not have, as Kubernetes'
// fieldValidation does: Warn (the default) accepts the request and answers with one Warning header per unknown
// field; Strict refuses it with a 400 naming each. Ignore is not offered: a typo never passes silently.
type FieldValidation string

const (
	FieldValidationWarn   FieldValidation = "Warn"
	FieldValidationStrict FieldValidation = "Strict"
)

func parseFieldValidation(s string) (FieldValidation, bool) {
	switch FieldValidation(s) {
	case FieldValidationWarn, FieldValidationStrict:
		return FieldValidation(s), true
	}
	return "", false
}

// requestFieldValidation is the mode for one request: the server's, made Strict by ?fieldValidation=Strict. A
// request cannot relax a server that runs Strict.
func requestFieldValidation(r *http.Request, server FieldValidation) (FieldValidation, *apiError) {
	q, ok := r.URL.Query()["fieldValidation"]
	if !ok {
		return server, nil
	}
	if len(q) != 1 {
		return "", invalid(FieldViolation{Field: "fieldValidation", Description: "give it once"})
	}
	mode, ok := parseFieldValidation(q[0])
	if !ok {
		return "", invalid(FieldViolation{Field: "fieldValidation", Description: fmt.Sprintf("must be Warn or Strict; got %q (Ignore is not offered: unknown fields are always reported)", q[0])})
	}
	if server == FieldValidationStrict {
		return server, nil
	}
	return mode, nil
}

// maxWarnings bounds the Warning headers of one answer; the last one says how many more there were.
const maxWarnings = 20

// decodeBody reads the request's JSON object into out, a pointer to a model struct, following protobuf's JSON
// mapping (see decodeJSON). Unknown fields become Warning headers on w, or a 400 under Strict field validation.
func decodeBody(w http.ResponseWriter, r *http.Request, out any) *apiError {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return newError(http.StatusUnsupportedMediaType, codeInvalidArgument, "content type %q is not supported; send application/json", ct)
		}
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return newError(http.StatusRequestEntityTooLarge, codeInvalidArgument, "request body is larger than %d bytes", maxBodyBytes)
		}
		return invalid(FieldViolation{Field: "body", Description: "could not read the request body: " + err.Error()})
	}
	mode := info(r).fieldValidation
	if mode == "" {
		mode = FieldValidationWarn
	}
	unknown, e := decodeJSON(raw, out, mode)
	for i, f := range unknown {
		if i == maxWarnings {
			w.Header().Add("Warning", warning(fmt.Sprintf("%d more unknown fields", len(unknown)-maxWarnings)))
			break
		}
		w.Header().Add("Warning", warning("unknown field "+strconv.Quote(f)))
	}
	return e
}

// warning formats an RFC 9111 Warning header value with code 299 (miscellaneous persistent warning), as
// kube-apiserver does: 299 - "<text>".
func warning(text string) string {
	var b strings.Builder
	for _, r := range text {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	return `299 - "` + b.String() + `"`
}

// decodeJSON is decodeBody without the HTTP parts; the fuzz test drives it directly. It follows protobuf's JSON
// mapping, which KubeRay's API server (a grpc-gateway) speaks and its clients rely on:
//   - each field by its JSON name or its proto field name (the proto tag; e.g. cluster_spec for clusterSpec);
//     both at once is an error;
//   - integers and floats as JSON numbers or strings ("2"), enums by name or number;
//   - null as unset, for fields and map entries;
//   - and, beyond the mapping, booleans as the strings "true" and "false", which KubeRay's Python client sends.
//
// Values of the wrong type and trailing data are refused naming the field. Unknown fields are returned (Warn) or
// refused with the rest (Strict).
func decodeJSON(raw []byte, out any, mode FieldValidation) ([]string, *apiError) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, invalid(FieldViolation{Field: "body", Description: "a JSON object is required"})
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, invalid(FieldViolation{Field: "body", Description: "not valid JSON: " + err.Error()})
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, invalid(FieldViolation{Field: "body", Description: "unexpected data after the JSON object"})
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, invalid(FieldViolation{Field: "body", Description: "must be a JSON object"})
	}
	n := &normalizer{}
	norm := n.value(reflect.TypeOf(out).Elem(), doc, "")
	if mode == FieldValidationStrict {
		for _, f := range n.unknown {
			n.violation(f, "unknown field")
		}
	}
	if len(n.violations) > 0 {
		return nil, invalid(n.violations...)
	}
	canon, err := json.Marshal(norm)
	if err == nil {
		err = json.Unmarshal(canon, out)
	}
	if err != nil {
		// normalize accepted what encoding/json refuses: still the caller's input.
		return nil, invalid(FieldViolation{Field: "body", Description: err.Error()})
	}
	return n.unknown, nil
}

var (
	enumType = reflect.TypeFor[enum]()
	timeType = reflect.TypeFor[time.Time]()
)

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// normalizer rewrites a decoded JSON document into the canonical form encoding/json reads into the model: JSON
// names only, numbers as numbers, nulls dropped. It collects bad values and unknown fields on the way.
type normalizer struct {
	violations []FieldViolation
	unknown    []string
}

func (n *normalizer) violation(field, reason string) {
	if len(n.violations) < maxViolations {
		n.violations = append(n.violations, FieldViolation{Field: field, Description: reason})
	}
}

// value returns the canonical form of v for type t, or nil for JSON null (unset).
func (n *normalizer) value(t reflect.Type, v any, path string) any {
	if v == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(enumType) {
		return n.enumValue(t, v, path)
	}
	if t == timeType {
		return n.dateTime(v, path)
	}
	switch t.Kind() {
	case reflect.Struct:
		return n.object(t, v, path)
	case reflect.Map:
		return n.mapValue(t, v, path)
	case reflect.Slice:
		return n.array(t, v, path)
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			n.violation(path, "must be a string")
			return nil
		}
		return s
	case reflect.Bool:
		return n.boolean(v, path)
	case reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64:
		return n.integer(t.Kind(), v, path)
	case reflect.Float32, reflect.Float64:
		return n.float(t.Kind(), v, path)
	default:
		n.violation(path, "unsupported value")
		return nil
	}
}

// enumValue is an enum given by name or number, as its number.
func (n *normalizer) enumValue(t reflect.Type, v any, path string) any {
	names := reflect.Zero(t).Interface().(enum).enumNames()
	raw, _ := json.Marshal(v)
	i, err := parseEnum(raw, names)
	if err != nil {
		n.violation(path, fmt.Sprintf("must be one of %s (or its number)", strings.Join(names, ", ")))
		return nil
	}
	return json.Number(strconv.Itoa(int(i)))
}

// dateTime is an RFC 3339 date-time string.
func (n *normalizer) dateTime(v any, path string) any {
	s, ok := v.(string)
	if _, err := time.Parse(time.RFC3339, s); !ok || err != nil {
		n.violation(path, "must be an RFC 3339 date-time string")
		return nil
	}
	return s
}

// object is a model struct: each field by its JSON name or its proto field name (not both), under its JSON name.
// Fields the model does not have are collected as unknown.
func (n *normalizer) object(t reflect.Type, v any, path string) any {
	obj, ok := v.(map[string]any)
	if !ok {
		n.violation(path, "must be a JSON object")
		return nil
	}
	fields := modelFields(t)
	out := map[string]any{}
	given := map[string]string{}
	for _, k := range sortedKeys(obj) {
		f, ok := fields[k]
		if !ok {
			n.unknown = append(n.unknown, join(path, k))
			continue
		}
		if prev, dup := given[f.json]; dup {
			n.violation(join(path, f.json), fmt.Sprintf("is given twice, as %q and %q", prev, k))
			continue
		}
		given[f.json] = k
		if c := n.value(f.typ, obj[k], join(path, f.json)); c != nil {
			out[f.json] = c
		}
	}
	return out
}

// mapValue is a map; null entries are dropped.
func (n *normalizer) mapValue(t reflect.Type, v any, path string) any {
	obj, ok := v.(map[string]any)
	if !ok {
		n.violation(path, "must be a JSON object")
		return nil
	}
	out := map[string]any{}
	for _, k := range sortedKeys(obj) {
		if c := n.value(t.Elem(), obj[k], join(path, k)); c != nil {
			out[k] = c
		}
	}
	return out
}

// array is a slice; a null element is refused.
func (n *normalizer) array(t reflect.Type, v any, path string) any {
	arr, ok := v.([]any)
	if !ok {
		n.violation(path, "must be a JSON array")
		return nil
	}
	out := make([]any, 0, len(arr))
	for i, e := range arr {
		p := path + "[" + strconv.Itoa(i) + "]"
		if e == nil {
			n.violation(p, "must not be null")
			continue
		}
		if c := n.value(t.Elem(), e, p); c != nil {
			out = append(out, c)
		}
	}
	return out
}

// boolean is true or false, or, beyond protobuf's JSON mapping, the strings "true" and "false": KubeRay's Python
// client sends "enableIngress": "true".
func (n *normalizer) boolean(v any, path string) any {
	switch v {
	case true, "true":
		return true
	case false, "false":
		return false
	}
	n.violation(path, "must be true or false")
	return nil
}

// float is a finite number (within float32's range for a float32), as a JSON number or a string holding one.
func (n *normalizer) float(k reflect.Kind, v any, path string) any {
	s, ok := numberText(v)
	f, err := strconv.ParseFloat(s, 64)
	if !ok || err != nil || math.IsNaN(f) || math.IsInf(f, 0) || (k == reflect.Float32 && math.Abs(f) > math.MaxFloat32) {
		n.violation(path, "must be a finite number (a JSON number or a string holding one)")
		return nil
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
}

// numberText is the text of a JSON number, or of a string that protobuf's JSON mapping reads as a number.
func numberText(v any) (string, bool) {
	switch x := v.(type) {
	case json.Number:
		return string(x), true
	case string:
		s := strings.TrimSpace(x)
		return s, s == x && s != ""
	}
	return "", false
}

func (n *normalizer) integer(k reflect.Kind, v any, path string) any {
	lo, hi := intRange(k)
	bad := func() any {
		n.violation(path, fmt.Sprintf("must be an integer between %.0f and %.0f (a JSON number or a string holding one)", lo, hi))
		return nil
	}
	s, ok := numberText(v)
	if !ok {
		return bad()
	}
	if k == reflect.Uint64 || k == reflect.Uint32 {
		u, err := strconv.ParseUint(s, 10, 64)
		if err == nil && float64(u) <= hi {
			return json.Number(strconv.FormatUint(u, 10))
		}
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		if float64(i) < lo || float64(i) > hi {
			return bad()
		}
		return json.Number(strconv.FormatInt(i, 10))
	}
	// Protobuf's JSON mapping also reads integral values written as floats or with exponents (1.0, 1e3).
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || f < lo || f > hi || math.Abs(f) > 1<<53 {
		return bad()
	}
	return json.Number(strconv.FormatInt(int64(f), 10))
}

func intRange(k reflect.Kind) (float64, float64) {
	switch k {
	case reflect.Int32:
		return math.MinInt32, math.MaxInt32
	case reflect.Uint32:
		return 0, math.MaxUint32
	case reflect.Uint64:
		return 0, math.MaxUint64
	default:
		return math.MinInt64, math.MaxInt64
	}
}

// modelField is one field of a model struct as the decoder sees it.
type modelField struct {
	json string
	typ  reflect.Type
}

// modelFields maps the JSON names and proto field names (tag proto:"...") of a struct's fields to the fields.
func modelFields(t reflect.Type) map[string]modelField {
	out := map[string]modelField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = modelField{json: name, typ: f.Type}
		if p := f.Tag.Get("proto"); p != "" {
			out[p] = modelField{json: name, typ: f.Type}
		}
	}
	return out
}
