package apiserver

import (
	"net/http"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// The Ray dashboard links of KubeRay's dashboard point at the Kubernetes services proxy through this server:
// /api/v1/namespaces/{ns}/services/{[scheme:]name[:port]}/proxy/{path}. As KubeRay's v2 does, only Services of Ray
// clusters (label app.kubernetes.io/name=kuberay, which Manta's operator puts on head and serve Services) are
// reached, so the REST API is no general door to every Service. The request goes to Kubernetes' services/proxy
// subresource with the caller's token: Kubernetes authorises it and reaches the pod. Before that this server asks
// SubjectAccessReview whether the caller may use services/proxy on that Service, and only then reads the Service's
// labels with its own identity: a caller who may not proxy to it learns nothing about it.

// serviceProxyMethods are the methods Kubernetes' proxy authorises with a verb of its own.
var serviceProxyMethods = map[string]string{
	http.MethodGet: "get", http.MethodHead: "get", http.MethodPost: "create",
	http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete",
}

func serviceProxyRoutes() []*route {
	const base = "/api/v1/namespaces/{namespace}/services/{service}/proxy"
	var rs []*route
	for _, pattern := range []string{base, base + "/{path...}"} {
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			verb := serviceProxyMethods[m]
			rs = append(rs, &route{method: m, pattern: pattern, op: "V2ProxyService", tag: "RayResourcesV2", v2: true, undocumented: true,
				summary: "Reach a Ray cluster's Service (its dashboard) through Kubernetes' services proxy.",
				access: func(r *http.Request) []access {
					// RBAC names the proxied Service as the path does, port included (resourceNames: ["svc:8265"]).
					return []access{{Resource: "services", Subresource: "proxy", Verb: verb, Namespace: r.PathValue("namespace"), Name: r.PathValue("service")}}
				},
				proxy: (*Server).proxyService})
		}
	}
	return rs
}

func (s *Server) proxyService(w http.ResponseWriter, r *http.Request) *apiError {
	ns, ref := r.PathValue("namespace"), r.PathValue("service")
	name, _ := serviceRefName(ref)
	var svc corev1.Service
	err := s.c.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, &svc)
	if err != nil && !apierrors.IsNotFound(err) {
		return internalError(http.StatusServiceUnavailable, codeUnavailable, err, "could not read Service %q in namespace %q, retry later", name, ns)
	}
	if err != nil || svc.Labels[rayv1.LabelAppName] != rayv1.AppNameValue {
		// One answer for missing and not-Ray, so the answer does not say which Services exist.
		return notFound("no Ray Service %q in namespace %q: the services proxy reaches only Services of Ray clusters (label %s=%s)",
			name, ns, rayv1.LabelAppName, rayv1.AppNameValue)
	}
	return s.proxyV2(w, r, forward{})
}

// serviceRefName reads the Service part of a proxy path, as Kubernetes does: name, name:port or scheme:name:port
// (scheme http or https, port a number or a port name). The second value says what is wrong, when it is.
func serviceRefName(ref string) (string, string) {
	parts := strings.Split(ref, ":")
	var name, port string
	switch len(parts) {
	case 1:
		name = parts[0]
	case 2:
		name, port = parts[0], parts[1]
	case 3:
		if parts[0] != "http" && parts[0] != "https" {
			return "", "the scheme must be http or https (https:<service>:<port>)"
		}
		name, port = parts[1], parts[2]
	default:
		return "", "must be <service>, <service>:<port> or <scheme>:<service>:<port>"
	}
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return "", "Service name " + strconv.Quote(name) + ": " + strings.Join(errs, "; ")
	}
	if port == "" {
		return name, ""
	}
	if n, err := strconv.Atoi(port); err == nil {
		if n < 1 || n > 65535 {
			return "", "port " + port + " is not between 1 and 65535"
		}
		return name, ""
	}
	if errs := validation.IsValidPortName(port); len(errs) > 0 {
		return "", "port " + strconv.Quote(port) + ": " + strings.Join(errs, "; ")
	}
	return name, ""
}
