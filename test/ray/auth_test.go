package ray_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestTokenAuth runs against a head of its own started with Ray's token authentication (RAY_AUTH_MODE=token,
// RAY_AUTH_TOKEN): Ray refuses the Jobs API to callers without the token or with a wrong one; Manta's client with
// the token runs a job to SUCCEEDED and passes the whole conformance suite (Serve included); the K8sJobMode submitter script runs with exactly the auth environment Manta
// gives the submitter container; and Manta's operator, acting with only the manta-operator ClusterRole, reads the
// token from the cluster's Secret and runs HTTPMode RayJobs to SUCCEEDED, for a cluster naming its Secret
// (authOptions.secretName) and for one using the Secret under the name the operator gives it.
func TestTokenAuth(t *testing.T) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	rayBin := filepath.Join(root, "bin", "ray-venv", "bin", "ray")
	h, err := startRayHead(rayBin, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	tr, err := ray.NewDirectTransport(h.DashboardURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	client := func(opts ...ray.ClientOption) *ray.DashboardClient {
		return ray.NewDashboardClient(tr, append(opts, ray.WithTimeout(defaultCallTimeout))...)
	}
	authed := client(ray.WithAuthToken(token))

	t.Run("Ray refuses calls without the token", func(t *testing.T) {
		body := `{"entrypoint": "echo should-not-run", "submission_id": "manta-auth-refused"}`
		for _, tc := range []struct{ method, path, header, body string }{
			{http.MethodGet, "/api/jobs/", "", ""},
			{http.MethodPost, "/api/jobs/", "", body},
			{http.MethodPost, "/api/jobs/", "Bearer wrong", body},
			{http.MethodPut, "/api/serve/applications/", "", `{"applications": []}`},
		} {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, h.DashboardURL()+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.header != "" {
				req.Header.Set(ray.AuthHeader, tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s %s (x-ray-authorization %q): %d %s, want 401 or 403", tc.method, tc.path, tc.header, resp.StatusCode, msg)
			} else {
				t.Logf("%s %s (x-ray-authorization %q): %d %s", tc.method, tc.path, tc.header, resp.StatusCode, strings.TrimSpace(string(msg)))
			}
		}
		if _, err := client().ListJobs(t.Context()); !errors.Is(err, ray.ErrUnauthorized) {
			t.Errorf("client without token: %v, want ErrUnauthorized", err)
		}
		if _, err := client(ray.WithAuthToken("wrong")).ListJobs(t.Context()); !errors.Is(err, ray.ErrUnauthorized) {
			t.Errorf("client with a wrong token: %v, want ErrUnauthorized", err)
		}
		if _, err := authed.GetJob(t.Context(), "manta-auth-refused"); !errors.Is(err, ray.ErrNotFound) {
			t.Errorf("the refused submission: %v, want ErrNotFound (never submitted)", err)
		}
		// The health check stays public, so the pods' probes and the submitter's wait loop work without the token.
		if err := client().CheckGCSHealth(t.Context()); err != nil {
			t.Errorf("gcs health without token: %v", err)
		}
	})

	t.Run("client with the token runs a job", func(t *testing.T) {
		id := fmt.Sprintf("manta-auth-client-%d", time.Now().UnixNano())
		// Right after start the head may have no agent to run jobs yet ("No available agent", a 500): retried, as a
		// controller requeues.
		testutil.Eventually(t, jobTimeout, "job submitted", func() (bool, string) {
			_, err := authed.SubmitJob(t.Context(), ray.JobSubmitRequest{Entrypoint: `python -c "print('manta auth ok')"`, SubmissionID: id})
			if err != nil && !errors.Is(err, ray.ErrUnavailable) && !errors.Is(err, ray.ErrAlreadySubmitted) {
				t.Fatal(err)
			}
			return err == nil || errors.Is(err, ray.ErrAlreadySubmitted), fmt.Sprint(err)
		})
		waitJob(t, authed, id, jobTimeout, ray.JobStatusSucceeded)
		if logs, err := authed.GetJobLogs(t.Context(), id); err != nil || !strings.Contains(logs, "manta auth ok") {
			t.Errorf("logs %q, %v", logs, err)
		}
	})

	// Every call Manta's clients make, with the token: jobs, logs, Serve, and the health checks the probes make.
	t.Run("conformance with the token", func(t *testing.T) {
		serve, err := ray.NewDirectTransport(h.ServeURL(), nil)
		if err != nil {
			t.Fatal(err)
		}
		runConformance(t, suite{name: "token", dashboard: authed, serve: ray.NewServeProxyClient(serve, ray.WithTimeout(defaultCallTimeout)),
			agent: h.AgentURL(), servePort: h.ServePort})
	})

	t.Run("K8sJobMode submitter", func(t *testing.T) { testAuthSubmitterScript(t, h, token, authed) })

	t.Run("operator", func(t *testing.T) { testAuthOperator(t, h, token, authed) })
}

// testAuthSubmitterScript runs the submitter container's script as its pod would: with the container's env, the
// RAY_AUTH_TOKEN reference resolved as the kubelet resolves it (from the Secret the reference names). Without the
// token, the same script is refused.
func testAuthSubmitterScript(t *testing.T, h *rayHead, token string, dash *ray.DashboardClient) {
	j := newRayJob("ns", "auth-submitter", `python -c "print('manta auth submitter ok')"`)
	j.Spec.SubmissionMode = rayv1.K8sJobMode
	j.Spec.RayClusterSpec.RayVersion = "2.52.0"
	j.Spec.RayClusterSpec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}
	cluster := rayjob.ClusterFor(j, "auth-submitter-x7k2p")
	run := func(id string, withToken bool) (string, error) {
		j.Status.JobId = id
		c := rayjob.SubmitterJob(j, cluster, h.DashboardURL()).Spec.Template.Spec.Containers[0]
		env := append(os.Environ(), "PATH="+filepath.Join(root, "bin", "ray-venv", "bin")+":"+os.Getenv("PATH"))
		var resolved bool
		for _, e := range c.Env {
			switch {
			case e.ValueFrom == nil:
				env = append(env, e.Name+"="+e.Value)
			case e.Name == clusterbuild.EnvRayAuthToken && e.ValueFrom.SecretKeyRef != nil &&
				e.ValueFrom.SecretKeyRef.Name == clusterbuild.AuthSecretName(cluster) && e.ValueFrom.SecretKeyRef.Key == clusterbuild.AuthTokenSecretKey:
				resolved = true
				if withToken {
					env = append(env, e.Name+"="+token)
				}
			default:
				t.Fatalf("submitter env %s has a reference the test cannot resolve: %+v", e.Name, e.ValueFrom)
			}
		}
		if !resolved {
			t.Fatalf("the submitter takes no RAY_AUTH_TOKEN from the cluster's Secret: %+v", c.Env)
		}
		ctx, cancel := context.WithTimeout(t.Context(), jobTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, c.Command[0], append(c.Command[1:], c.Args...)...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	id := fmt.Sprintf("manta-auth-submitter-%d", time.Now().UnixNano())
	out, err := run(id, true)
	if err != nil || !strings.Contains(out, "manta auth submitter ok") {
		t.Fatalf("submitter with the token: %v\n%s", err, out)
	}
	if info := waitJob(t, dash, id, jobTimeout, ray.JobStatusSucceeded); info == nil {
		t.Fatal("no job")
	}
	refused := id + "-no-token"
	if out, err := run(refused, false); err == nil {
		t.Errorf("submitter without the token succeeded:\n%s", out)
	} else {
		t.Logf("submitter without the token: %v: %s", err, lastLine(out))
	}
	if _, err := dash.GetJob(t.Context(), refused); !errors.Is(err, ray.ErrNotFound) {
		t.Errorf("submission without the token: %v, want ErrNotFound (never submitted)", err)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// testAuthOperator runs the operator in-process as a ServiceAccount holding only the generated manta-operator
// ClusterRole, dialling every head Service on this test's head.
func testAuthOperator(t *testing.T, h *rayHead, token string, dash *ray.DashboardClient) {
	admin, cl := testutil.StartEnvtest(t)
	const ns = "rj-auth"
	cfg := operatorRoleConfig(t, admin, ns)
	direct := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || !strings.HasSuffix(host, ".svc.cluster.local") {
			return nil, fmt.Errorf("direct test transport: unexpected address %q", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+strconv.Itoa(h.DashboardPort))
	}}}
	f, err := ray.NewFactory(ray.Options{HTTPClient: direct, Timeout: defaultCallTimeout})
	if err != nil {
		t.Fatal(err)
	}
	startOperatorAs(t, cfg, cl, ns, operator.Options{RayClients: f}, "10.0.0.10")

	secret := func(name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{clusterbuild.AuthTokenSecretKey: []byte(token)}}
	}
	// A RayJob whose cluster names its Secret.
	named := newRayJob(ns, "auth-named", `python -c "print('manta auth named ok')"`)
	named.Spec.RayClusterSpec.RayVersion = "2.52.0"
	named.Spec.RayClusterSpec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, SecretName: ptr.To("head-token")}
	// A RayJob on a RayCluster that uses the Secret under the operator's name for it (KubeRay's: the cluster's).
	rc := testutil.MakeRayCluster(ns, "authrc").Workers("w", 1).Obj()
	rc.Spec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}
	selected := newRayJob(ns, "auth-selected", `python -c "print('manta auth selected ok')"`)
	selected.Spec.RayClusterSpec = nil
	selected.Spec.ClusterSelector = map[string]string{rayv1.LabelCluster: "authrc"}
	for _, o := range []client.Object{secret("head-token"), secret(clusterbuild.AuthSecretName(rc)), rc, named, selected} {
		if err := cl.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range []*rayv1.RayJob{named, selected} {
		got := waitRayJob(t, cl, j, "Complete", func(j *rayv1.RayJob) bool { return rayv1.IsJobDeploymentTerminal(j.Status.JobDeploymentStatus) })
		if got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusComplete || got.Status.JobStatus != rayv1.JobStatusSucceeded {
			t.Errorf("%s: status = %+v", j.Name, got.Status)
			continue
		}
		logs, err := dash.GetJobLogs(t.Context(), got.Status.JobId)
		if err != nil || !strings.Contains(logs, "manta auth") {
			t.Errorf("Ray's logs of %s: %q, %v", got.Status.JobId, logs, err)
		}
	}
}

// operatorRoleConfig is a config that authenticates as a new ServiceAccount bound to the manta-operator
// ClusterRole generated from the markers (config/rbac/operator/role.yaml), and nothing else.
func operatorRoleConfig(t *testing.T, admin *rest.Config, ns string) *rest.Config {
	t.Helper()
	ctx := t.Context()
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "operator", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(bytes.TrimPrefix(data, []byte("---\n")), &role); err != nil {
		t.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(admin)
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const sa = "manta-operator"
	if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
	}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitRBAC(t, ctx, kc, "system:serviceaccount:"+ns+":"+sa, ns, role.Rules...)
	tok, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tok.Status.Token
	return cfg
}

// startOperatorAs runs the operator with cfg for ns (which exists), with the package's fake kubelet.
func startOperatorAs(t *testing.T, cfg *rest.Config, cl client.Client, ns string, opts operator.Options, headIP string) {
	t.Helper()
	opts.SkipNameValidation = true
	opts.WatchNamespaces = []string{ns}
	opts.ReconcileConcurrency = 4
	mgr, err := operator.NewManager(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := operator.Setup(mgr, opts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	go fakeKubelet(ctx, cl, ns, headIP)
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	})
}
