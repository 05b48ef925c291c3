// Package install installs Manta as a user does: its image (built without Docker by images.EnsureManta, what `make
// image` runs) in the dev cluster's registry, charts/manta installed with Helm, and the operator and the API server
// running as pods on the real node under the chart's ServiceAccounts, with the in-cluster configuration.
package install

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/imagepulljob"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/devcluster/images"
	"github.com/manta-dev/manta/internal/testutil"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

const (
	release   = "manta"
	system    = "manta-system"
	operator  = release + "-operator" // the chart's Deployment and ServiceAccount
	apiserver = release + "-apiserver"
	// leaseName is the operator's leader-election Lease (internal/operator's LeaderElectionID), in the release's
	// namespace (--leader-election-namespace).
	leaseName = "manta-operator-leader"
)

// installValues are the chart values the test installs with: two operator replicas with leader election, and
// requests small enough that the sample RayJob's head, worker and submitter (1.5 CPUs) fit beside them on the
// real node of a 2-CPU machine.
const installValues = `
operator:
  replicas: 2
  leaderElection: true
  resources:
    requests: {cpu: 10m, memory: 64Mi}
apiserver:
  resources:
    requests: {cpu: 10m, memory: 32Mi}
`

// env is the dev cluster with its real node and Manta's image in its registry.
type env struct {
	cluster *devcluster.Cluster
	cs      kubernetes.Interface
	cl      client.Client
	bin     string
}

// TestHelmInstall: `helm install` of charts/manta with Manta's image runs the operator (2 replicas, leader election)
// and the API server as pods on the real node; the image's /manager is the operator; the operator's metrics and the
// API server answer authorised ServiceAccount tokens only; an ImagePullJob's puller runs from the chart's image;
// the sample RayJob ends SUCCEEDED under the in-cluster operator although its leader pod is deleted while the Ray
// job runs (another pod takes the Lease over, no Ray pod is recreated, the job is submitted once); `helm
// uninstall` leaves the CRDs, the RayJob, its RayCluster, submitter Job and pods as they were. Then, in the same
// dev cluster, `helm upgrade` from the release of an earlier commit to this tree's under a running Ray job
// (checkUpgrade).
func TestHelmInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// The earlier Manta the upgrade starts from is built while the dev cluster starts.
	base := buildBase(t, ctx)
	e := startEnv(t, ctx)

	start := time.Now()
	e.helm(t, ctx, "install", release, filepath.Join(testutil.MustRepoRoot(t), "charts", "manta"),
		"--namespace", system, "--create-namespace", "--values", writeValues(t))
	ops := e.waitReady(t, ctx, operator, 2, images.MantaRef())
	api := e.waitReady(t, ctx, apiserver, 1, images.MantaRef())
	t.Logf("helm install: %d operator pods and %d API server pod Ready on %s in %s", len(ops), len(api),
		devcluster.RealNodeName, time.Since(start).Round(time.Millisecond))
	leader := e.waitLeader(t, ctx, podNames(ops), "")
	t.Logf("leader: %s", leader)
	e.checkManagerCommand(t, ctx)

	ns := "rayjob"
	if err := testutil.CreateNamespaceWith(ctx, e.cs, ns); err != nil {
		t.Fatal(err)
	}
	job := sampleJob(t, ns)
	if err := e.cl.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	e.checkMetrics(t, ctx, podIP(ops, leader), job)
	e.checkAPIServer(t, ctx, ns)
	e.checkImagePull(t, ctx, ns)

	// The Ray job runs until the test releases it, so the leader is deleted while it runs.
	running := e.waitJob(t, ctx, job, func(j *rayv1.RayJob) bool { return j.Status.JobStatus == rayv1.JobStatusRunning })
	submissions := e.submissions(t, ctx, running)
	if len(submissions) != 1 {
		t.Fatalf("before the failover, the head's dashboard lists %d submissions, want 1: %v", len(submissions), submissions)
	}
	rayPods := e.rayPods(t, ctx, ns, running.Status.RayClusterName)
	t.Logf("Ray job %s running on RayCluster %s (pods %v); deleting the leader %s", running.Status.JobId,
		running.Status.RayClusterName, sortedNames(rayPods), leader)

	deleted := time.Now()
	if err := e.cs.CoreV1().Pods(system).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	standby := slices.DeleteFunc(podNames(ops), func(n string) bool { return n == leader })
	// The standby or the Deployment's replacement for the deleted pod, whichever acquires the Lease first.
	next := e.waitLeader(t, ctx, nil, leader)
	t.Logf("the Lease moved from %s to %s (the standby was %v) %s after the delete", leader, next, standby,
		time.Since(deleted).Round(100*time.Millisecond))
	e.release(t, ctx, ns, running.Status.RayClusterName)

	done := e.waitJob(t, ctx, job, func(j *rayv1.RayJob) bool {
		return j.Status.JobStatus == rayv1.JobStatusSucceeded && j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusComplete
	})
	submissions = e.submissions(t, ctx, done)
	recreated := recreatedPods(rayPods, e.rayPods(t, ctx, ns, done.Status.RayClusterName))
	var submitters batchv1.JobList
	if err := e.cl.List(ctx, &submitters, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	// Only the new leader runs now: the job's end is its reading of Ray's status.
	if done.Status.JobId != running.Status.JobId {
		t.Errorf("the RayJob's jobId changed across the failover: %s, then %s", running.Status.JobId, done.Status.JobId)
	}
	t.Logf("after the failover: Ray job %s, %d submissions on the head's dashboard, %d submitter Jobs, %d Ray pods recreated",
		done.Status.JobStatus, len(submissions), len(submitters.Items), recreated)
	if len(submissions) != 1 || submissions[0] != done.Status.JobId {
		t.Errorf("the head's dashboard lists submissions %v, want exactly the RayJob's %s", submissions, done.Status.JobId)
	}
	if len(submitters.Items) != 1 {
		t.Errorf("%d submitter Jobs, want 1", len(submitters.Items))
	}
	if recreated != 0 {
		t.Errorf("%d Ray pods were recreated across the failover", recreated)
	}

	e.checkUninstall(t, ctx, done)
	e.checkUpgrade(t, ctx, base, done)
}

func startEnv(t *testing.T, ctx context.Context) *env {
	t.Helper()
	root := testutil.MustRepoRoot(t)
	binDir := filepath.Join(root, "bin")
	if err := devcluster.RealNodeSupport(binDir); err != nil {
		t.Fatalf("this machine cannot run the real node: %v", err)
	}
	// Manta's CRDs are left out: the chart installs them.
	crds, err := devcluster.SchedulerCRDPaths(root)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := devcluster.GatewayAPICRDs(root)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c, err := devcluster.Start(ctx, devcluster.Options{Nodes: 1, RealNode: true, MantaImage: true,
		CRDDirs: append(crds, gw...), Logf: t.Logf})
	if err != nil {
		t.Fatalf("start the dev cluster with a real node: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop the dev cluster: %v", err)
		}
	})
	t.Logf("dev cluster with a real node and %s up in %s", images.MantaRef(), time.Since(start).Round(time.Millisecond))
	scheme, err := testutil.Scheme()
	if err == nil {
		err = apiextensionsv1.AddToScheme(scheme)
	}
	if err != nil {
		t.Fatal(err)
	}
	e := &env{cluster: c, cs: kubernetes.NewForConfigOrDie(c.RESTConfig()), bin: binDir}
	if e.cl, err = client.New(c.RESTConfig(), client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	return e
}

func writeValues(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(installValues), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// helm runs bin/helm against the dev cluster.
func (e *env) helm(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	return e.run(t, ctx, "helm", append(args, "--kubeconfig", e.cluster.Kubeconfig)...)
}

func (e *env) kubectl(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	return e.run(t, ctx, "kubectl", append([]string{"--kubeconfig", e.cluster.Kubeconfig}, args...)...)
}

func (e *env) run(t *testing.T, ctx context.Context, tool string, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(e.bin, tool), args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// waitReady waits until the chart's Deployment name has n pods, all Ready and of image, and no other, and returns
// them; each must run on the real node under the ServiceAccount of the same name.
func (e *env) waitReady(t *testing.T, ctx context.Context, name string, n int, image string) []corev1.Pod {
	t.Helper()
	sel := "app.kubernetes.io/component=" + strings.TrimPrefix(name, release+"-")
	var ready []corev1.Pod
	// Only pods of image count, and only when no other pod is left: after helm upgrade, the rollout's end.
	waitFor(t, ctx, 5*time.Minute, fmt.Sprintf("%d Ready pods of %s with %s", n, name, image), func() (bool, string) {
		pods, err := e.cs.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err.Error()
		}
		ready = ready[:0]
		var why []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && podReady(&p) && p.Spec.Containers[0].Image == image {
				ready = append(ready, p)
			}
			why = append(why, p.Spec.Containers[0].Image+" "+e.podReport(ctx, &p))
		}
		return len(ready) == n && len(pods.Items) == n, strings.Join(why, " | ")
	})
	for _, p := range ready {
		if p.Spec.NodeName != devcluster.RealNodeName || p.Spec.ServiceAccountName != name {
			t.Errorf("pod %s runs on %q as %q, want %s as %s", p.Name, p.Spec.NodeName, p.Spec.ServiceAccountName, devcluster.RealNodeName, name)
		}
	}
	return ready
}

// checkManagerCommand runs Manta's image with KubeRay's chart's command, /manager, as the chart's pods run
// (non-root, read-only root file system): the same binary answers as the operator.
func (e *env) checkManagerCommand(t *testing.T, ctx context.Context) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "manager-command", Namespace: system},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "manager", Image: images.MantaRef(), Command: []string{"/manager", "--help"},
				SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
	if err := e.cl.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 2*time.Minute, "pod "+pod.Name+" Succeeded", func() (bool, string) {
		var p corev1.Pod
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return false, err.Error()
		}
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("/manager --help failed: %s", e.podReport(ctx, &p))
		}
		return p.Status.Phase == corev1.PodSucceeded, e.podReport(ctx, &p)
	})
	logs, err := e.cs.CoreV1().Pods(system).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "--enable-leader-election") {
		t.Errorf("/manager --help in the image printed no operator flags: %.300s", logs)
	}
	t.Logf("/manager --help in Manta's image: the operator's usage (%d bytes)", len(logs))
	if err := e.cl.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
}

// waitLeader waits until the operator's Lease is held by one of pods (nil: any running pod of the operator's
// Deployment) other than not, and returns that pod's name. A holder identity is the pod's hostname, its name, then
// "_" and a UUID.
func (e *env) waitLeader(t *testing.T, ctx context.Context, pods []string, not string) string {
	t.Helper()
	var holder string
	waitFor(t, ctx, 3*time.Minute, "the Lease "+leaseName+" held by a pod of "+operator+" other than "+not, func() (bool, string) {
		pods := pods
		if pods == nil {
			list, err := e.cs.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=operator"})
			if err != nil {
				return false, err.Error()
			}
			for _, p := range list.Items {
				if p.DeletionTimestamp == nil {
					pods = append(pods, p.Name)
				}
			}
		}
		var l coordinationv1.Lease
		if err := e.cl.Get(ctx, types.NamespacedName{Namespace: system, Name: leaseName}, &l); err != nil {
			return false, err.Error()
		}
		id := ""
		if l.Spec.HolderIdentity != nil {
			id = *l.Spec.HolderIdentity
		}
		holder, _, _ = strings.Cut(id, "_")
		return holder != not && slices.Contains(pods, holder), "held by " + id
	})
	return holder
}

// sampleJob is config/samples/rayjob.yaml with an entrypoint that, after the sample's own, waits for the file
// release writes in the head, and its cluster kept an hour after the job (not 60 s), so that helm uninstall
// finds the cluster and its pods there.
func sampleJob(t *testing.T, ns string) *rayv1.RayJob {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.MustRepoRoot(t), "config", "samples", "rayjob.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var job rayv1.RayJob
	if err := yaml.UnmarshalStrict(b, &job); err != nil {
		t.Fatal(err)
	}
	job.Namespace = ns
	job.Spec.Entrypoint = `python -c "import os, time, ray; ray.init(); print(ray.cluster_resources())
while not os.path.exists('` + releaseFile + `'): time.sleep(0.2)"`
	job.Spec.TTLSecondsAfterFinished = 3600
	return &job
}

const releaseFile = "/tmp/manta-install-test-release"

// release lets the Ray job's entrypoint end.
func (e *env) release(t *testing.T, ctx context.Context, ns, cluster string) {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "ray.io/node-type=head,ray.io/cluster=" + cluster})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the head pod of %s: %v (%d pods)", cluster, err, len(pods.Items))
	}
	e.kubectl(t, ctx, "-n", ns, "exec", pods.Items[0].Name, "-c", "ray-head", "--", "touch", releaseFile)
}

// waitJob waits until cond holds for the RayJob, failing at once when it fails.
func (e *env) waitJob(t *testing.T, ctx context.Context, job *rayv1.RayJob, cond func(*rayv1.RayJob) bool) *rayv1.RayJob {
	t.Helper()
	got := &rayv1.RayJob{}
	waitFor(t, ctx, 10*time.Minute, "RayJob "+job.Name, func() (bool, string) {
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(job), got); err != nil {
			return false, err.Error()
		}
		if got.Status.JobStatus == rayv1.JobStatusFailed || got.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusFailed {
			t.Fatalf("RayJob failed: %s / %s: %s\n%s", got.Status.JobStatus, got.Status.JobDeploymentStatus, got.Status.Message, e.nsReport(ctx, job.Namespace))
		}
		return cond(got), fmt.Sprintf("%s / %s: %s; %s", got.Status.JobStatus, got.Status.JobDeploymentStatus, got.Status.Message, e.nsReport(ctx, job.Namespace))
	})
	return got
}

// submissions lists the submission IDs of the jobs the RayJob's head has been given: Ray's job list, from the
// dashboard at the head Service's cluster DNS name, as the operator reaches it.
func (e *env) submissions(t *testing.T, ctx context.Context, job *rayv1.RayJob) []string {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DialContext: e.cluster.DialContext}}
	url := fmt.Sprintf("http://%s-head-svc.%s.svc.cluster.local:8265/api/jobs/", job.Status.RayClusterName, job.Namespace)
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("Ray's job list: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("Ray's job list at %s: %d %v: %.300s", url, resp.StatusCode, err, raw)
	}
	var jobs []struct {
		Type         string  `json:"type"`
		SubmissionID *string `json:"submission_id"`
	}
	if err := json.Unmarshal(raw, &jobs); err != nil {
		t.Fatalf("Ray's job list: %v: %s", err, raw)
	}
	var ids []string
	for _, j := range jobs {
		if j.SubmissionID != nil {
			ids = append(ids, *j.SubmissionID)
		}
	}
	return ids
}

// rayPods returns the UIDs of the RayCluster's pods by name.
func (e *env) rayPods(t *testing.T, ctx context.Context, ns, cluster string) map[string]types.UID {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "ray.io/cluster=" + cluster})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, p := range pods.Items {
		out[p.Name] = p.UID
	}
	if len(out) != 2 {
		t.Fatalf("RayCluster %s has %d pods, want a head and a worker: %v", cluster, len(out), out)
	}
	return out
}

// recreatedPods counts the pods of after that were not in before (by UID).
func recreatedPods(before, after map[string]types.UID) int {
	n := 0
	for name, uid := range after {
		if before[name] != uid {
			n++
		}
	}
	return n
}

// checkMetrics scrapes the leader's /metrics (HTTPS) as Prometheus would: a ServiceAccount token bound to the
// chart's metrics-reader ClusterRole gets Manta's series (the RayJob's kuberay_job_info among them), no token gets
// 401 and a token without the role 403, which needs the operator's TokenReview and SubjectAccessReview rights.
func (e *env) checkMetrics(t *testing.T, ctx context.Context, ip string, job *rayv1.RayJob) {
	t.Helper()
	reader, stranger := e.token(t, ctx, "metrics-reader"), e.token(t, ctx, "stranger")
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: release + "-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "metrics-reader", Namespace: system}},
	}
	if err := e.cl.Create(ctx, crb); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil,
		// The operator's certificate is self-signed at start, as the chart's ServiceMonitor says.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec
	url := "https://" + ip + ":8080/metrics"
	get := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	want := fmt.Sprintf(`kuberay_job_info{name=%q,namespace=%q`, job.Name, job.Namespace)
	var body string
	waitFor(t, ctx, 2*time.Minute, "the leader's metrics with "+want, func() (bool, string) {
		code, b := get(reader)
		body = b
		return code == http.StatusOK && strings.Contains(b, want), fmt.Sprintf("%d: %.300s", code, b)
	})
	series := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "kuberay_") || strings.HasPrefix(l, "manta_") || strings.HasPrefix(l, "controller_runtime_reconcile_total") {
			series++
		}
	}
	t.Logf("metrics: %d bytes, %d kuberay_/manta_/controller_runtime_reconcile_total samples at %s", len(body), series, url)
	if code, b := get(""); code != http.StatusUnauthorized {
		t.Errorf("metrics without a token: %d, want 401: %.200s", code, b)
	}
	if code, b := get(stranger); code != http.StatusForbidden {
		t.Errorf("metrics with an unbound ServiceAccount's token: %d, want 403: %.200s", code, b)
	}
}

// token creates the ServiceAccount name in the release's namespace and returns a token of it.
func (e *env) token(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: system}}
	if err := e.cl.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	tr, err := e.cs.CoreV1().ServiceAccounts(system).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// checkAPIServer lists RayJobs in ns through the chart's API server, at its Service: a ServiceAccount token allowed
// to read RayJobs there gets 200, the unbound one 403, which needs the API server's TokenReview and
// SubjectAccessReview rights and its in-cluster client. (The list is empty: like KubeRay's, it shows only the
// objects the API server created.)
func (e *env) checkAPIServer(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	token := e.token(t, ctx, "rayjob-reader")
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "rayjob-reader", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{rayv1.GroupVersion.Group}, Resources: []string{"rayjobs"}, Verbs: []string{"get", "list"}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "rayjob-reader", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "rayjob-reader", Namespace: system}}}
	for _, o := range []client.Object{role, rb} {
		if err := e.cl.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DialContext: e.cluster.DialContext}}
	url := fmt.Sprintf("http://%s.%s.svc.cluster.local:8888/apis/v1/namespaces/%s/jobs", apiserver, system, ns)
	get := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, ctx, time.Minute, "the API server's list of RayJobs in "+ns, func() (bool, string) {
		code, b := get(token)
		return code == http.StatusOK, fmt.Sprintf("%d: %.300s", code, b)
	})
	if code, b := get(e.token(t, ctx, "api-stranger")); code != http.StatusForbidden {
		t.Errorf("the API server with an unbound ServiceAccount's token: %d, want 403: %.200s", code, b)
	}
	t.Logf("the API server pod answered GET %s: 200 for a token that may list RayJobs there, 403 for one that may not", url)
}

// checkImagePull pulls the Redis image onto the real node with an ImagePullJob: its puller pod copies /puller from
// the operator's --puller-image, which the chart sets to its own image, the one the dev cluster built.
func (e *env) checkImagePull(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	const image = "docker.io/library/redis:7.4.0"
	job := &mantav1alpha1.ImagePullJob{
		ObjectMeta: metav1.ObjectMeta{Name: "redis", Namespace: ns},
		Spec: mantav1alpha1.ImagePullJobSpec{
			Image:    image,
			Selector: &mantav1alpha1.ImagePullJobNodeSelector{Names: []string{devcluster.RealNodeName}},
		},
	}
	if err := e.cl.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	var pullers []string
	waitFor(t, ctx, 4*time.Minute, "ImagePullJob "+job.Name+" complete", func() (bool, string) {
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: imagepulljob.LabelImagePuller})
		if err == nil {
			for _, p := range pods.Items {
				for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
					if !slices.Contains(pullers, c.Image) {
						pullers = append(pullers, c.Image)
					}
				}
			}
		}
		var got mantav1alpha1.ImagePullJob
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(job), &got); err != nil {
			return false, err.Error()
		}
		if got.Status.Failed > 0 {
			t.Fatalf("ImagePullJob failed: %+v; %s", got.Status, e.nsReport(ctx, ns))
		}
		return got.Status.Succeeded == 1, fmt.Sprintf("status %+v; %s", got.Status, e.nsReport(ctx, ns))
	})
	t.Logf("ImagePullJob pulled %s onto %s; puller pod images seen: %v", image, devcluster.RealNodeName, pullers)
	// Puller pods may be gone before a poll sees them: the operator's flag says which image they run.
	var d appsv1.Deployment
	if err := e.cl.Get(ctx, types.NamespacedName{Namespace: system, Name: operator}, &d); err != nil {
		t.Fatal(err)
	}
	if want := "--puller-image=" + images.MantaRef(); !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, want) {
		t.Errorf("the operator's args lack %s: %v", want, d.Spec.Template.Spec.Containers[0].Args)
	}
	if len(pullers) > 0 && !slices.Contains(pullers, images.MantaRef()) {
		t.Errorf("the puller pod ran %v, none of them %s", pullers, images.MantaRef())
	}
}

// checkUninstall: helm uninstall removes the operator and the API server and nothing of the user's: the CRDs,
// the RayJob, its RayCluster, submitter Job and pods keep their UIDs and are not being deleted once the
// operator's pods are gone.
func (e *env) checkUninstall(t *testing.T, ctx context.Context, job *rayv1.RayJob) {
	t.Helper()
	before := e.userObjects(t, ctx, job)
	e.helm(t, ctx, "uninstall", release, "--namespace", system, "--wait")
	waitFor(t, ctx, 3*time.Minute, "the operator's and API server's pods gone", func() (bool, string) {
		pods, err := e.cs.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods left", len(pods.Items))
	})
	after := e.userObjects(t, ctx, job)
	changed := 0
	for k, uid := range before {
		if after[k] != uid {
			changed++
			t.Errorf("after helm uninstall, %s is %q, was %q", k, after[k], uid)
		}
	}
	t.Logf("helm uninstall: %d of %d CRDs, Ray objects, Jobs and pods changed or gone", changed, len(before))
}

// userObjects maps what helm uninstall must leave alone to its UID ("" when it is being deleted).
func (e *env) userObjects(t *testing.T, ctx context.Context, job *rayv1.RayJob) map[string]types.UID {
	t.Helper()
	out := map[string]types.UID{}
	put := func(kind string, o client.Object) {
		uid := o.GetUID()
		if o.GetDeletionTimestamp() != nil {
			uid = ""
		}
		out[kind+" "+o.GetName()] = uid
	}
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := e.cl.List(ctx, &crds); err != nil {
		t.Fatal(err)
	}
	for i := range crds.Items {
		if g := crds.Items[i].Spec.Group; g == rayv1.GroupVersion.Group || g == "manta.dev" || strings.HasSuffix(g, ".manta.dev") {
			put("CRD", &crds.Items[i])
		}
	}
	var rj rayv1.RayJob
	if err := e.cl.Get(ctx, client.ObjectKeyFromObject(job), &rj); err != nil {
		t.Fatal(err)
	}
	put("RayJob", &rj)
	var rc rayv1.RayCluster
	if err := e.cl.Get(ctx, types.NamespacedName{Namespace: job.Namespace, Name: job.Status.RayClusterName}, &rc); err != nil {
		t.Fatal(err)
	}
	put("RayCluster", &rc)
	var jobs batchv1.JobList
	if err := e.cl.List(ctx, &jobs, client.InNamespace(job.Namespace)); err != nil {
		t.Fatal(err)
	}
	for i := range jobs.Items {
		put("Job", &jobs.Items[i])
	}
	var pods corev1.PodList
	if err := e.cl.List(ctx, &pods, client.InNamespace(job.Namespace)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		put("Pod", &pods.Items[i])
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func podIP(pods []corev1.Pod, name string) string {
	for _, p := range pods {
		if p.Name == name {
			return p.Status.PodIP
		}
	}
	return ""
}

func sortedNames(m map[string]types.UID) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// podReport says where a pod stands, for failure messages.
func (e *env) podReport(ctx context.Context, p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: phase %s node %q", p.Name, p.Status.Phase, p.Spec.NodeName)
	for _, s := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, "; %s ready=%v restarts=%d", s.Name, s.Ready, s.RestartCount)
		if s.State.Waiting != nil {
			fmt.Fprintf(&b, " waiting %s: %s", s.State.Waiting.Reason, s.State.Waiting.Message)
		}
		if s.LastTerminationState.Terminated != nil {
			fmt.Fprintf(&b, " last terminated %s (%d)", s.LastTerminationState.Terminated.Reason, s.LastTerminationState.Terminated.ExitCode)
			if logs, err := e.cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: s.Name, Previous: true}).DoRaw(ctx); err == nil {
				fmt.Fprintf(&b, ", its log's end: %s", tail(string(logs), 600))
			}
		}
	}
	evs, err := e.cs.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
	if err == nil && len(evs.Items) > 0 {
		ev := evs.Items[len(evs.Items)-1]
		fmt.Fprintf(&b, "; event %s: %s", ev.Reason, ev.Message)
	}
	return b.String()
}

func (e *env) nsReport(ctx context.Context, ns string) string {
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var parts []string
	for i := range pods.Items {
		parts = append(parts, e.podReport(ctx, &pods.Items[i]))
	}
	return "pods: " + strings.Join(parts, " | ")
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// waitFor polls cond until it holds, failing with cond's last word after timeout.
func waitFor(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not after %s: %s", what, timeout, why)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}
