package deploy

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/manta-dev/manta/internal/testutil"
)

// The chart cannot turn the REST API's authentication off, defaults to plain HTTP behind a ClusterIP Service only,
// refuses to expose plain HTTP outside the cluster, and serves HTTPS from a kubernetes.io/tls Secret when given one.
func TestSecurityChart(t *testing.T) {
	root := testutil.MustRepoRoot(t)
	for name, values := range map[string]map[string]any{
		"auth none":              {"apiserver": map[string]any{"auth": "none"}},
		"tls secret not a name":  {"apiserver": map[string]any{"tls": map[string]any{"secretName": "Not_A_Name"}}},
		"inflight bound below 1": {"apiserver": map[string]any{"maxRequestsInflight": 0}},
	} {
		if _, err := helmTemplate(t, root, "manta", namespace, values); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("%s: helm template error %v, want a values schema error", name, err)
		}
	}
	for _, typ := range []string{"NodePort", "LoadBalancer"} {
		_, err := helmTemplate(t, root, "manta", namespace, map[string]any{"apiserver": map[string]any{"service": map[string]any{"type": typ}}})
		if err == nil || !strings.Contains(err.Error(), "tls.secretName") {
			t.Errorf("Service %s without TLS: helm template error %v, want a refusal naming apiserver.tls.secretName", typ, err)
		}
	}

	def := onlyContainer(t, typed[appsv1.Deployment](t, mustHelmTemplate(t, root, "manta", namespace, map[string]any{}), "Deployment", "manta-apiserver"))
	if a := flagValues(def.Args); a["--auth"] != "kubernetes" || a["--insecure-http"] != "true" || a["--tls-cert-file"] != "" || a["--max-requests-inflight"] != "100" {
		t.Errorf("default args %v: want --auth=kubernetes, plain HTTP behind the ClusterIP Service, 100 requests in flight", def.Args)
	}

	objs := mustHelmTemplate(t, root, "manta", namespace, map[string]any{"apiserver": map[string]any{
		"tls": map[string]any{"secretName": "manta-apiserver-tls"}, "service": map[string]any{"type": "LoadBalancer"}}})
	d := typed[appsv1.Deployment](t, objs, "Deployment", "manta-apiserver")
	c := onlyContainer(t, d)
	a := flagValues(c.Args)
	if a["--tls-cert-file"] != "/etc/manta/tls/tls.crt" || a["--tls-key-file"] != "/etc/manta/tls/tls.key" || a["--insecure-http"] != "" {
		t.Errorf("TLS args %v", c.Args)
	}
	vols := d.Spec.Template.Spec.Volumes
	if len(vols) != 1 || vols[0].Secret == nil || vols[0].Secret.SecretName != "manta-apiserver-tls" {
		t.Errorf("volumes %+v: want the TLS Secret", vols)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != vols[0].Name || c.VolumeMounts[0].MountPath != "/etc/manta/tls" || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("volume mounts %+v", c.VolumeMounts)
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS || p.HTTPGet.Port != intstr.FromString("https") {
			t.Errorf("probe %+v: want HTTPS on port https", p)
		}
	}
	checkSelects(t, typed[corev1.Service](t, objs, "Service", "manta-apiserver"), d, "https")
}
