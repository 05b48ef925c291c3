package apiserver

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestKubeRayDashboardOptions: the options the dashboard needs are checked before serving, each error naming its flag.
func TestKubeRayDashboardOptions(t *testing.T) {
	for _, v := range []string{"", "*", "http://localhost:3000", "https://*.example.com", "https://ray.example.com:8443"} {
		if err := CheckCORSOrigin(v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	for _, v := range []string{"localhost:3000", "ftp://x.example", "http://localhost:3000/", "https://x.example/ray", "https://x.example?a", "https://user@x.example", "https://a.example,https://b.example"} {
		if err := CheckCORSOrigin(v); err == nil || !strings.Contains(err.Error(), "--cors-allow-origin") {
			t.Errorf("%q: err %v", v, err)
		}
	}
	if ns, sa, err := ParseAnonymousAs("ray-ui:kuberay-dashboard"); err != nil || ns != "ray-ui" || sa != "kuberay-dashboard" {
		t.Errorf("parse: %s %s %v", ns, sa, err)
	}
	for _, v := range []string{"kuberay-dashboard", "ray-ui/kuberay-dashboard", "Ray:x", "ns:", ":sa", "a:b:c", "system:serviceaccount:ns:sa"} {
		if _, _, err := ParseAnonymousAs(v); err == nil || !strings.Contains(err.Error(), "--anonymous-as") {
			t.Errorf("%q: err %v", v, err)
		}
	}
	cfg := &rest.Config{Host: "http://127.0.0.1:1"}
	if _, err := New(cfg, Options{Auth: AuthNone, AnonymousAs: "ns:sa"}); err == nil || !strings.Contains(err.Error(), "--anonymous-as") {
		t.Errorf("auth none: %v", err)
	}
	if _, err := New(cfg, Options{AnonymousAs: "ns"}); err == nil || !strings.Contains(err.Error(), "--anonymous-as") {
		t.Errorf("bad value: %v", err)
	}
	o := Options{Auth: AuthKubernetes, AnonymousAs: "ns:sa", InsecureHTTP: true}
	if err := CheckServing("0.0.0.0:8888", o); err == nil || !strings.Contains(err.Error(), "--anonymous-as") {
		t.Errorf("plain HTTP beyond loopback: %v", err)
	}
	if err := CheckServing("127.0.0.1:8888", o); err != nil {
		t.Errorf("loopback: %v", err)
	}
	o.TLSCertFile, o.TLSKeyFile = "cert.pem", "key.pem"
	if err := CheckServing(":8888", o); err != nil {
		t.Errorf("TLS: %v", err)
	}
	for ref, bad := range map[string]bool{"svc": false, "svc:8265": false, "svc:dashboard": false, "https:svc:8443": false,
		"Svc": true, "svc:0": true, "svc:70000": true, "ftp:svc:21": true, "a:b:c:d": true, "svc:bad_port": true} {
		if _, why := serviceRefName(ref); (why != "") != bad {
			t.Errorf("%q: %q", ref, why)
		}
	}
}
