package real

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/testutil"
)

// consoleBrowser is Debian's chromium, which `make tools` installs (hack/node-packages.sh), as for TestConsole.
const consoleBrowser = "/usr/bin/chromium"

// consoleRules are the user guide's console table for one namespace: list and watch the Ray kinds, pods and
// events, read logs, follow the Ray dashboard link, create and delete RayJobs.
var consoleRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"ray.io"}, Resources: []string{"rayclusters", "rayjobs", "rayservices", "raycronjobs"},
		Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
	{APIGroups: []string{"manta.dev"}, Resources: []string{"imagepulljobs"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"pods/log", "services/proxy"}, Verbs: []string{"get"}},
}

// testConsoleRealJob: `manta apiserver --auth kubernetes` on loopback, and Chromium driving its console as a
// ServiceAccount granted the user guide's console RBAC in one namespace: sign in (the namespace switcher offers that
// namespace alone), create a RayJob from the form (head only, the cluster kept after the job, and through the
// form's "No CPU limit" and environment variables the head fitRayResources gives every other step), see it reach
// Complete / SUCCEEDED on the real node, read its submitter's log in the page (the entrypoint's printed answer), and
// follow the page's Ray dashboard link, through the Kubernetes API server's services proxy with the user's token,
// to Ray's own dashboard, whose Jobs page lists the job. Screenshots go to test-artifacts/console-real/.
func testConsoleRealJob(t *testing.T, ctx context.Context, e *env) {
	if _, err := exec.LookPath(consoleBrowser); err != nil {
		t.Fatalf("this step drives %s, which make tools installs (Debian's chromium): %v", consoleBrowser, err)
	}
	ns := e.namespace(t, ctx, "console-real")
	token := e.consoleUser(t, ctx, ns, "console-user")
	api := e.startAPIServer(t, ctx, "kubernetes")
	b := newConsoleBrowser(t, filepath.Join(testutil.MustRepoRoot(t), "test-artifacts", "console-real"))
	css, id := func(s string) chromedp.CSS { return chromedp.CSS(s) }, func(s string) chromedp.ID { return chromedp.ID(s) }

	b.run("sign in", 2*time.Minute,
		chromedp.Navigate(api.base+"/console/"),
		chromedp.WaitVisible(id("token")),
		chromedp.SendKeys(id("token"), token),
		chromedp.Click(id("signin")),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="stream-status" and starts-with(text(), "Live")]`)),
	)
	// The dev cluster has other namespaces (default, kube-system and the suite's): the user may list none of them.
	options := b.get("read the namespace switcher", chromedp.Evaluate[string](`[...document.querySelectorAll("#namespace option")].map(o => o.value).join(",")`))
	if options != ","+ns {
		t.Errorf("namespace switcher offers %q, want all namespaces and %s only", options, ns)
	}

	const name = "console-real"
	const answer = "console-real answer 42"
	b.run("fill the RayJob form", 2*time.Minute,
		chromedp.Navigate(api.base+"/console/#/new-rayjob?ns="+ns),
		chromedp.WaitVisible(id("job-name")),
		chromedp.SetValue(id("job-name"), name),
		chromedp.SetValue(id("job-entrypoint"), `python -c "import ray; ray.init(); print('console-real answer', ray.get(ray.remote(lambda: 6 * 7).remote()))"`),
		// The head every other step's clusters get from fitRayResources: 500m CPU requested and no CPU limit (Ray
		// counts one CPU), and the dashboard's wait for its modules at 10 minutes.
		chromedp.SetValue(id("job-headCPU"), "500m"),
		chromedp.SetValue(id("job-headMemory"), "2Gi"),
		chromedp.Click(id("job-noCPULimit")),
		chromedp.Click(id("job-env-add")),
		chromedp.SetValue(id("job-env-0-name"), "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT"),
		chromedp.SetValue(id("job-env-0-value"), "600"),
		// With the input event typing fires, so the form disables the worker fields and leaves them out; a worker
		// would not fit the node beside the head and the submitter.
		chromedp.Evaluate[chromedp.Void](`{const w = document.getElementById("job-workers"); w.value = "0"; w.dispatchEvent(new Event("input"));}`),
		// The cluster is kept after the job, so its dashboard can be followed once the job has ended.
		chromedp.Click(id("job-shutdown")),
		b.shot("01-form"),
		chromedp.Click(id("create")),
		chromedp.WaitVisible(id("state")),
	)
	start := time.Now()
	job := &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := e.cl.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatalf("the form's RayJob: %v", err)
	}
	if job.Spec.ShutdownAfterJobFinishes || len(job.Spec.RayClusterSpec.WorkerGroupSpecs) != 0 {
		t.Fatalf("the form's RayJob: shutdownAfterJobFinishes %v, %d worker groups; want false and none", job.Spec.ShutdownAfterJobFinishes, len(job.Spec.RayClusterSpec.WorkerGroupSpecs))
	}
	// The form's cluster is already what fitRayResources makes of a cluster: patching it changes nothing.
	fitted := job.Spec.RayClusterSpec.DeepCopy()
	fitRayResources(fitted)
	if diff := cmp.Diff(job.Spec.RayClusterSpec, fitted); diff != "" {
		t.Fatalf("the form's cluster is not the one fitRayResources gives the other steps (-form +fitted):\n%s", diff)
	}
	// The cluster starts first: as long as waitClusterReady allows, on a busy machine.
	job = e.waitJob(t, ctx, job, 10*time.Minute, "ended", func(j *rayv1.RayJob) bool {
		return rayv1.IsJobDeploymentTerminal(j.Status.JobDeploymentStatus)
	})
	if job.Status.JobStatus != rayv1.JobStatusSucceeded || job.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusComplete {
		t.Fatalf("RayJob %s from the form ended %s / %s, want SUCCEEDED / Complete: %s", name, job.Status.JobStatus, job.Status.JobDeploymentStatus, e.jobReport(ctx, job))
	}
	t.Logf("RayJob %s from the console's form SUCCEEDED in %s", name, time.Since(start).Round(time.Second))
	// The head pod the operator built from the form's cluster: the variable and no CPU limit reached its Ray container.
	heads, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		LabelSelector: rayv1.LabelCluster + "=" + job.Status.RayClusterName + "," + rayv1.LabelNodeType + "=head"})
	if err != nil {
		t.Fatal(err)
	}
	if len(heads.Items) != 1 {
		t.Fatalf("%d head pods of cluster %s, want 1: %s", len(heads.Items), job.Status.RayClusterName, e.nsReport(ctx, ns))
	}
	head := heads.Items[0].Spec.Containers[0]
	wait := ""
	for _, ev := range head.Env {
		if ev.Name == "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT" {
			wait = ev.Value
		}
	}
	if _, limited := head.Resources.Limits[corev1.ResourceCPU]; wait != "600" || limited {
		t.Errorf("head pod %s's Ray container: dashboard wait %q, resources %+v; want 600 and no CPU limit", heads.Items[0].Name, wait, head.Resources)
	}
	b.run("see the job succeed", time.Minute,
		chromedp.WaitVisible(chromedp.Search(`//dd[@id="state" and text()="Complete / SUCCEEDED"]`)),
		chromedp.WaitVisible(id("ray-dashboard")),
		b.shot("02-rayjob-succeeded"),
	)

	subs, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	sub := ""
	for _, p := range subs.Items {
		if p.Status.Phase == corev1.PodSucceeded {
			sub = p.Name
		}
	}
	if sub == "" {
		t.Fatalf("no submitter pod of %s succeeded: %s", name, e.nsReport(ctx, ns))
	}
	b.run("read the submitter's log", time.Minute,
		chromedp.Click(css(fmt.Sprintf(`#pods tr[data-pod=%q] button[aria-label=%q]`, sub, "Logs of "+sub+", container "+rayjob.SubmitterContainerName))),
		chromedp.WaitVisible(chromedp.Search(`//pre[@id="log-text" and contains(., "`+answer+`")]`)),
		chromedp.ScrollIntoView(id("logs")),
		b.shot("03-submitter-log"),
	)

	href := b.get("read the Ray dashboard link", chromedp.Evaluate[string](`document.getElementById("ray-dashboard").getAttribute("href")`))
	want := "/api/v1/namespaces/" + ns + "/services/" + job.Status.RayClusterStatus.Head.ServiceName + ":dashboard/proxy/"
	if href != want {
		t.Fatalf("Ray dashboard link %q, want %q", href, want)
	}
	// Following the link in this tab: the browser sends the console's cookie, and manta apiserver passes the
	// request on to the Kubernetes API server's services proxy with the user's token.
	b.run("follow the Ray dashboard link", 2*time.Minute,
		chromedp.Navigate(api.base+href),
		chromedp.WaitVisible(css(`#root img[alt="Ray"]`)),
	)
	// Ray's page names itself: "Ray Dashboard" in its HTML, "<page> | Ray Dashboard" once its app sets the page's.
	if title := b.get("read the dashboard's title", chromedp.Title()); !strings.HasSuffix(title, "Ray Dashboard") {
		t.Errorf("the dashboard link leads to a page titled %q, want Ray's (… Ray Dashboard)", title)
	}
	// Ray's Jobs page reads Ray's own job list through the same proxy: the form's job is there under its ID.
	b.run("see the job in Ray's dashboard", 2*time.Minute,
		chromedp.Navigate(api.base+href+"#/jobs"),
		chromedp.WaitVisible(chromedp.Search(`//td[contains(., "`+job.Status.JobId+`")]`)),
		b.shot("04-ray-dashboard-jobs"),
	)

	b.run("delete the RayJob", 2*time.Minute,
		chromedp.Navigate(api.base+"/console/#/ns/"+ns+"/rayjobs/"+name),
		chromedp.WaitVisible(id("delete")),
		chromedp.Click(id("delete")),
		chromedp.WaitVisible(id("confirm-ok")),
		chromedp.Click(id("confirm-ok")),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="stream-status" and starts-with(text(), "Live")]`)),
	)
	waitFor(t, ctx, time.Minute, "RayJob "+name+" gone after the console's Delete", func() (bool, string) {
		err := e.cl.Get(ctx, client.ObjectKeyFromObject(job), &rayv1.RayJob{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	e.deleteNamespace(t, ctx, ns)
}

// consoleUser creates ServiceAccount sa in ns with the console's RBAC there, waits until the authorizer applies it,
// and returns a token for it.
func (e *env) consoleUser(t *testing.T, ctx context.Context, ns, sa string) string {
	t.Helper()
	if _, err := e.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: consoleRules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer reads bindings from an informer: the last rule allowed means the binding is in.
	user := "system:serviceaccount:" + ns + ":" + sa
	waitFor(t, ctx, time.Minute, user+" may follow dashboards in "+ns, func() (bool, string) {
		r, err := e.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "services", Subresource: "proxy"},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		return r.Status.Allowed, r.Status.Reason
	})
	tr, err := e.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// browser is one Chromium, driven step by step, each step waiting on what the page shows.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
}

func newConsoleBrowser(t *testing.T, shots string) *browser {
	t.Helper()
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(consoleBrowser),
		chromedp.NoSandbox, // tests run as root, where Chromium's sandbox cannot start
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1440, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	bctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancel)
	// The browser lives as long as the context of its first action: bctx, so that step timeouts end steps only.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", consoleBrowser, err)
	}
	return &browser{t: t, ctx: bctx, shots: shots}
}

func (b *browser) fail(what string, err error) {
	b.t.Helper()
	body, _ := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS("body")))
	b.t.Fatalf("%s: %v\npage text:\n%s", what, err, body)
}

func (b *browser) run(what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.fail(what, err)
	}
}

func (b *browser) get(what string, a chromedp.Action[string]) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.fail(what, err)
	}
	return v
}

func (b *browser) shot(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		png, err := chromedp.FullScreenshot(100)(ctx, tg) // 100: PNG
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644)
	})
}
