package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/imagepulljob"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

// deniedRecorder wraps a client's transport and records every answer of the Kubernetes API server that refuses
// the caller (403 Forbidden, 401 Unauthorized), with the request and the API server's message.
type deniedRecorder struct {
	mu     sync.Mutex
	denied []string
	calls  int
}

func (d *deniedRecorder) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		d.mu.Lock()
		d.calls++
		d.mu.Unlock()
		if err != nil || (resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusUnauthorized) {
			return resp, err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		msg := string(body)
		var st metav1.Status
		if json.Unmarshal(body, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		d.mu.Lock()
		d.denied = append(d.denied, fmt.Sprintf("%d %s %s: %s", resp.StatusCode, req.Method, req.URL.RequestURI(), msg))
		d.mu.Unlock()
		return resp, nil
	})
}

func (d *deniedRecorder) snapshot() (denied []string, calls int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.denied...), d.calls
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// loadClusterRole reads a generated ClusterRole (config/rbac/<part>/role.yaml) and checks its name.
func loadClusterRole(t *testing.T, part, wantName string) *rbacv1.ClusterRole {
	t.Helper()
	path := filepath.Join(testutil.MustRepoRoot(t), "config", "rbac", part, "role.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var roles []*rbacv1.ClusterRole
	for _, doc := range strings.Split(string(raw), "\n---") {
		if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(doc), "---")) == "" {
			continue
		}
		cr := &rbacv1.ClusterRole{}
		if err := yaml.UnmarshalStrict([]byte(doc), cr); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		roles = append(roles, cr)
	}
	if len(roles) != 1 || roles[0].Kind != "ClusterRole" || roles[0].Name != wantName {
		t.Fatalf("%s: want exactly one ClusterRole %s, got %d documents", path, wantName, len(roles))
	}
	return roles[0]
}

// saConfig creates ServiceAccount ns/name bound (ClusterRoleBinding) to exactly the ClusterRole role, asks the
// TokenRequest API for a token and returns a rest.Config with that token and the cluster's CA only: no client
// certificate, no admin. Refusals are recorded by rec.
func saConfig(t *testing.T, ctx context.Context, kc kubernetes.Interface, admin *rest.Config, ns, name, role string, rec *deniedRecorder) *rest.Config {
	t.Helper()
	if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
	}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer learns the binding from an informer: wait until it applies, or the first requests may be 403.
	cr, err := kc.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitRBAC(t, ctx, kc, "system:serviceaccount:"+ns+":"+name, "", cr.Rules...)
	tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, name, err)
	}
	cfg := &rest.Config{
		Host:        admin.Host,
		BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: admin.CAData, CAFile: admin.CAFile, ServerName: admin.ServerName,
		},
		QPS: 200, Burst: 400,
	}
	if rec != nil {
		cfg.WrapTransport = rec.wrap
	}
	// The token identifies the ServiceAccount and nothing more.
	rc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ssr, err := rc.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview as %s: %v", name, err)
	}
	if want := "system:serviceaccount:" + ns + ":" + name; ssr.Status.UserInfo.Username != want {
		t.Fatalf("token authenticates as %q, want %q", ssr.Status.UserInfo.Username, want)
	}
	for _, g := range ssr.Status.UserInfo.Groups {
		if g == "system:masters" {
			t.Fatalf("token of %s is in system:masters", name)
		}
	}
	return cfg
}

// TestGeneratedRBACIsSufficient runs the operator and the REST API server with ServiceAccount tokens bound to
// exactly the generated ClusterRoles (config/rbac/operator/role.yaml, config/rbac/apiserver/role.yaml), on a dev
// cluster of its own (the package's shared cluster runs an operator with admin credentials). It fails on any
// request the Kubernetes API server refuses them.
func TestGeneratedRBACIsSufficient(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var extra [][]byte
	if !strings.Contains(string(devcluster.DefaultStages()), "manta-puller-complete") {
		extra = append(extra, devcluster.PullerStages)
	}
	c, err := devcluster.Start(ctx, devcluster.Options{
		Pools:       []devcluster.NodePool{{Name: "rbac", Count: 3, Labels: map[string]string{"e2e.manta.dev/pool": "rbac"}}},
		ExtraStages: extra,
		Logf:        t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel() // stop the operator before the cluster
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the dev cluster: %v", err)
		}
	}()
	t.Logf("dev cluster up in %s", time.Since(start).Round(time.Millisecond))

	admin := c.RESTConfig()
	admin.QPS, admin.Burst = 200, 400
	kc := kubernetes.NewForConfigOrDie(admin)
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(admin, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	// The generated ClusterRoles, applied as they are.
	opRole := loadClusterRole(t, "operator", "manta-operator")
	apiRole := loadClusterRole(t, "apiserver", "manta-apiserver")
	for _, r := range []*rbacv1.ClusterRole{opRole, apiRole} {
		if _, err := kc.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const sysNS = "manta-system"
	for _, ns := range []string{sysNS, "rbac-a", "rbac-b"} {
		if err := testutil.CreateNamespace(ctx, cl, ns); err != nil {
			t.Fatal(err)
		}
	}
	opDenied, apiDenied := &deniedRecorder{}, &deniedRecorder{}
	opCfg := saConfig(t, ctx, kc, admin, sysNS, "manta-operator", "manta-operator", opDenied)
	apiCfg := saConfig(t, ctx, kc, admin, sysNS, "manta-apiserver", "manta-apiserver", apiDenied)
	// The caller of the REST API: an admin-like platform user, a ServiceAccount bound to cluster-admin.
	userCfg := saConfig(t, ctx, kc, admin, sysNS, "platform-admin", "cluster-admin", nil)

	// checkDenied fails the test for every distinct refusal recorded from index from on, and returns the count.
	checkDenied := func(t *testing.T, who string, rec *deniedRecorder, from int) int {
		t.Helper()
		denied, calls := rec.snapshot()
		if calls == 0 {
			t.Errorf("%s made no Kubernetes API calls through the recorded transport", who)
		}
		seen := map[string]int{}
		var order []string
		for _, d := range denied[min(from, len(denied)):] {
			if seen[d] == 0 {
				order = append(order, d)
			}
			seen[d]++
		}
		for _, d := range order {
			t.Errorf("%s was refused (%dx): %s", who, seen[d], d)
		}
		t.Logf("%s: %d Kubernetes API calls, %d refused", who, calls, len(denied))
		return len(denied)
	}
	// opSeen is how many operator refusals have been reported already.
	opSeen := 0
	// failFast stops a wait as soon as the operator has been refused anything.
	failFast := func(t *testing.T) {
		t.Helper()
		if denied, _ := opDenied.snapshot(); len(denied) > 0 {
			opSeen = checkDenied(t, "operator (manta-operator)", opDenied, 0)
			t.FailNow()
		}
	}

	// The operator with the manta-operator token.
	// The package's shared cluster may run an operator in this process already.
	opts := operator.Options{ReconcileConcurrency: 4, SkipNameValidation: true}
	mgr, err := operator.NewManager(opCfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := operator.Setup(mgr, opts); err != nil {
		t.Fatal(err)
	}
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-mgrDone:
			if err != nil {
				t.Errorf("operator: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("operator did not stop within 30s")
		}
	}()

	t.Run("operator", func(t *testing.T) {
		began := time.Now()
		// Autoscaling on: the operator creates the autoscaler ServiceAccount, Role and RoleBinding, which it may only
		// do while holding every permission the Role grants.
		rc := testutil.MakeRayCluster("rbac-a", "autoscaled").Workers("small", 2).Autoscaling().Obj()
		if err := cl.Create(ctx, rc); err != nil {
			t.Fatal(err)
		}
		// Prepull: the prepull controller gives the cluster ImagePullJobs.
		pre := testutil.MakeRayCluster("rbac-a", "prepulled").Workers("small", 1).Obj()
		pre.Annotations = map[string]string{imagepulljob.AnnotationPrepullImages: "true"}
		if err := cl.Create(ctx, pre); err != nil {
			t.Fatal(err)
		}
		job := &mantav1alpha1.ImagePullJob{
			ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: "rbac-b"},
			Spec: mantav1alpha1.ImagePullJobSpec{Image: "example/app:v1", ImagePullPolicy: mantav1alpha1.PullAlways,
				Selector: &mantav1alpha1.ImagePullJobNodeSelector{Names: []string{"rbac-0", "rbac-1"}}},
		}
		if err := cl.Create(ctx, job); err != nil {
			t.Fatal(err)
		}

		testutil.Eventually(t, 3*time.Minute, "autoscaled RayCluster ready", func() (bool, string) {
			failFast(t)
			got := &rayv1.RayCluster{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(rc), got); err != nil {
				return false, err.Error()
			}
			return got.Status.State == rayv1.Ready && got.Status.ReadyWorkerReplicas == 2,
				fmt.Sprintf("state %q, %d ready workers, conditions %s", got.Status.State, got.Status.ReadyWorkerReplicas, conditionSummary(got.Status.Conditions))
		})
		for _, o := range []client.Object{
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: clusterbuild.AutoscalerServiceAccountName(rc)}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: clusterbuild.AutoscalerRoleName(rc)}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: clusterbuild.AutoscalerRoleName(rc)}},
		} {
			if err := cl.Get(ctx, client.ObjectKey{Namespace: rc.Namespace, Name: o.GetName()}, o); err != nil {
				t.Errorf("autoscaler %T %s: %v", o, o.GetName(), err)
			}
		}

		testutil.Eventually(t, 2*time.Minute, "ImagePullJob complete", func() (bool, string) {
			failFast(t)
			got := &mantav1alpha1.ImagePullJob{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(job), got); err != nil {
				return false, err.Error()
			}
			s := got.Status
			return s.CompletionTime != nil && s.Desired == 2 && s.Succeeded == 2 && s.Failed == 0, fmt.Sprintf("%+v", s)
		})

		testutil.Eventually(t, 2*time.Minute, "prepull ImagePullJobs of the annotated RayCluster", func() (bool, string) {
			failFast(t)
			got := &rayv1.RayCluster{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(pre), got); err != nil {
				return false, err.Error()
			}
			var jobs mantav1alpha1.ImagePullJobList
			if err := cl.List(ctx, &jobs, client.InNamespace(pre.Namespace)); err != nil {
				return false, err.Error()
			}
			var owned []string
			for _, j := range jobs.Items {
				if metav1.IsControlledBy(&j, got) && j.Spec.Image != "" {
					owned = append(owned, j.Name)
				}
			}
			return len(owned) > 0 && got.Status.State == rayv1.Ready, fmt.Sprintf("owned jobs %v, cluster state %q", owned, got.Status.State)
		})

		// RayService: status, its cluster, the serve label on its pods (workers keep the true they are created
		// with, as under KubeRay; no Ray answers in the dev cluster, so the head's proxy is unhealthy and the head
		// stays false), KubeRay v1.6.2's finalizer, and its cluster deleted by the controller before the RayService goes.
		rs := &rayv1.RayService{
			ObjectMeta: metav1.ObjectMeta{Name: "served", Namespace: "rbac-a"},
			Spec: rayv1.RayServiceSpec{
				ServeConfigV2:  "applications:\n  - name: app\n    import_path: app:app\n",
				RayClusterSpec: testutil.MakeRayCluster("rbac-a", "x").Workers("small", 1).Obj().Spec,
			},
		}
		if err := cl.Create(ctx, rs); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 3*time.Minute, "RayService cluster ready, worker labelled ray.io/serve=true", func() (bool, string) {
			failFast(t)
			got := &rayv1.RayService{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(rs), got); err != nil {
				return false, err.Error()
			}
			name := got.Status.PendingServiceStatus.RayClusterName
			if name == "" {
				return false, "no pending cluster"
			}
			rc := &rayv1.RayCluster{}
			if err := cl.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: name}, rc); err != nil {
				return false, err.Error()
			}
			var pods corev1.PodList
			if err := cl.List(ctx, &pods, client.InNamespace(rs.Namespace), client.MatchingLabels{rayv1.LabelCluster: name, rayv1.LabelNodeType: rayv1.NodeTypeWorker}); err != nil {
				return false, err.Error()
			}
			labelled := len(pods.Items) == 1 && pods.Items[0].Labels[rayv1.LabelServe] == "true"
			return rc.Status.State == rayv1.Ready && labelled && slices.Equal(got.Finalizers, []string{"ray.io/rayservice-finalizer"}), fmt.Sprintf("cluster state %q, worker labels ok %v, finalizers %v", rc.Status.State, labelled, got.Finalizers)
		})
		if err := cl.Delete(ctx, rs); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 2*time.Minute, "RayService deleted with its cluster", func() (bool, string) {
			failFast(t)
			err := cl.Get(ctx, client.ObjectKeyFromObject(rs), &rayv1.RayService{})
			var left rayv1.RayClusterList
			if lerr := cl.List(ctx, &left, client.InNamespace(rs.Namespace), client.MatchingLabels{rayv1.LabelOriginCRName: rs.Name}); lerr != nil {
				return false, lerr.Error()
			}
			return apierrors.IsNotFound(err) && len(left.Items) == 0, fmt.Sprintf("get: %v, %d clusters left", err, len(left.Items))
		})

		// RayCronJob: the first run's RayJob, created with the RayCronJob as its controller (blockOwnerDeletion needs
		// raycronjobs/finalizers), and the status written. "@every 1s" runs again within the minute, whose RayJob
		// name is taken by the first: the controller reads it to see it is its own. The template's RayJob stays
		// suspended, so no cluster follows.
		cron := &rayv1.RayCronJob{
			ObjectMeta: metav1.ObjectMeta{Name: "every-second", Namespace: "rbac-b"},
			Spec: rayv1.RayCronJobSpec{Schedule: "@every 1s", JobTemplate: rayv1.RayJobSpec{
				Entrypoint: "python -c 'print(1)'", Suspend: true, ShutdownAfterJobFinishes: true,
				RayClusterSpec: ptr.To(testutil.MakeRayCluster("rbac-b", "x").Workers("small", 1).Obj().Spec),
			}},
		}
		if err := cl.Create(ctx, cron); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 2*time.Minute, "RayCronJob's first RayJob and lastScheduleTime", func() (bool, string) {
			failFast(t)
			got := &rayv1.RayCronJob{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(cron), got); err != nil {
				return false, err.Error()
			}
			var jobs rayv1.RayJobList
			if err := cl.List(ctx, &jobs, client.InNamespace(cron.Namespace), client.MatchingLabels{"ray.io/cronjob-name": cron.Name}); err != nil {
				return false, err.Error()
			}
			owned := len(jobs.Items) > 0 && metav1.IsControlledBy(&jobs.Items[0], got)
			return owned && got.Status.LastScheduleTime != nil, fmt.Sprintf("%d RayJobs (owned %v), status %+v", len(jobs.Items), owned, got.Status)
		})
		if err := cl.Delete(ctx, cron); err != nil {
			t.Fatal(err)
		}

		// Anything the operator reported on the objects that reads like a refusal.
		var evs corev1.EventList
		if err := cl.List(ctx, &evs); err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if strings.Contains(strings.ToLower(e.Message), "forbidden") {
				t.Errorf("event %s/%s on %s %s: %s", e.Namespace, e.Name, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
			}
		}
		t.Logf("operator checks took %s", time.Since(began).Round(time.Millisecond))
		opSeen = checkDenied(t, "operator (manta-operator)", opDenied, 0)
	})

	t.Run("apiserver", func(t *testing.T) {
		began := time.Now()
		s, err := apiserver.New(apiCfg, apiserver.Options{Auth: apiserver.AuthKubernetes})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s.Handler())
		defer srv.Close()
		call := func(method, path string, body any, want int, out any) {
			t.Helper()
			var in io.Reader
			if body != nil {
				b, err := json.Marshal(body)
				if err != nil {
					t.Fatal(err)
				}
				in = bytes.NewReader(b)
			}
			req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, in)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+userCfg.BearerToken)
			if body != nil {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != want {
				t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, raw, want)
			}
			if out != nil {
				if err := json.Unmarshal(raw, out); err != nil {
					t.Fatalf("%s %s: decoding %s: %v", method, path, raw, err)
				}
			}
		}

		for _, ns := range []string{"rbac-a", "rbac-b"} {
			call("POST", "/apis/v1/namespaces/"+ns+"/compute_templates",
				apiserver.ComputeTemplate{Name: "small", Namespace: ns, CPU: 1, Memory: 2}, http.StatusOK, nil)
			call("POST", "/apis/v1/namespaces/"+ns+"/clusters", apiserver.Cluster{
				Name: "api-" + ns, Namespace: ns, User: "platform", Version: "2.52.0",
				ClusterSpec: &apiserver.ClusterSpec{
					HeadGroupSpec: &apiserver.HeadGroupSpec{ComputeTemplate: "small", RayStartParams: map[string]string{"dashboard-host": "0.0.0.0"}},
					WorkerGroupSpec: []apiserver.WorkerGroupSpec{{
						GroupName: "workers", ComputeTemplate: "small", Replicas: 1, MinReplicas: 0, MaxReplicas: 3,
						RayStartParams: map[string]string{},
					}},
				},
			}, http.StatusOK, nil)
		}
		var tpl apiserver.ComputeTemplate
		call("GET", "/apis/v1/namespaces/rbac-a/compute_templates/small", nil, http.StatusOK, &tpl)
		var one apiserver.Cluster
		call("GET", "/apis/v1/namespaces/rbac-a/clusters/api-rbac-a", nil, http.StatusOK, &one)
		if one.Name != "api-rbac-a" || one.ClusterSpec == nil {
			t.Errorf("get cluster: %+v", one)
		}
		var all apiserver.ListClustersResponse
		call("GET", "/apis/v1/clusters", nil, http.StatusOK, &all)
		seen := map[string]bool{}
		for _, cl := range all.Clusters {
			seen[cl.Namespace+"/"+cl.Name] = true
		}
		// The REST API lists the clusters it manages (its labels), not every RayCluster.
		for _, want := range []string{"rbac-a/api-rbac-a", "rbac-b/api-rbac-b"} {
			if !seen[want] {
				t.Errorf("list across namespaces: %s missing from %v", want, seen)
			}
		}
		var tpls apiserver.ListComputeTemplatesResponse
		call("GET", "/apis/v1/compute_templates", nil, http.StatusOK, &tpls)
		if len(tpls.ComputeTemplates) < 2 {
			t.Errorf("list compute templates across namespaces: %+v", tpls)
		}
		// Image pull jobs through the REST API too.
		call("POST", "/apis/v1/namespaces/rbac-b/image_pull_jobs",
			apiserver.ImagePullJob{Name: "api-warm", Namespace: "rbac-b", Image: "example/app:v2", NodeNames: []string{"rbac-2"}}, http.StatusOK, nil)
		var ipjs apiserver.ListImagePullJobsResponse
		call("GET", "/apis/v1/image_pull_jobs", nil, http.StatusOK, &ipjs)
		if len(ipjs.ImagePullJobs) == 0 {
			t.Errorf("list image pull jobs across namespaces: empty")
		}
		call("DELETE", "/apis/v1/namespaces/rbac-b/image_pull_jobs/api-warm", nil, http.StatusOK, nil)

		for _, ns := range []string{"rbac-a", "rbac-b"} {
			call("DELETE", "/apis/v1/namespaces/"+ns+"/clusters/api-"+ns, nil, http.StatusOK, nil)
			call("DELETE", "/apis/v1/namespaces/"+ns+"/compute_templates/small", nil, http.StatusOK, nil)
		}
		call("GET", "/apis/v1/namespaces/rbac-a/clusters/api-rbac-a", nil, http.StatusNotFound, nil)
		t.Logf("apiserver checks took %s", time.Since(began).Round(time.Millisecond))
		checkDenied(t, "API server (manta-apiserver)", apiDenied, 0)
	})

	// A last look at the operator after the API server's clusters came and went.
	checkDenied(t, "operator (manta-operator), after the API server's requests", opDenied, opSeen)
}
