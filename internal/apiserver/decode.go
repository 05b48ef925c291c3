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

// decodeBody reads the request's JSON object into out, a pointer to a model struct. Unknown fields, values of the
// wrong type and trailing data are refused with the offending field named.
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
		return invalid(FieldViolation{Field: "body", Reason: "could not read the request body: " + err.Error()})
	}
	return decodeJSON(raw, out)
}

// decodeJSON is decodeBody without the HTTP parts; the fuzz test drives it directly.
func decodeJSON(raw []byte, out any) *apiError {
	if len(bytes.TrimSpace(raw)) == 0 {
		return invalid(FieldViolation{Field: "body", Reason: "a JSON object is required"})
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return invalid(FieldViolation{Field: "body", Reason: "not valid JSON: " + err.Error()})
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid(FieldViolation{Field: "body", Reason: "unexpected data after the JSON object"})
	}
	if _, ok := doc.(map[string]any); !ok {
		return invalid(FieldViolation{Field: "body", Reason: "must be a JSON object"})
	}
	var vs []FieldViolation
	checkValue(reflect.TypeOf(out).Elem(), doc, "", &vs)
	if len(vs) > 0 {
		return invalid(vs...)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		// checkValue accepted what encoding/json refuses: still the caller's input.
		return invalid(FieldViolation{Field: "body", Reason: err.Error()})
	}
	return nil
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

func addViolation(vs *[]FieldViolation, field, reason string) {
	if len(*vs) < maxViolations {
		*vs = append(*vs, FieldViolation{Field: field, Reason: reason})
	}
}

// checkValue checks a decoded JSON value against the Go type it will be unmarshalled into. JSON null is accepted
// everywhere (proto3 JSON reads it as the default value).
func checkValue(t reflect.Type, v any, path string, vs *[]FieldViolation) {
	if v == nil {
		return
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(enumType) {
		names := reflect.Zero(t).Interface().(enum).enumNames()
		raw, _ := json.Marshal(v)
		if _, err := parseEnum(raw, names); err != nil {
			addViolation(vs, path, fmt.Sprintf("must be one of %s (or its number)", strings.Join(names, ", ")))
		}
		return
	}
	if t == timeType {
		s, ok := v.(string)
		if !ok {
			addViolation(vs, path, "must be an RFC 3339 date-time string")
			return
		}
		if _, err := time.Parse(time.RFC3339, s); err != nil {
			addViolation(vs, path, "must be an RFC 3339 date-time string")
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			addViolation(vs, path, "must be a JSON object")
			return
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(obj) {
			f, ok := fields[k]
			if !ok {
				addViolation(vs, join(path, k), "unknown field")
				continue
			}
			checkValue(f.Type, obj[k], join(path, k), vs)
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			addViolation(vs, path, "must be a JSON object")
			return
		}
		for _, k := range sortedKeys(obj) {
			checkValue(t.Elem(), obj[k], join(path, k), vs)
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			addViolation(vs, path, "must be a JSON array")
			return
		}
		for i, e := range arr {
			checkValue(t.Elem(), e, path+"["+strconv.Itoa(i)+"]", vs)
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			addViolation(vs, path, "must be a string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			addViolation(vs, path, "must be true or false")
		}
	case reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64:
		lo, hi := intRange(t.Kind())
		n, ok := v.(json.Number)
		if !ok {
			addViolation(vs, path, "must be an integer")
			return
		}
		if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			if float64(i) < lo || float64(i) > hi {
				addViolation(vs, path, fmt.Sprintf("must be an integer between %.0f and %.0f", lo, hi))
			}
			return
		}
		if u, err := strconv.ParseUint(string(n), 10, 64); err == nil && t.Kind() == reflect.Uint64 {
			_ = u
			return
		}
		addViolation(vs, path, fmt.Sprintf("must be an integer between %.0f and %.0f", lo, hi))
	case reflect.Float32, reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			addViolation(vs, path, "must be a number")
			return
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil || (t.Kind() == reflect.Float32 && math.Abs(f) > math.MaxFloat32) {
			addViolation(vs, path, "must be a number in range")
		}
	default:
		addViolation(vs, path, "unsupported value")
	}
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

// jsonFields maps the JSON names of a struct's fields to the fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}
