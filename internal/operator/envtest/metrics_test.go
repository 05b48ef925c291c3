package envtest

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestSecurityOperatorMetricsAuth: the operator's /metrics answers only over HTTPS, refuses a scrape without a
// token (401) and one whose ServiceAccount is not bound to manta-metrics-reader (403), and serves one that is.
func TestSecurityOperatorMetricsAuth(t *testing.T) {
	cfg, _ := testutil.StartEnvtest(t)
	kc := kubernetes.NewForConfigOrDie(cfg)
	ctx := t.Context()

	// The ClusterRole config/rbac (and the chart) ship for scrapers, bound to one ServiceAccount of two.
	data, err := os.ReadFile(filepath.Join(testutil.MustRepoRoot(t), "config", "rbac", "metrics_reader_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var reader rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &reader); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.RbacV1().ClusterRoles().Create(ctx, &reader, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	for _, sa := range []string{"prometheus", "nosy"} {
		if _, err := kc.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := kc.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens[sa] = tr.Status.Token
	}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: "default"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitRBAC(t, ctx, kc, "system:serviceaccount:default:prometheus", "", reader.Rules...)

	ports, err := devcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	mgr, err := operator.NewManager(cfg, operator.Options{MetricsAddr: addr, HealthProbeAddr: "0", SkipNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	testutil.RunManager(t, mgr)

	// The certificate is the operator's self-signed one, as a ServiceMonitor with insecureSkipVerify sees it.
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	scrape := func(token string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	testutil.Eventually(t, time.Minute, "the metrics endpoint answers", func() (bool, string) {
		_, _, err := scrape("")
		return err == nil, fmt.Sprint(err)
	})

	for _, c := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token Kubernetes does not know", "not-a-token", http.StatusUnauthorized},
		{"a ServiceAccount without manta-metrics-reader", tokens["nosy"], http.StatusForbidden},
		{"a ServiceAccount bound to manta-metrics-reader", tokens["prometheus"], http.StatusOK},
	} {
		code, body, err := scrape(c.token)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if code != c.want {
			t.Errorf("%s: HTTP %d, want %d: %.200s", c.name, code, c.want, body)
		}
		if code == http.StatusOK && !strings.Contains(body, "controller_runtime_") {
			t.Errorf("%s: the body has no controller-runtime series: %.200s", c.name, body)
		}
		if code != http.StatusOK && strings.Contains(body, "controller_runtime_") {
			t.Errorf("%s: refused with %d, yet the body carries metrics", c.name, code)
		}
	}

	// Plain HTTP on the same port gets no metrics.
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}).Get("http://" + addr + "/metrics")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "controller_runtime_") {
			t.Errorf("plain HTTP served the metrics: HTTP %d", resp.StatusCode)
		}
	}
}
