package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Compute templates on the v2 API, as KubeRay v1.7's v2 applies them: a create (POST) or replace (PUT) of a
// RayCluster, RayJob or RayService whose head or worker group names a compute template (a string field
// "computeTemplate" beside "template", in spec, spec.rayClusterSpec or spec.rayClusterConfig) gets, in that group's
// pod template, the annotation ray.io/compute-template, the template's CPU and memory as requests and limits of
// every container, its GPUs and extended resources on the Ray container (ray-head or ray-worker), and its
// tolerations appended. Unlike KubeRay, which reads the template with its own identity, the ConfigMap is read with
// the caller's token, so a caller who may not read it is refused; and the computeTemplate field itself is taken out
// of what goes to Kubernetes, whose schema does not have it (KubeRay leaves it for Kubernetes to drop with a warning,
// or refuse under fieldValidation=Strict). A body that names no template goes to Kubernetes byte for byte.

var computeTemplateKey = []byte(`"computeTemplate"`)

// computeTemplates is the forward.body of creates and replaces of plural.
func (s *Server) computeTemplates(plural string) func(*http.Request, []byte) ([]byte, string, *apiError) {
	return func(r *http.Request, body []byte) ([]byte, string, *apiError) {
		return s.injectComputeTemplates(plural, r, body)
	}
}

func (s *Server) injectComputeTemplates(plural string, r *http.Request, body []byte) ([]byte, string, *apiError) {
	contentType := r.Header.Get("Content-Type")
	orig := body // what goes on unchanged when no group names a template
	mt, _, _ := mime.ParseMediaType(contentType)
	switch mt {
	case "application/json", "":
		if !bytes.Contains(body, computeTemplateKey) {
			return orig, contentType, nil
		}
	case "application/yaml":
		if !bytes.Contains(body, []byte("computeTemplate")) {
			return orig, contentType, nil
		}
		j, err := yaml.YAMLToJSON(body)
		if err != nil {
			return nil, "", invalid(FieldViolation{Field: "body", Description: "not YAML: " + err.Error()})
		}
		body = j
	default:
		// Protobuf or anything else Kubernetes may accept: nothing here can name a template.
		return orig, contentType, nil
	}
	var obj map[string]any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&obj); err != nil {
		return nil, "", invalid(FieldViolation{Field: "body", Description: "not a JSON object: " + err.Error()})
	}
	spec, _ := obj["spec"].(map[string]any)
	if spec == nil {
		return orig, contentType, nil
	}
	clusterSpec, path := spec, "spec"
	switch plural {
	case "rayjobs":
		clusterSpec, _ = spec["rayClusterSpec"].(map[string]any)
		path = "spec.rayClusterSpec"
	case "rayservices":
		clusterSpec, _ = spec["rayClusterConfig"].(map[string]any)
		path = "spec.rayClusterConfig"
	}
	if clusterSpec == nil {
		return orig, contentType, nil
	}
	type group struct {
		m               map[string]any
		field, rayImage string
	}
	var groups []group
	if h, ok := clusterSpec["headGroupSpec"].(map[string]any); ok {
		groups = append(groups, group{h, path + ".headGroupSpec", headContainerName})
	}
	if ws, ok := clusterSpec["workerGroupSpecs"].([]any); ok {
		for i, w := range ws {
			if m, ok := w.(map[string]any); ok {
				groups = append(groups, group{m, path + ".workerGroupSpecs[" + strconv.Itoa(i) + "]", workerContainerName})
			}
		}
	}
	changed := false
	for _, g := range groups {
		v, ok := g.m["computeTemplate"]
		if !ok {
			continue
		}
		field := g.field + ".computeTemplate"
		name, ok := v.(string)
		if !ok || name == "" {
			return nil, "", invalid(FieldViolation{Field: field, Description: "must be the name of a compute template"})
		}
		t, e := s.readComputeTemplate(r, field, name)
		if e != nil {
			return nil, "", e
		}
		applyComputeTemplate(g.m, t, g.rayImage)
		delete(g.m, "computeTemplate")
		changed = true
	}
	if !changed {
		return orig, contentType, nil
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, "", internalError(http.StatusInternalServerError, codeInternal, err, "internal error")
	}
	return out, "application/json", nil
}

// readComputeTemplate reads the ConfigMap with the caller's token (this server's identity under auth none).
func (s *Server) readComputeTemplate(r *http.Request, field, name string) (*ComputeTemplate, *apiError) {
	ns := r.PathValue("namespace")
	u := *s.kube.base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/v1/namespaces/" + url.PathEscape(ns) + "/configmaps/" + url.PathEscape(name)
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, internalError(http.StatusInternalServerError, codeInternal, err, "internal error")
	}
	req.Header.Set("Accept", "application/json")
	transport := s.kube.ownTransport
	if tok := info(r).token; tok != "" {
		transport = s.kube.callerTransport
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res, err := transport.RoundTrip(req)
	if err != nil {
		return nil, internalError(http.StatusBadGateway, codeUnavailable, err, "could not reach the Kubernetes API server")
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxBodyBytes))
	if err != nil {
		return nil, internalError(http.StatusBadGateway, codeUnavailable, err, "could not read the Kubernetes API server's answer")
	}
	missing := func(why string) *apiError {
		return fieldError(http.StatusUnprocessableEntity, codeFailedPrecondition, []FieldViolation{{Field: field, Description: why}})
	}
	switch res.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, missing(fmt.Sprintf("compute template %q not found in namespace %q", name, ns))
	case http.StatusForbidden, http.StatusUnauthorized:
		return nil, newError(http.StatusForbidden, codePermissionDenied,
			"%s names compute template %q, and reading it needs get on configmaps %q in namespace %q, which Kubernetes refused the caller", field, name, name, ns)
	default:
		return nil, internalError(http.StatusServiceUnavailable, codeUnavailable, fmt.Errorf("%s: %s", res.Status, raw),
			"could not read compute template %q, retry later", name)
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(raw, &cm); err != nil {
		return nil, internalError(http.StatusBadGateway, codeUnavailable, err, "could not read the Kubernetes API server's answer")
	}
	if !isComputeTemplate(&cm) {
		return nil, missing(fmt.Sprintf("ConfigMap %q in namespace %q is not a compute template (it lacks the label %s=%s)", name, ns, labelConfigType, configTypeTemplate))
	}
	t := templateFromConfigMap(&cm)
	return &t, nil
}

// applyComputeTemplate puts t into a head or worker group given as JSON (see the file comment); rayContainer is the
// name of the container that gets GPUs and extended resources. A group without a pod template is left for
// Kubernetes to refuse.
func applyComputeTemplate(g map[string]any, t *ComputeTemplate, rayContainer string) {
	tpl, ok := g["template"].(map[string]any)
	if !ok {
		return
	}
	meta := child(tpl, "metadata")
	child(meta, "annotations")[annotationTemplate] = t.Name
	spec, ok := tpl["spec"].(map[string]any)
	if !ok {
		return
	}
	rl := t.resources()
	containers, _ := spec["containers"].([]any)
	for _, c := range containers {
		cm, ok := c.(map[string]any)
		if !ok {
			continue
		}
		res := child(cm, "resources")
		limits, requests := child(res, "limits"), child(res, "requests")
		for name, q := range rl {
			if name != corev1.ResourceCPU && name != corev1.ResourceMemory && cm["name"] != rayContainer {
				continue
			}
			limits[string(name)], requests[string(name)] = q.String(), q.String()
		}
	}
	if tols := t.k8sTolerations(); len(tols) > 0 {
		existing, _ := spec["tolerations"].([]any)
		for _, tol := range tols {
			existing = append(existing, map[string]any{"key": tol.Key, "operator": string(tol.Operator), "value": tol.Value, "effect": string(tol.Effect)})
		}
		spec["tolerations"] = existing
	}
}

// child returns m[key] as an object, creating it when absent or not an object.
func child(m map[string]any, key string) map[string]any {
	c, ok := m[key].(map[string]any)
	if !ok {
		c = map[string]any{}
		m[key] = c
	}
	return c
}
