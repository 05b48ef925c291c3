package envtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manta-dev/manta/internal/apiserver/apiservertest"
	"github.com/manta-dev/manta/internal/testutil"
)

// testSchemathesis runs Schemathesis (pinned by hack/schemathesis.sh, installed on first use) against the live
// server with Kubernetes auth and a cluster-admin token: every operation of /openapi.json is fuzzed, and each
// answer must not be a 5xx and must match the document (status code, content type, headers, body schema).
func (e *testEnv) testSchemathesis(t *testing.T) {
	root := testutil.MustRepoRoot(t)
	install := exec.Command(filepath.Join(root, "hack", "schemathesis.sh"))
	var stderr bytes.Buffer
	install.Stderr = &stderr
	out, err := install.Output()
	if err != nil {
		t.Fatalf("installing schemathesis: %v\n%s", err, stderr.String())
	}
	st := strings.TrimSpace(string(out))

	ns := e.Namespace(t)
	token := e.serviceAccountToken(t, ns, "fuzzer")
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fuzzer-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "fuzzer", Namespace: ns}},
	}
	if err := e.k.Create(context.Background(), crb); err != nil {
		t.Fatal(err)
	}
	e.waitRBAC(t, ns, "fuzzer", "", rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}})
	// Something to find: a template and a cluster in a namespace the generated names may hit.
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/compute_templates", apiservertest.Template(ns, "small")), nil)
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/clusters", apiservertest.Cluster(ns, "fuzzed")), nil)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, st, "run", e.guarded.URL+"/openapi.json",
		"--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,unsupported_method",
		"--phases", "examples,coverage,fuzzing",
		"--max-examples", "15",
		"--workers", "1", // Python 3.11's ast is not thread-safe; hypothesis trips on it with more workers
		"--seed", "1",
		"--request-timeout", "20",
		"--header", "Authorization: Bearer "+token,
		"--report", "junit", "--report-dir", dir,
	)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SCHEMATHESIS_HOOKS=", "NO_COLOR=1")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	start := time.Now()
	err = cmd.Run()
	t.Logf("schemathesis took %s", time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("schemathesis found problems (%v):\n%s", err, tail(strings.ReplaceAll(buf.String(), token, "<token>"), 300))
	}
	t.Logf("schemathesis:\n%s", tail(buf.String(), 25))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
