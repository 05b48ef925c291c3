package apiserver

import (
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/manta-dev/manta/internal/version"
)

// OpenAPI returns the OpenAPI 3 document of the API, generated from the route table and the model types, so it
// cannot drift from what the server accepts and answers.
func OpenAPI() map[string]any {
	g := &schemaGen{schemas: map[string]any{}}
	paths := map[string]any{}
	for _, rt := range routes() {
		if rt.undocumented {
			continue
		}
		item, _ := paths[rt.pattern].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[rt.pattern] = item
		}
		item[strings.ToLower(rt.method)] = g.operation(rt)
	}
	text := func(op, summary string) map[string]any {
		return map[string]any{"get": map[string]any{
			"operationId": op, "summary": summary, "tags": []string{"Server"}, "security": []any{},
			"responses": map[string]any{"200": map[string]any{
				"description": "OK",
				"content":     map[string]any{"text/plain": map[string]any{"schema": map[string]any{"type": "string"}}},
			}},
		}}
	}
	paths["/healthz"] = text("Healthz", "Liveness: answers ok while the server runs.")
	paths["/metrics"] = text("Metrics", "Prometheus metrics.")
	paths["/openapi.json"] = map[string]any{"get": map[string]any{
		"operationId": "OpenAPI", "summary": "This document.", "tags": []string{"Server"}, "security": []any{},
		"responses": map[string]any{"200": map[string]any{
			"description": "OK",
			"content":     map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}},
		}},
	}}
	g.ref(reflect.TypeFor[Status]())
	g.schemas["KubernetesStatus"] = kubernetesStatusSchema()
	return map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":   "Manta API",
			"version": version.Version,
			"description": "Ray on Kubernetes. Paths and JSON shapes of KubeRay's API server v1 (protobuf's JSON mapping: JSON or proto field names, " +
				"numbers as numbers or strings, enums by name or number), plus image pull jobs, and KubeRay's v2 resource API " +
				"(/apis/ray.io/v1/..., passed to Kubernetes with the caller's own token; ?watch=true on a list streams Kubernetes' watch events). " +
				"Also served, and not described here since its answers are a Ray dashboard's pages: /api/v1/namespaces/{namespace}/services/{service}/proxy/..., " +
				"Kubernetes' services proxy to Services labelled app.kubernetes.io/name=kuberay, with the caller's token. " +
				"Authenticate with a Kubernetes token (Authorization: Bearer <token>, or Authorization: <token>); each v1 operation is authorised with the RBAC permission behind it. " +
				"Errors are a google.rpc.Status whose BadRequest detail names the offending fields; v2 passes Kubernetes' Status on.",
		},
		"paths": paths,
		"components": map[string]any{
			"schemas": g.schemas,
			"securitySchemes": map[string]any{
				"bearer": map[string]any{"type": "http", "scheme": "bearer", "description": "a Kubernetes bearer token (e.g. kubectl create token <serviceaccount>)"},
			},
		},
		"security": []any{map[string]any{"bearer": []any{}}},
	}
}

var errorDescriptions = map[int]string{
	400: "The request is invalid; details name the fields.",
	401: "No bearer token, or Kubernetes does not accept it.",
	403: "RBAC does not allow the caller this operation, or a read it does for them (see the description).",
	404: "The object does not exist (or is not managed by this API).",
	409: "The object already exists or was changed concurrently.",
	413: "The body is too large.",
	415: "The body is not JSON.",
	422: "The request names something that does not exist (e.g. a compute template), or Kubernetes refused the object.",
	429: "Too many requests in flight; retry after Retry-After seconds.",
	500: "Internal error.",
	502: "The Ray dashboard failed.",
	503: "Kubernetes or the Ray dashboard is unavailable; retry later.",
}

func (g *schemaGen) operation(rt *route) map[string]any {
	if rt.v2 {
		return g.v2Operation(rt)
	}
	op := map[string]any{
		"operationId": rt.op,
		"summary":     rt.summary,
		"tags":        []string{rt.tag},
	}
	if len(rt.reads) > 0 {
		var rs []string
		for _, a := range rt.reads {
			rs = append(rs, a.Verb+" "+a.Resource)
		}
		op["description"] = "This server reads for the caller, who needs RBAC for it too, on the objects concerned: " + strings.Join(rs, ", ") + "."
	}
	var params []any
	for _, p := range pathParams(rt.pattern) {
		schema := map[string]any{"type": "string", "pattern": dns1123LabelPattern, "maxLength": 63}
		if p == "submissionid" {
			schema = map[string]any{"type": "string", "pattern": submissionID.String()}
		}
		params = append(params, map[string]any{"name": p, "in": "path", "required": true, "schema": schema})
	}
	if rt.paging != "" {
		params = append(params,
			map[string]any{"name": "limit", "in": "query", "description": "maximum number of items to return; 0 returns all", "schema": map[string]any{"type": "integer", "minimum": 0, "format": "int64"}},
			map[string]any{"name": "continue", "in": "query", "description": "the continue token of the previous page", "schema": map[string]any{"type": "string"}})
	}
	if rt.paging == pagingPage {
		params = append(params,
			map[string]any{"name": "pageSize", "in": "query", "description": "v1 name of limit", "schema": map[string]any{"type": "integer", "minimum": 0, "format": "int32"}},
			map[string]any{"name": "pageToken", "in": "query", "description": "v1 name of continue", "schema": map[string]any{"type": "string"}})
	}
	if rt.body != nil {
		params = append(params, map[string]any{"name": "fieldValidation", "in": "query",
			"description": "what happens to unknown body fields: Warn (the server's default) accepts the request with one Warning header per unknown field; Strict refuses it with a 400 naming each. A server started with --field-validation=Strict stays Strict.",
			"schema":      map[string]any{"type": "string", "enum": []string{string(FieldValidationWarn), string(FieldValidationStrict)}}})
	}
	if len(params) > 0 {
		op["parameters"] = params
	}
	if rt.body != nil {
		op["requestBody"] = map[string]any{
			"required": true,
			"content":  map[string]any{"application/json": map[string]any{"schema": g.ref(reflect.TypeOf(rt.body))}},
		}
	}
	ok := map[string]any{
		"description": "OK",
		"content":     map[string]any{"application/json": map[string]any{"schema": g.ref(reflect.TypeOf(rt.resp))}},
	}
	if rt.body != nil {
		ok["headers"] = map[string]any{"Warning": map[string]any{
			"description": `one per unknown body field, as kube-apiserver: 299 - "unknown field \"clusterSpec.headGroupSpec.imagePullPolicies\""`,
			"schema":      map[string]any{"type": "string"},
		}}
	}
	responses := map[string]any{"200": ok}
	codes := append(slices.Clone(rt.errs), 401, 403, 429, 500, 503)
	if rt.method == http.MethodDelete {
		codes = append(codes, 400)
	}
	for _, c := range codes {
		responses[strconv.Itoa(c)] = errorResponse(errorDescriptions[c])
	}
	responses["default"] = errorResponse("Any other error.")
	op["responses"] = responses
	return op
}

// withoutDoc is s without its description and readOnly, for reuse under another name.
func withoutDoc(s map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range s {
		if k != "description" {
			out[k] = v
		}
	}
	return out
}

// v2Operation describes a v2 operation: a Kubernetes request passed through, so bodies are Kubernetes objects
// (the ray.io/v1 CRD schemas, served by Kubernetes) and errors are Kubernetes Status objects, or this server's
// JSON errors for what it refuses itself.
func (g *schemaGen) v2Operation(rt *route) map[string]any {
	op := map[string]any{"operationId": rt.op, "summary": rt.summary, "tags": []string{rt.tag}}
	var params []any
	for _, p := range pathParams(rt.pattern) {
		params = append(params, map[string]any{"name": p, "in": "path", "required": true,
			"schema": map[string]any{"type": "string", "pattern": dns1123LabelPattern, "maxLength": 63}})
	}
	query := func(name, desc string) {
		params = append(params, map[string]any{"name": name, "in": "query", "description": desc + " (passed to Kubernetes)", "schema": map[string]any{"type": "string"}})
	}
	list := strings.HasPrefix(rt.op, "V2List")
	switch {
	case list:
		query("labelSelector", "label selector")
		query("fieldSelector", "field selector")
		query("continue", "the continue token of the previous page")
		params = append(params, map[string]any{"name": "limit", "in": "query", "description": "page size (passed to Kubernetes)",
			"schema": map[string]any{"type": "integer", "minimum": 0, "format": "int64"}})
	case rt.method == http.MethodPost || rt.method == http.MethodPut || rt.method == http.MethodPatch:
		query("fieldManager", "field manager")
		params = append(params,
			map[string]any{"name": "dryRun", "in": "query", "description": "All: validate and admit without persisting (passed to Kubernetes)", "schema": map[string]any{"type": "string", "enum": []string{"All"}}},
			map[string]any{"name": "fieldValidation", "in": "query", "description": "Kubernetes' field validation: Ignore, Warn or Strict (passed to Kubernetes)", "schema": map[string]any{"type": "string", "enum": []string{"Ignore", "Warn", "Strict"}}})
	case rt.method == http.MethodDelete:
		if strings.HasPrefix(rt.op, "V2DeleteCollection") {
			query("labelSelector", "label selector")
			query("fieldSelector", "field selector")
		}
		params = append(params, map[string]any{"name": "propagationPolicy", "in": "query", "description": "Orphan, Background or Foreground (passed to Kubernetes)",
			"schema": map[string]any{"type": "string", "enum": []string{"Orphan", "Background", "Foreground"}}})
	}
	op["parameters"] = params
	object := map[string]any{"type": "object", "description": "a Kubernetes object or list; ray.io/v1 objects follow the CRD schema"}
	if rt.body != nil {
		mt := "application/json"
		if rt.method == http.MethodPatch {
			mt = "application/merge-patch+json"
		}
		op["requestBody"] = map[string]any{"required": true, "content": map[string]any{mt: map[string]any{"schema": object}}}
	}
	okResp := map[string]any{"description": "Kubernetes' answer", "content": map[string]any{"application/json": map[string]any{"schema": object}}}
	responses := map[string]any{"200": okResp}
	switch rt.method {
	case http.MethodPost:
		responses["201"] = okResp
		responses["202"] = okResp
	case http.MethodPut:
		responses["201"] = okResp
	case http.MethodDelete:
		responses["202"] = okResp
	}
	either := map[string]any{"application/json": map[string]any{"schema": map[string]any{"anyOf": []any{
		map[string]any{"$ref": "#/components/schemas/Status"},
		map[string]any{"$ref": "#/components/schemas/KubernetesStatus"},
	}}}}
	for c, desc := range map[int]string{
		400: "Refused by Kubernetes or by this server (e.g. watch).", 401: "No token, or Kubernetes does not accept it.",
		403: "Kubernetes RBAC does not allow the caller this.", 404: "Not found.", 409: "Exists already or changed concurrently.",
		413: "The body is too large.", 415: "Kubernetes does not accept the content type.", 422: "Refused by the CRD schema or its CEL rules; details.causes name the fields.",
		429: "Too many requests in flight (this server's bound, or Kubernetes' own).",
		500: "Internal error.", 502: "The Kubernetes API server could not be reached.", 503: "Kubernetes did not answer in time.",
	} {
		responses[strconv.Itoa(c)] = map[string]any{"description": desc, "content": either}
	}
	responses["default"] = map[string]any{"description": "Any other answer of Kubernetes.", "content": either}
	op["responses"] = responses
	return op
}

// kubernetesStatusSchema is Kubernetes' metav1.Status, the body of its error answers, which the v2 API passes on.
func kubernetesStatusSchema() map[string]any {
	str := map[string]any{"type": "string"}
	return map[string]any{"type": "object", "description": "a Kubernetes Status (meta/v1)", "properties": map[string]any{
		"kind": str, "apiVersion": str, "status": str, "message": str, "reason": str,
		"code":     map[string]any{"type": "integer"},
		"metadata": map[string]any{"type": "object"},
		"details":  map[string]any{"type": "object", "description": "name, kind and causes[{field, reason, message}]"},
	}}
}

func errorResponse(desc string) map[string]any {
	return map[string]any{
		"description": desc,
		"content":     map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Status"}}},
	}
}

const dns1123LabelPattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`

type schemaGen struct {
	schemas map[string]any
}

// ref returns a schema for t, defining named structs under components/schemas.
func (g *schemaGen) ref(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(enumType) {
		names := reflect.Zero(t).Interface().(enum).enumNames()
		nums := make([]int, len(names))
		for i := range nums {
			nums[i] = i
		}
		return map[string]any{
			"description": "one of " + strings.Join(names, ", ") + "; answered as its number, accepted as number or name",
			"anyOf": []any{
				map[string]any{"type": "integer", "enum": nums},
				map[string]any{"type": "string", "enum": names},
			},
		}
	}
	if t == timeType {
		return map[string]any{"type": "string", "format": "date-time"}
	}
	switch t.Kind() {
	case reflect.Struct:
		name := t.Name()
		if _, ok := g.schemas[name]; !ok {
			g.schemas[name] = map[string]any{} // placeholder for recursion
			g.schemas[name] = g.object(t)
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.ref(t.Elem())}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": g.ref(t.Elem())}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"anyOf": []any{map[string]any{"type": "boolean"}, map[string]any{"type": "string", "enum": []string{"true", "false"}}},
			"description": "a boolean; accepted as true/false or the strings \"true\"/\"false\", answered as a boolean"}
	case reflect.Int32:
		return intSchema(map[string]any{"type": "integer", "format": "int32"}, `^-?[0-9]+$`)
	case reflect.Int64:
		return intSchema(map[string]any{"type": "integer", "format": "int64"}, `^-?[0-9]+$`)
	case reflect.Uint32:
		return intSchema(map[string]any{"type": "integer", "format": "int64", "minimum": 0, "maximum": 4294967295}, `^[0-9]+$`)
	case reflect.Uint64:
		return intSchema(map[string]any{"type": "integer", "minimum": 0}, `^[0-9]+$`)
	case reflect.Float32:
		return numberSchema("float")
	case reflect.Float64:
		return numberSchema("double")
	}
	return map[string]any{}
}

// intSchema: protobuf's JSON mapping reads integers as numbers or strings; answers use numbers.
func intSchema(num map[string]any, pattern string) map[string]any {
	return map[string]any{"anyOf": []any{num, map[string]any{"type": "string", "pattern": pattern}},
		"description": "an integer; accepted as a JSON number or a string holding one, answered as a number"}
}

func numberSchema(format string) map[string]any {
	return map[string]any{"anyOf": []any{
		map[string]any{"type": "number", "format": format},
		map[string]any{"type": "string", "pattern": `^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$`},
	}, "description": "a number; accepted as a JSON number or a string holding one, answered as a number"}
}

func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" || name == "-" {
			continue
		}
		var s map[string]any
		if strings.Contains(opts, "string") && (f.Type.Kind() == reflect.Uint64 || f.Type.Kind() == reflect.Int64) {
			s = map[string]any{"type": "string", "pattern": "^[0-9]+$"}
		} else {
			s = g.ref(f.Type)
		}
		apiOpts := strings.Split(f.Tag.Get("api"), ",")
		if slices.Contains(apiOpts, "name") {
			s = map[string]any{"type": "string", "pattern": dns1123LabelPattern, "maxLength": 63}
		}
		doc := f.Tag.Get("doc")
		if _, isRef := s["$ref"]; isRef && (doc != "" || slices.Contains(apiOpts, "readonly")) {
			// OpenAPI 3.0 ignores siblings of $ref; wrap it.
			s = map[string]any{"allOf": []any{s}}
		}
		if doc != "" {
			s["description"] = doc
		}
		if slices.Contains(apiOpts, "readonly") {
			s["readOnly"] = true
		}
		if slices.Contains(apiOpts, "required") {
			required = append(required, name)
		}
		props[name] = s
		if p := f.Tag.Get("proto"); p != "" {
			// The proto field name is accepted on input for the same field; giving both is a 400.
			props[p] = map[string]any{"allOf": []any{withoutDoc(s)}, "description": "proto field name of " + name + " (input only; the same field)"}
		}
	}
	// Unknown fields are accepted with a Warning header, or refused under fieldValidation=Strict; so the schema
	// does not forbid additional properties.
	out := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		out["required"] = required
	}
	return out
}
