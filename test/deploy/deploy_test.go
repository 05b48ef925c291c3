// Package deploy tests the installable manifests in config/: config/default renders with kustomize, every object
// applies (server-side, strict field validation, as a cluster-admin user so RBAC escalation checks run) to a real
// kube-apiserver, the Deployments pass only flags the manta binary accepts, and the ServiceAccounts hold exactly
// the generated roles.
package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/manta-dev/manta/internal/testutil"
)

const (
	namespace    = "manta-system"
	image        = "ghcr.io/manta-dev/manta:latest"
	fieldManager = "manta-deploy-test"
	installer    = "platform-engineer" // a user bound to cluster-admin, as the person running kubectl apply would be
)

// render runs kustomize on dir of fsys, as `kubectl apply -k` does.
func render(t *testing.T, fsys filesys.FileSystem, dir string) []*unstructured.Unstructured {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// typed converts a rendered object to its Go type, failing on fields the type does not know.
func typed[T any](t *testing.T, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	u := find(objs, kind, name)
	if u == nil {
		t.Fatalf("config/default renders no %s %s", kind, name)
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
	return out
}

// generatedRole reads a ClusterRole written by controller-gen (make generate).
func generatedRole(t *testing.T, root, rel string) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	var cr rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(bytes.TrimPrefix(data, []byte("---\n")), &cr); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return &cr
}

func TestDefaultInstall(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	root := testutil.MustRepoRoot(t)
	objs := render(t, filesys.MakeFsOnDisk(), filepath.Join(root, "config", "default"))

	t.Run("contents", func(t *testing.T) { checkContents(t, root, objs) })
	t.Run("puller image follows the image", func(t *testing.T) { checkPullerImageFollows(t, root) })

	// Built before the control plane starts, so the build does not slow its start.
	bin := testutil.BuildManta(t)
	t.Run("flags", func(t *testing.T) { checkFlags(t, bin, objs) })

	cfg, _ := testutil.StartEnvtest(t)
	bindInstaller(t, cfg)
	t.Run("apply", func(t *testing.T) { applyAll(t, cfg, objs) })
	t.Run("service account permissions", func(t *testing.T) { checkPermissions(t, root, cfg) })
	t.Run("kubectl apply --server-side -k", func(t *testing.T) { kubectlApply(t, root, cfg) })
}

// kubectlApply runs the install command README.md documents, with the kubectl `make tools` builds (its own
// kustomize), over what applyAll applied: it must succeed without conflicts between the two field managers.
func kubectlApply(t *testing.T, root string, admin *rest.Config) {
	kubectl := filepath.Join(root, "bin", "kubectl")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: admin.CertData, ClientKeyData: admin.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kubectl, "--kubeconfig", kubeconfig, "--as", installer, "--as-group", "system:authenticated",
		"apply", "--server-side", "-k", "config/default")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply --server-side -k config/default: %v\n%s", err, out)
	}
	for _, want := range []string{"deployment.apps/manta-operator serverside-applied", "deployment.apps/manta-apiserver serverside-applied"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl apply output lacks %q:\n%s", want, out)
		}
	}
}

// checkContents checks what config/default holds: every generated CRD, the generated ClusterRoles unchanged and
// bound to the ServiceAccounts the Deployments run as, everything namespaced in manta-system, and Deployments
// whose ports, probes and security context agree with their args.
func checkContents(t *testing.T, root string, objs []*unstructured.Unstructured) {
	crdFiles, err := filepath.Glob(filepath.Join(root, "config", "crd", "*_*.yaml"))
	if err != nil || len(crdFiles) == 0 {
		t.Fatalf("no CRDs in config/crd: %v", err)
	}
	for _, f := range crdFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var u unstructured.Unstructured
		if err := yaml.Unmarshal(data, &u.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if find(objs, "CustomResourceDefinition", u.GetName()) == nil {
			t.Errorf("config/default lacks CRD %s (%s): list it in config/crd/kustomization.yaml", u.GetName(), filepath.Base(f))
		}
	}

	for _, o := range objs {
		if ns := o.GetNamespace(); ns != "" && ns != namespace {
			t.Errorf("%s %s is in namespace %q, want %s", o.GetKind(), o.GetName(), ns, namespace)
		}
	}

	for _, want := range []struct{ role, sa string }{
		{"config/rbac/operator/role.yaml", "manta-operator"},
		{"config/rbac/apiserver/role.yaml", "manta-apiserver"},
	} {
		gen := generatedRole(t, root, want.role)
		got := typed[rbacv1.ClusterRole](t, objs, "ClusterRole", gen.Name)
		if !equalJSON(got.Rules, gen.Rules) {
			t.Errorf("ClusterRole %s differs from %s", gen.Name, want.role)
		}
		var bound bool
		for _, u := range objs {
			if u.GetKind() != "ClusterRoleBinding" {
				continue
			}
			b := typed[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", u.GetName())
			if b.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: gen.Name}) {
				continue
			}
			if slices.Contains(b.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: want.sa, Namespace: namespace}) {
				bound = true
			}
		}
		if !bound {
			t.Errorf("no ClusterRoleBinding binds ClusterRole %s to ServiceAccount %s/%s", gen.Name, namespace, want.sa)
		}
		if find(objs, "ServiceAccount", want.sa) == nil {
			t.Errorf("config/default renders no ServiceAccount %s", want.sa)
		}
		d := typed[appsv1.Deployment](t, objs, "Deployment", want.sa)
		if d.Spec.Template.Spec.ServiceAccountName != want.sa {
			t.Errorf("Deployment %s runs as ServiceAccount %q, want %s", d.Name, d.Spec.Template.Spec.ServiceAccountName, want.sa)
		}
		if a := d.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a {
			t.Errorf("Deployment %s does not mount its ServiceAccount token", d.Name)
		}
	}

	op := typed[appsv1.Deployment](t, objs, "Deployment", "manta-operator")
	c := onlyContainer(t, op)
	checkSecurity(t, op, c)
	args := flagValues(c.Args)
	if c.Image != image || args["--puller-image"] != image {
		t.Errorf("operator image %q, --puller-image %q: want both %s", c.Image, args["--puller-image"], image)
	}
	checkPort(t, op, c, "--health-probe-bind-address", args, "health")
	checkPort(t, op, c, "--metrics-addr", args, "metrics")
	checkProbe(t, op.Name, "liveness", c.LivenessProbe, "/healthz", c, args["--health-probe-bind-address"])
	checkProbe(t, op.Name, "readiness", c.ReadinessProbe, "/readyz", c, args["--health-probe-bind-address"])

	api := typed[appsv1.Deployment](t, objs, "Deployment", "manta-apiserver")
	c = onlyContainer(t, api)
	checkSecurity(t, api, c)
	args = flagValues(c.Args)
	checkPort(t, api, c, "--listen", args, "http")
	checkProbe(t, api.Name, "liveness", c.LivenessProbe, "/healthz", c, args["--listen"])
	checkProbe(t, api.Name, "readiness", c.ReadinessProbe, "/healthz", c, args["--listen"])
	svc := typed[corev1.Service](t, objs, "Service", "manta-apiserver")
	for k, v := range svc.Spec.Selector {
		if api.Spec.Template.Labels[k] != v {
			t.Errorf("Service %s selector %s=%s does not select the Deployment's pods (%v)", svc.Name, k, v, api.Spec.Template.Labels)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != intstr.FromString("http") {
		t.Errorf("Service %s ports %+v: want one port targeting the container port http", svc.Name, svc.Spec.Ports)
	}
}

func equalJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func onlyContainer(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("Deployment %s has %d containers, want 1", d.Name, n)
	}
	return &d.Spec.Template.Spec.Containers[0]
}

// flagValues maps each --flag=value argument to its value.
func flagValues(args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		if name, value, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "--") {
			m[name] = value
		}
	}
	return m
}

// checkPort checks that the address flag listens on the container port called portName.
func checkPort(t *testing.T, d *appsv1.Deployment, c *corev1.Container, flag string, args map[string]string, portName string) {
	t.Helper()
	addr, ok := args[flag]
	if !ok {
		t.Errorf("Deployment %s: args %v lack %s", d.Name, c.Args, flag)
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("Deployment %s: %s=%s: %v", d.Name, flag, addr, err)
		return
	}
	for _, p := range c.Ports {
		if p.Name == portName {
			if fmt.Sprint(p.ContainerPort) != port {
				t.Errorf("Deployment %s: container port %s is %d, but %s=%s", d.Name, portName, p.ContainerPort, flag, addr)
			}
			return
		}
	}
	t.Errorf("Deployment %s: no container port %s", d.Name, portName)
}

func checkProbe(t *testing.T, deploy, kind string, p *corev1.Probe, path string, c *corev1.Container, addr string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("Deployment %s: no HTTP %s probe", deploy, kind)
		return
	}
	port := p.HTTPGet.Port.String()
	for _, cp := range c.Ports {
		if cp.Name == port {
			port = fmt.Sprint(cp.ContainerPort)
		}
	}
	if p.HTTPGet.Path != path || !strings.HasSuffix(addr, ":"+port) {
		t.Errorf("Deployment %s: %s probe GET %s on port %s, want %s on the port of %s", deploy, kind, p.HTTPGet.Path, port, path, addr)
	}
}

func checkSecurity(t *testing.T, d *appsv1.Deployment, c *corev1.Container) {
	t.Helper()
	pod := d.Spec.Template.Spec.SecurityContext
	sc := c.SecurityContext
	switch {
	case pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot:
		t.Errorf("Deployment %s: pod securityContext lacks runAsNonRoot", d.Name)
	case pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("Deployment %s: pod seccompProfile is not RuntimeDefault", d.Name)
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("Deployment %s: container root filesystem is not read-only", d.Name)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("Deployment %s: container allows privilege escalation", d.Name)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("Deployment %s: container capabilities %+v, want drop ALL", d.Name, sc.Capabilities)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("Deployment %s: resources %+v lack CPU/memory requests or a memory limit", d.Name, c.Resources)
	}
}

// checkPullerImageFollows renders a copy of config/ whose config/default sets another image, as a platform engineer
// installing an image they built would, and checks that --puller-image follows it.
func checkPullerImageFollows(t *testing.T, root string) {
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(filepath.Join(root, "config"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(filepath.Join("/", rel), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	kpath := "/config/default/kustomization.yaml"
	k, err := mem.ReadFile(kpath)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(k), "  newName: ghcr.io/manta-dev/manta\n  newTag: latest\n",
		"  newName: registry.example.com/ml/manta\n  newTag: v1.2.3\n", 1)
	if edited == string(k) {
		t.Fatalf("%s has no images entry with newName ghcr.io/manta-dev/manta and newTag latest", kpath)
	}
	if err := mem.WriteFile(kpath, []byte(edited)); err != nil {
		t.Fatal(err)
	}
	objs := render(t, mem, "/config/default")
	const want = "registry.example.com/ml/manta:v1.2.3"
	for _, name := range []string{"manta-operator", "manta-apiserver"} {
		d := typed[appsv1.Deployment](t, objs, "Deployment", name)
		if got := onlyContainer(t, d).Image; got != want {
			t.Errorf("Deployment %s image %q, want %s", name, got, want)
		}
	}
	op := typed[appsv1.Deployment](t, objs, "Deployment", "manta-operator")
	if got := flagValues(onlyContainer(t, op).Args)["--puller-image"]; got != want {
		t.Errorf("--puller-image=%s, want %s (the operator's own image)", got, want)
	}
}

// bindInstaller binds the user the manifests are applied as to cluster-admin.
func bindInstaller(t *testing.T, admin *rest.Config) {
	kc, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kc.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: installer},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: installer}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The authorizer reads bindings from an informer: wait until this one applies, or the first applies are 403s.
	testutil.WaitRBAC(t, context.Background(), kc, installer, "", rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}})
}

// applyOrder is the order in which kinds are applied: namespaces and definitions before what lives in them, roles
// before their bindings.
var applyOrder = []string{"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Role",
	"ClusterRoleBinding", "RoleBinding", "ConfigMap", "Service", "Deployment", "ServiceMonitor"}

// applyAll applies every object with server-side apply and strict field validation as a user bound to
// cluster-admin (not system:masters, so the RBAC escalation checks on roles and bindings are evaluated), and fails
// on any warning (unknown fields, Pod Security violations of the restricted level manta-system enforces).
func applyAll(t *testing.T, admin *rest.Config, objs []*unstructured.Unstructured) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: installer, Groups: []string{"system:authenticated"}}
	warnings := &warningRecorder{}
	cfg.WarningHandler = warnings
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}

	sorted := slices.Clone(objs)
	slices.SortStableFunc(sorted, func(a, b *unstructured.Unstructured) int {
		return rank(t, a) - rank(t, b)
	})
	for _, o := range sorted {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		body, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
			FieldManager:    fieldManager,
			FieldValidation: metav1.FieldValidationStrict,
		})
		if err != nil {
			t.Errorf("apply %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			continue
		}
		if w := warnings.take(); len(w) > 0 {
			t.Errorf("apply %s %s/%s: warnings %q", o.GetKind(), o.GetNamespace(), o.GetName(), w)
		}
		if got.GetUID() == "" {
			t.Errorf("apply %s %s: no object came back", o.GetKind(), o.GetName())
		}
	}
}

func rank(t *testing.T, o *unstructured.Unstructured) int {
	i := slices.Index(applyOrder, o.GetKind())
	if i < 0 {
		t.Fatalf("config/default renders a %s (%s): add its kind to applyOrder", o.GetKind(), o.GetName())
	}
	return i
}

type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// checkPermissions asks the API server (SubjectAccessReview) whether each ServiceAccount may do everything its
// generated ClusterRole grants, the operator also leader election in manta-system, and that neither holds the
// other's permissions.
func checkPermissions(t *testing.T, root string, admin *rest.Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kc, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	type check struct {
		ns, group, resource, verb string
		allowed                   bool
	}
	can := func(sa string, c check) {
		t.Helper()
		resource, sub, _ := strings.Cut(c.resource, "/")
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + namespace + ":" + sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: c.ns, Group: c.group, Resource: resource, Subresource: sub, Verb: c.verb,
			},
		}}
		got, err := kc.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != c.allowed {
			t.Errorf("ServiceAccount %s: %s %s.%s in namespace %q: allowed=%v, want %v (%s)",
				sa, c.verb, c.resource, c.group, c.ns, got.Status.Allowed, c.allowed, got.Status.Reason)
		}
	}
	roles := map[string]*rbacv1.ClusterRole{
		"manta-operator":  generatedRole(t, root, "config/rbac/operator/role.yaml"),
		"manta-apiserver": generatedRole(t, root, "config/rbac/apiserver/role.yaml"),
	}
	// The bindings were applied just now and the authorizer learns them from an informer: wait until each applies
	// (its first rule, and the operator's leader election Role) before asking about every permission.
	for sa, role := range roles {
		if len(role.Rules) > 0 {
			testutil.WaitRBAC(t, ctx, kc, "system:serviceaccount:"+namespace+":"+sa, "ray-jobs", role.Rules[0])
		}
	}
	testutil.WaitRBAC(t, ctx, kc, "system:serviceaccount:"+namespace+":manta-operator", namespace,
		rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"update"}})
	for sa, role := range roles {
		if len(role.Rules) == 0 {
			t.Fatalf("generated ClusterRole %s has no rules", role.Name)
		}
		for _, r := range role.Rules {
			if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
				t.Fatalf("ClusterRole %s: rule %+v: teach this test about nonResourceURLs and resourceNames", role.Name, r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						can(sa, check{"ray-jobs", g, res, v, true})
					}
				}
			}
		}
	}
	for _, c := range []check{
		{namespace, "coordination.k8s.io", "leases", "get", true},
		{namespace, "coordination.k8s.io", "leases", "create", true},
		{namespace, "coordination.k8s.io", "leases", "update", true},
		{namespace, "", "events", "create", true},
		{namespace, "", "events", "patch", true},
		{"default", "coordination.k8s.io", "leases", "update", false},
		{"default", "", "secrets", "list", false}, // Ray auth token Secrets are read and written by name
		{"default", "", "secrets", "watch", false},
		{"default", "", "secrets", "delete", false},     // the token Secret it made goes with its cluster (owner reference)
		{"default", "", "services/proxy", "get", false}, // only with --use-kubernetes-proxy: manta-operator-proxy
		{"default", "", "pods/proxy", "get", false},
	} {
		can("manta-operator", c)
	}
	for _, c := range []check{
		{namespace, "coordination.k8s.io", "leases", "update", false},
		{"default", "", "pods", "create", false},        // the operator's, not the API server's
		{"default", "", "secrets", "list", false},       // Ray auth tokens are read by name
		{"default", "", "services/proxy", "get", false}, // only with --use-kubernetes-proxy: manta-apiserver-proxy
	} {
		can("manta-apiserver", c)
	}
}

var flagRE = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)`)

// checkFlags runs `manta <args> --help` for each Deployment: cobra parses every flag (name and value) before it
// prints help, so an unknown flag or a bad value fails; and each flag must be listed in the help.
func checkFlags(t *testing.T, bin string, objs []*unstructured.Unstructured) {
	for _, name := range []string{"manta-operator", "manta-apiserver"} {
		d := typed[appsv1.Deployment](t, objs, "Deployment", name)
		c := onlyContainer(t, d)
		if len(c.Command) > 0 {
			t.Errorf("Deployment %s overrides the image's entrypoint /manta with %v", name, c.Command)
		}
		if len(c.Args) == 0 || strings.HasPrefix(c.Args[0], "-") {
			t.Fatalf("Deployment %s: args %v do not start with a subcommand", name, c.Args)
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, append(slices.Clone(c.Args), "--help")...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("manta %s --help: %v\n%s%s", strings.Join(c.Args, " "), err, stderr.String(), stdout.String())
			continue
		}
		if !strings.Contains(stdout.String(), "\n  manta "+c.Args[0]+" [flags]") {
			t.Errorf("manta %s --help did not print the %s command's help:\n%s", c.Args[0], c.Args[0], stdout.String())
			continue
		}
		accepted := map[string]bool{}
		for _, line := range strings.Split(stdout.String(), "\n") {
			if m := flagRE.FindStringSubmatch(line); m != nil {
				accepted[m[1]] = true
			}
		}
		if !accepted["help"] {
			t.Fatalf("found no flags in the help of manta %s:\n%s", c.Args[0], stdout.String())
		}
		for _, a := range c.Args[1:] {
			flag, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !strings.HasPrefix(a, "--") || !accepted[flag] {
				t.Errorf("Deployment %s: argument %q is not a flag of manta %s (flags: %v)", name, a, c.Args[0], slices.Sorted(maps.Keys(accepted)))
			}
		}
	}
}
