package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
	"github.com/manta-dev/manta/internal/version"
)

// helmTemplate renders charts/manta with bin/helm (built with the control plane from hack/tools/k8s by `make
// tools`) as release in namespace ns with the given values, CRDs included, as `helm install` would apply them.
func helmTemplate(t *testing.T, root, release, ns string, values map[string]any) ([]*unstructured.Unstructured, error) {
	t.Helper()
	data, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	vf := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(vf, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return helmTemplateFile(t, root, release, ns, vf)
}

// helmTemplateFile is helmTemplate with the values in files, as `helm install -f a.yaml -f b.yaml` reads them.
func helmTemplateFile(t *testing.T, root, release, ns string, files ...string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args := []string{"template", release, filepath.Join(root, "charts", "manta"), "--namespace", ns, "--include-crds"}
	for _, f := range files {
		args = append(args, "--values", f)
	}
	cmd := exec.Command(filepath.Join(root, "bin", "helm"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	if err := cmd.Run(); err != nil {
		return nil, errors.New(strings.TrimSpace(stderr.String()))
	}
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(&stdout))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("helm template output: %v\n%s", err, doc)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs, nil
}

func mustHelmTemplate(t *testing.T, root, release, ns string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := helmTemplate(t, root, release, ns, values)
	if err != nil {
		t.Fatalf("helm template %s with %v: %v", release, values, err)
	}
	return objs
}

// nonDefault are values that change every switch of the chart from its default.
var nonDefault = map[string]any{
	"image":           map[string]any{"repository": "registry.example.com/ml/manta", "tag": "v9.9.9", "pullPolicy": "Always"},
	"watchNamespaces": []string{"team-a", "team-b"},
	"operator": map[string]any{
		"leaderElection": false, "useKubernetesProxy": true, "clusterDomain": "corp.local",
		"defaultPodTemplate": "ml-system/ray-defaults", "reconcileConcurrency": 3, "qps": 50, "burst": 60,
		"leaseDuration": "20s", "renewDeadline": "12s", "retryPeriod": "3s", "eventQps": 10, "eventBurst": 20,
		"rayTimeout": "5s", "gcPercent": 80, "adaptiveProcs": false, "statusCoalesceWindow": "0s", "startPhaseLateThreshold": "45s", "idleCheckInterval": "30s", "gcsFtRedisCleanup": false, "batchScheduler": "volcano",
		"disableOptimizations": []string{"pod-update-filter", "metadata-writes"},
		"metricsPort":          9090, "healthProbePort": 9091, "nodeSelector": map[string]string{"kubernetes.io/os": "linux"},
		"imagePull": map[string]any{"nodeSelector": "pool in (pullers, gpu),!no-pull", "priorityClassName": "image-pullers",
			"tolerateAllTaints": true, "tolerations": []string{"nvidia.com/gpu:NoSchedule", "dedicated=ray"}},
	},
	"apiserver":      map[string]any{"enabled": false},
	"serviceMonitor": map[string]any{"enabled": true, "interval": "15s", "labels": map[string]string{"release": "prom"}},
	"metrics":        map[string]any{"enabled": false},
}

// TestChart renders charts/manta with default and non-default values, checks what it renders against
// config/default (the same RBAC, the same Deployments) and the flags against the manta binary, refuses bad
// values, then installs both renderings server-side on the dev cluster and sees the operators' pods scheduled and
// their ServiceAccounts holding the permissions the generated roles grant.
func TestChart(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	root := testutil.MustRepoRoot(t)
	kustomized := render(t, filesys.MakeFsOnDisk(), filepath.Join(root, "config", "default"))
	def := mustHelmTemplate(t, root, "manta", namespace, map[string]any{})
	custom := mustHelmTemplate(t, root, "ml", "ml-system", nonDefault)

	t.Run("version", func(t *testing.T) { checkChartVersion(t, root, def) })
	t.Run("same RBAC as config/default", func(t *testing.T) { checkSameRBAC(t, kustomized, def) })
	t.Run("same CRDs as config/crd", func(t *testing.T) { checkSameCRDs(t, kustomized, def) })
	t.Run("defaults", func(t *testing.T) { checkChartDefaults(t, kustomized, def) })
	t.Run("non-default values", func(t *testing.T) { checkChartNonDefault(t, root, custom) })
	t.Run("bad values fail", func(t *testing.T) { checkBadValues(t, root) })
	kubeRayFile := filepath.Join(root, "test", "deploy", "testdata", "kuberay-values.yaml")
	kubeRay, err := helmTemplateFile(t, root, kubeRayRelease, kubeRayNS, kubeRayFile)
	if err != nil {
		t.Fatalf("helm template with testdata/kuberay-values.yaml: %v", err)
	}
	kubeRayConfig, err := helmTemplateFile(t, root, kubeRayRelease, kubeRayNS, kubeRayFile, filepath.Join(root, "test", "deploy", "testdata", "kuberay-values-config.yaml"))
	if err != nil {
		t.Fatalf("helm template with testdata/kuberay-values.yaml and kuberay-values-config.yaml: %v", err)
	}
	t.Run("KubeRay values", func(t *testing.T) { checkKubeRayValues(t, kubeRay) })
	t.Run("KubeRay configuration file", func(t *testing.T) { checkKubeRayConfigFile(t, kubeRayConfig) })
	t.Run("KubeRay switches", func(t *testing.T) { checkKubeRaySwitches(t, root) })
	t.Run("KubeRay values refused", func(t *testing.T) { checkKubeRayRefusals(t, root) })
	t.Run("KubeRay feature gates", func(t *testing.T) { checkFeatureGateValues(t, root) })

	bin := testutil.BuildManta(t)
	t.Run("flags", func(t *testing.T) {
		checkFlags(t, bin, def)
		checkFlagsOf(t, bin, custom, "ml-manta-operator", def)
		checkEveryOperatorFlagIsAValue(t, bin, find(custom, "Deployment", "ml-manta-operator"), find(kubeRay, "Deployment", kubeRayOp), find(kubeRayConfig, "Deployment", kubeRayOp))
		checkManagerArgs(t, bin, kubeRay)
		checkManagerArgs(t, bin, kubeRayConfig)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// No CRDs from config/crd: the chart installs its own.
	dc, err := devcluster.Start(ctx, devcluster.Options{Nodes: 1, CRDDirs: []string{}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dc.Stop(); err != nil {
			t.Errorf("stop dev cluster: %v", err)
		}
	})
	cfg := dc.RESTConfig()
	kc := kubernetes.NewForConfigOrDie(cfg)
	bindInstaller(t, cfg)
	nsObj := find(kustomized, "Namespace", namespace) // restricted Pod Security, as config/default makes it
	mlNS := nsObj.DeepCopy()
	mlNS.SetName("ml-system")
	for _, name := range []string{"team-a", "team-b", "other"} {
		if err := testutil.CreateNamespaceWith(ctx, kc, name); err != nil {
			t.Fatal(err)
		}
	}
	installServiceMonitorCRD(t, ctx, cfg)

	t.Run("install defaults", func(t *testing.T) {
		applyAll(t, cfg, append([]*unstructured.Unstructured{nsObj}, def...))
		waitScheduled(t, ctx, kc, namespace, "manta")
		checkPermissions(t, root, cfg)
	})
	t.Run("install non-default", func(t *testing.T) {
		applyAll(t, cfg, append([]*unstructured.Unstructured{mlNS}, custom...))
		waitScheduled(t, ctx, kc, "ml-system", "ml")
		checkNamespacedPermissions(t, ctx, root, kc)
	})
	t.Run("install KubeRay values", func(t *testing.T) {
		rayNS := nsObj.DeepCopy()
		rayNS.SetName(kubeRayNS)
		installKubeRayValues(t, ctx, cfg, kc, rayNS, kubeRay)
		// The same release with configuration.enabled, as `helm upgrade` would apply it: the ConfigMap and the changed Deployment.
		applyAll(t, cfg, kubeRayConfig)
	})
}

func checkChartVersion(t *testing.T, root string, objs []*unstructured.Unstructured) {
	data, err := os.ReadFile(filepath.Join(root, "charts", "manta", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion != version.Version || "v"+chart.Version != version.Version {
		t.Errorf("Chart.yaml version %q, appVersion %q: want %s (internal/version.Version) for both", chart.Version, chart.AppVersion, version.Version)
	}
	op := typed[appsv1.Deployment](t, objs, "Deployment", "manta-operator")
	if got, want := onlyContainer(t, op).Image, "ghcr.io/manta-dev/manta:"+version.Version; got != want {
		t.Errorf("operator image %s, want %s: the image carries the chart's version", got, want)
	}
}

// rbacKinds are the kinds that grant permissions; the chart and config/default must render the same set of them.
var rbacKinds = []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// grants reduces the RBAC objects to what grants permissions: rules, roleRef and subjects, keyed by kind/ns/name.
func grants(t *testing.T, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, o := range objs {
		if !slices.Contains(rbacKinds, o.GetKind()) {
			continue
		}
		var keep any
		switch o.GetKind() {
		case "ClusterRole", "Role":
			var r rbacv1.ClusterRole
			if err := runtimeFrom(o, &r); err != nil {
				t.Fatal(err)
			}
			keep = r.Rules
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := runtimeFrom(o, &b); err != nil {
				t.Fatal(err)
			}
			keep = []any{b.RoleRef, b.Subjects}
		}
		data, err := yaml.Marshal(keep)
		if err != nil {
			t.Fatal(err)
		}
		m[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = string(data)
	}
	return m
}

func runtimeFrom(u *unstructured.Unstructured, out any) error {
	data, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	return yaml.Unmarshal(data, out)
}

func checkSameRBAC(t *testing.T, kustomized, chart []*unstructured.Unstructured) {
	want, got := grants(t, kustomized), grants(t, chart)
	if len(want) == 0 {
		t.Fatal("config/default renders no RBAC objects")
	}
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("the chart renders no %s", k)
		} else if g != w {
			t.Errorf("%s differs:\nconfig/default:\n%s\nchart:\n%s", k, w, g)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("the chart renders %s, which config/default does not", k)
		}
	}
}

func checkSameCRDs(t *testing.T, kustomized, chart []*unstructured.Unstructured) {
	var n int
	for _, k := range kustomized {
		if k.GetKind() != "CustomResourceDefinition" {
			continue
		}
		n++
		c := find(chart, k.GetKind(), k.GetName())
		if c == nil {
			t.Errorf("the chart has no CRD %s: run make generate", k.GetName())
			continue
		}
		if !equalJSON(c.Object["spec"], k.Object["spec"]) {
			t.Errorf("CRD %s in charts/manta/crds differs from config/crd: run make generate", k.GetName())
		}
	}
	if n == 0 || n != len(kinds(chart, "CustomResourceDefinition")) {
		t.Errorf("config/default has %d CRDs, the chart %d", n, len(kinds(chart, "CustomResourceDefinition")))
	}
}

func kinds(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// checkChartDefaults checks that the default rendering runs the operator and the API server as config/default
// does: same args (the chart spells out every flag's default), ports, probes, security context and resources.
func checkChartDefaults(t *testing.T, kustomized, chart []*unstructured.Unstructured) {
	for _, name := range []string{"manta-operator", "manta-apiserver"} {
		want := typed[appsv1.Deployment](t, kustomized, "Deployment", name)
		got := typed[appsv1.Deployment](t, chart, "Deployment", name)
		wc, gc := onlyContainer(t, want), onlyContainer(t, got)
		checkSecurity(t, got, gc)
		if !equalJSON(wc.Ports, gc.Ports) || !equalJSON(wc.LivenessProbe, gc.LivenessProbe) ||
			!equalJSON(wc.ReadinessProbe, gc.ReadinessProbe) || !equalJSON(wc.Resources, gc.Resources) ||
			!equalJSON(wc.SecurityContext, gc.SecurityContext) || !equalJSON(want.Spec.Template.Spec.SecurityContext, got.Spec.Template.Spec.SecurityContext) {
			t.Errorf("Deployment %s: ports, probes, resources or security context differ from config/default", name)
		}
		wa, ga := flagValues(wc.Args), flagValues(gc.Args)
		for f, v := range wa {
			if f == "--puller-image" {
				continue // config/default runs :latest, the chart its own version; checked in "version"
			}
			if ga[f] != v {
				t.Errorf("Deployment %s: %s=%q, config/default has %q", name, f, ga[f], v)
			}
		}
	}
	op := onlyContainer(t, typed[appsv1.Deployment](t, chart, "Deployment", "manta-operator"))
	if a := flagValues(op.Args); a["--puller-image"] != op.Image || a["--watch-namespace"] != "" {
		t.Errorf("operator args %v: want --puller-image=%s and no --watch-namespace", op.Args, op.Image)
	}
	checkPort(t, typed[appsv1.Deployment](t, chart, "Deployment", "manta-operator"), op, "--metrics-addr", flagValues(op.Args), "metrics")
	svc := typed[corev1.Service](t, chart, "Service", "manta-operator-metrics")
	checkSelects(t, svc, typed[appsv1.Deployment](t, chart, "Deployment", "manta-operator"), "metrics")
	checkSelects(t, typed[corev1.Service](t, chart, "Service", "manta-apiserver"), typed[appsv1.Deployment](t, chart, "Deployment", "manta-apiserver"), "http")
	if sm := kinds(chart, "ServiceMonitor"); len(sm) > 0 {
		t.Errorf("a ServiceMonitor by default: %v", sm[0].GetName())
	}
}

func checkSelects(t *testing.T, svc *corev1.Service, d *appsv1.Deployment, port string) {
	t.Helper()
	if len(svc.Spec.Selector) == 0 {
		t.Errorf("Service %s selects nothing", svc.Name)
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service %s selector %s=%s does not select Deployment %s's pods", svc.Name, k, v, d.Name)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != port {
		t.Errorf("Service %s ports %+v: want one targeting %s", svc.Name, svc.Spec.Ports, port)
	}
}

func checkChartNonDefault(t *testing.T, root string, objs []*unstructured.Unstructured) {
	d := typed[appsv1.Deployment](t, objs, "Deployment", "ml-manta-operator")
	c := onlyContainer(t, d)
	const img = "registry.example.com/ml/manta:v9.9.9"
	wantArgs := map[string]string{
		"--puller-image": img, "--metrics-secure": "true", "--metrics-addr": ":9090", "--health-probe-bind-address": ":9091",
		"--enable-leader-election": "false", "--leader-election-namespace": "ml-system", "--use-kubernetes-proxy": "true",
		"--cluster-domain": "corp.local", "--default-pod-template": "ml-system/ray-defaults", "--reconcile-concurrency": "3",
		"--qps": "50", "--burst": "60", "--watch-namespace": "team-a,team-b",
		"--leader-elect-lease-duration": "20s", "--leader-elect-renew-deadline": "12s", "--leader-elect-retry-period": "3s",
		"--event-qps": "10", "--event-burst": "20", "--ray-timeout": "5s", "--gc-percent": "80", "--gcs-ft-redis-cleanup": "false",
		"--adaptive-procs": "false", "--status-coalesce-window": "0s", "--start-phase-late-threshold": "45s", "--idle-check-interval": "30s", "--enable-metrics": "false", "--batch-scheduler": "volcano", "--disable-optimization": "pod-update-filter,metadata-writes",
		"--image-pull-node-selector": "pool in (pullers, gpu),!no-pull", "--image-pull-priority-class": "image-pullers",
		"--image-pull-tolerate-all-taints": "true", "--image-pull-tolerations": "nvidia.com/gpu:NoSchedule,dedicated=ray",
	}
	if got := flagValues(c.Args); !equalJSON(got, wantArgs) {
		t.Errorf("operator args %v, want %v", got, wantArgs)
	}
	if c.Image != img || c.ImagePullPolicy != corev1.PullAlways || d.Spec.Template.Spec.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("operator image %s (%s), nodeSelector %v", c.Image, c.ImagePullPolicy, d.Spec.Template.Spec.NodeSelector)
	}
	args := flagValues(c.Args)
	checkPort(t, d, c, "--metrics-addr", args, "metrics")
	checkPort(t, d, c, "--health-probe-bind-address", args, "health")
	checkProbe(t, d.Name, "liveness", c.LivenessProbe, "/healthz", c, args["--health-probe-bind-address"])
	for _, o := range objs {
		if strings.Contains(o.GetName(), "apiserver") {
			t.Errorf("apiserver.enabled=false renders %s %s", o.GetKind(), o.GetName())
		}
	}

	// Namespaced permissions: a Role in each watched namespace with every generated rule on namespaced resources,
	// and a ClusterRole left with only the cluster-scoped ones.
	gen := generatedRole(t, root, "config/rbac/operator/role.yaml")
	cr := typed[rbacv1.ClusterRole](t, objs, "ClusterRole", "ml-manta-operator")
	for _, r := range cr.Rules {
		if len(r.Resources) != 1 || !slices.Contains([]string{"nodes", "tokenreviews", "subjectaccessreviews"}, r.Resources[0]) {
			t.Errorf("ClusterRole %s with watchNamespaces grants %v: only cluster-scoped resources belong there", cr.Name, r.Resources)
		}
	}
	for _, ns := range []string{"team-a", "team-b"} {
		var role *rbacv1.Role
		for _, u := range kinds(objs, "Role") {
			if u.GetNamespace() == ns && u.GetName() == "ml-manta-operator" {
				role = &rbacv1.Role{}
				if err := runtimeFrom(u, role); err != nil {
					t.Fatal(err)
				}
			}
		}
		if role == nil {
			t.Errorf("no Role ml-manta-operator in watched namespace %s", ns)
			continue
		}
		if n, want := countResources(role.Rules)+countResources(cr.Rules), countResources(gen.Rules); n != want {
			t.Errorf("Role %s/%s and ClusterRole %s grant %d (group, resource) pairs together, the generated role %d", ns, role.Name, cr.Name, n, want)
		}
	}
	// Two watched namespaces, each with the operator's Role and its proxy Role (useKubernetesProxy), and leader election.
	if kinds(objs, "ClusterRoleBinding") == nil || len(kinds(objs, "RoleBinding")) != 5 {
		t.Errorf("bindings: %d ClusterRoleBindings, %d RoleBindings", len(kinds(objs, "ClusterRoleBinding")), len(kinds(objs, "RoleBinding")))
	}

	sms := kinds(objs, "ServiceMonitor")
	if len(sms) != 1 {
		t.Fatalf("serviceMonitor.enabled renders %d ServiceMonitors", len(sms))
	}
	sm := sms[0]
	svc := typed[corev1.Service](t, objs, "Service", "ml-manta-operator-metrics")
	checkSelects(t, svc, d, "metrics")
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range sel {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, the metrics Service has %v", k, v, svc.Labels)
		}
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(sel) == 0 || len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" || eps[0].(map[string]any)["interval"] != "15s" || sm.GetLabels()["release"] != "prom" {
		t.Errorf("ServiceMonitor %v", sm.Object)
	}
}

func countResources(rules []rbacv1.PolicyRule) int {
	n := 0
	for _, r := range rules {
		n += len(r.APIGroups) * len(r.Resources)
	}
	return n
}

// checkBadValues: values.schema.json makes helm refuse wrong types, unknown keys and bad enums.
func checkBadValues(t *testing.T, root string) {
	for name, values := range map[string]map[string]any{
		"unknown key":      {"operator": map[string]any{"watchNamespace": "x"}},
		"wrong type":       {"operator": map[string]any{"qps": "fast"}},
		"bad enum":         {"apiserver": map[string]any{"auth": "basic"}},
		"bad port":         {"operator": map[string]any{"metricsPort": 70000}},
		"bad namespace":    {"watchNamespaces": []string{"Team_A"}},
		"bad pod template": {"operator": map[string]any{"defaultPodTemplate": "no-namespace"}},
		"bad duration":     {"operator": map[string]any{"leaseDuration": "15"}},
	} {
		_, err := helmTemplate(t, root, "manta", namespace, values)
		if err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("%s %v: helm template error %v, want a values schema error", name, values, err)
		}
	}
}

// checkFlagsOf runs checkFlags on the operator Deployment name of objs, renamed to what checkFlags looks for (with
// the API server of def, as checkFlags checks both).
func checkFlagsOf(t *testing.T, bin string, objs []*unstructured.Unstructured, name string, def []*unstructured.Unstructured) {
	d := find(objs, "Deployment", name)
	if d == nil {
		t.Fatalf("no Deployment %s", name)
	}
	op := d.DeepCopy()
	op.SetName("manta-operator")
	checkFlags(t, bin, []*unstructured.Unstructured{op, find(def, "Deployment", "manta-apiserver")})
}

// installServiceMonitorCRD installs a schemaless stand-in for the Prometheus Operator's ServiceMonitor CRD, so the
// non-default rendering applies whole.
func installServiceMonitorCRD(t *testing.T, ctx context.Context, cfg *rest.Config) {
	ac := apiextensionsclient.NewForConfigOrDie(cfg)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "servicemonitors.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "servicemonitors", Singular: "servicemonitor", Kind: "ServiceMonitor", ListKind: "ServiceMonitorList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
	if _, err := ac.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the ServiceMonitor CRD is established", func() (bool, string) {
		got, err := ac.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, ""
			}
		}
		return false, "not established"
	})
}

// waitScheduled waits until the release's operator Deployment has a pod bound to a (kwok) node and Running.
func waitScheduled(t *testing.T, ctx context.Context, kc kubernetes.Interface, ns, release string) {
	t.Helper()
	sel := "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=operator"
	testutil.Eventually(t, 2*time.Minute, "the operator pod of release "+release+" runs on a node", func() (bool, string) {
		pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
				return true, ""
			}
		}
		return false, "pods: " + podSummary(pods.Items)
	})
}

func podSummary(pods []corev1.Pod) string {
	var s []string
	for _, p := range pods {
		s = append(s, p.Name+" on "+p.Spec.NodeName+" "+string(p.Status.Phase))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// checkNamespacedPermissions: with watchNamespaces, the operator may do what the generated role grants in the
// watched namespaces, read nodes cluster-wide, and nothing on namespaced resources elsewhere.
// clusterScoped are the resources of the operator's role that have no namespace: reading nodes for ImagePullJobs,
// and the reviews that authenticate and authorise /metrics callers. A ClusterRole grants them everywhere.
var clusterScoped = map[string]bool{"nodes": true, "tokenreviews": true, "subjectaccessreviews": true}

func checkNamespacedPermissions(t *testing.T, ctx context.Context, root string, kc kubernetes.Interface) {
	const user = "system:serviceaccount:ml-system:ml-manta-operator"
	gen := generatedRole(t, root, "config/rbac/operator/role.yaml")
	testutil.WaitRBAC(t, ctx, kc, user, "team-a", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}})
	testutil.WaitRBAC(t, ctx, kc, user, "team-b", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}})
	testutil.WaitRBAC(t, ctx, kc, user, "", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}})
	for _, r := range gen.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if !allowed(t, ctx, kc, user, "team-b", g, res, v) {
						t.Errorf("%s may not %s %s.%s in watched namespace team-b", user, v, res, g)
					}
					if !clusterScoped[res] && allowed(t, ctx, kc, user, "other", g, res, v) {
						t.Errorf("%s may %s %s.%s in namespace other, which it does not watch", user, v, res, g)
					}
				}
			}
		}
	}
}

func allowed(t *testing.T, ctx context.Context, kc kubernetes.Interface, user, ns, group, resource, verb string) bool {
	t.Helper()
	res, sub, _ := strings.Cut(resource, "/")
	got, err := kc.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: []string{"system:serviceaccounts", "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Group: group, Resource: res, Subresource: sub, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Status.Allowed
}

// chartlessFlags are the operator's flags the chart does not set, each for its reason.
var chartlessFlags = map[string]string{
	"help":       "not a setting",
	"pprof-addr": "a profiling endpoint for benchmarks, not for a deployed operator",
	// The chart always serves metrics over HTTPS with authentication, and says so with --metrics-secure=true (which
	// also keeps /manager from serving them as KubeRay does).
	"metrics-as-kuberay": "the chart always serves metrics over HTTPS with authentication (--metrics-secure=true)",
	// KubeRay's older spelling of --batch-scheduler=volcano; the chart's batchScheduler value sets the newer flag.
	"enable-batch-scheduler": "the chart sets --batch-scheduler",
	"forced-cluster-upgrade": "deprecated in KubeRay, where it does nothing; KubeRay's chart has no value for it",
	"kubeconfig":             "the pod reaches its cluster with its ServiceAccount (in-cluster config); KubeRay's chart has no value for it",
}

// checkEveryOperatorFlagIsAValue: every flag of `manta operator` (but chartlessFlags and the logger's global flags)
// is set by one of the renderings' operator Deployments (non-default, KubeRay's values, KubeRay's with
// configuration.enabled), so each is a chart value and a new flag cannot be forgotten in the chart.
func checkEveryOperatorFlagIsAValue(t *testing.T, bin string, deployments ...*unstructured.Unstructured) {
	out, err := exec.Command(bin, "operator", "--help").Output()
	if err != nil {
		t.Fatalf("manta operator --help: %v", err)
	}
	local, _, _ := strings.Cut(string(out), "Global Flags:")
	set := map[string]string{}
	for _, u := range deployments {
		if u == nil {
			t.Fatal("a rendering has no operator Deployment")
		}
		maps.Copy(set, flagValues(onlyContainer(t, typed[appsv1.Deployment](t, []*unstructured.Unstructured{u}, "Deployment", u.GetName())).Args))
	}
	n := 0
	for _, line := range strings.Split(local, "\n") {
		m := flagRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n++
		if _, ok := set["--"+m[1]]; !ok && chartlessFlags[m[1]] == "" {
			t.Errorf("manta operator --%s is not set by any chart value", m[1])
		}
	}
	if n < 10 {
		t.Fatalf("found only %d flags in manta operator --help:\n%s", n, out)
	}
}

// TestSecurityChartProxyRoles: the chart grants services/proxy and pods/proxy only to a binary run with
// useKubernetesProxy, and then exactly the generated proxy role, in each watched namespace or cluster-wide.
func TestSecurityChartProxyRoles(t *testing.T) {
	root := testutil.MustRepoRoot(t)
	opProxy := generatedRole(t, root, "config/rbac/operator-proxy/role.yaml")
	apiProxy := generatedRole(t, root, "config/rbac/apiserver-proxy/role.yaml")
	proxyRules := func(objs []*unstructured.Unstructured) map[string][]rbacv1.PolicyRule {
		out := map[string][]rbacv1.PolicyRule{}
		for _, o := range objs {
			if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
				continue
			}
			var r rbacv1.ClusterRole
			if err := runtimeFrom(o, &r); err != nil {
				t.Fatal(err)
			}
			for _, rule := range r.Rules {
				for _, res := range rule.Resources {
					if strings.HasSuffix(res, "/proxy") {
						k := o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
						out[k] = r.Rules
					}
				}
			}
		}
		return out
	}
	bound := func(objs []*unstructured.Unstructured, kind, ns, name, sa string) bool {
		for _, o := range kinds(objs, kind+"Binding") {
			var b rbacv1.RoleBinding
			if err := runtimeFrom(o, &b); err != nil {
				t.Fatal(err)
			}
			if o.GetNamespace() == ns && b.RoleRef.Kind == kind && b.RoleRef.Name == name &&
				slices.Contains(b.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: namespace}) {
				return true
			}
		}
		return false
	}
	for _, watch := range [][]string{nil, {"team-a", "team-b"}} {
		off := mustHelmTemplate(t, root, "manta", namespace, map[string]any{"watchNamespaces": watch})
		if got := proxyRules(off); len(got) > 0 {
			t.Errorf("watchNamespaces %v, useKubernetesProxy off: the chart grants proxy verbs in %v", watch, slices.Sorted(maps.Keys(got)))
		}
		on := mustHelmTemplate(t, root, "manta", namespace, map[string]any{"watchNamespaces": watch,
			"operator": map[string]any{"useKubernetesProxy": true}, "apiserver": map[string]any{"useKubernetesProxy": true}})
		want := map[string][]rbacv1.PolicyRule{"ClusterRole /manta-apiserver-proxy": apiProxy.Rules}
		if len(watch) == 0 {
			want["ClusterRole /manta-operator-proxy"] = opProxy.Rules
		}
		for _, ns := range watch {
			want["Role "+ns+"/manta-operator-proxy"] = opProxy.Rules
		}
		got := proxyRules(on)
		if !equalJSON(got, want) {
			t.Errorf("watchNamespaces %v, useKubernetesProxy on: proxy rules\n%v\nwant\n%v", watch, got, want)
		}
		if !bound(on, "ClusterRole", "", "manta-apiserver-proxy", "manta-apiserver") {
			t.Errorf("watchNamespaces %v: manta-apiserver-proxy is not bound to the API server's ServiceAccount", watch)
		}
		if len(watch) == 0 && !bound(on, "ClusterRole", "", "manta-operator-proxy", "manta-operator") {
			t.Error("manta-operator-proxy is not bound to the operator's ServiceAccount")
		}
		for _, ns := range watch {
			if !bound(on, "Role", ns, "manta-operator-proxy", "manta-operator") {
				t.Errorf("the Role %s/manta-operator-proxy is not bound to the operator's ServiceAccount", ns)
			}
		}
		// Only one of the two binaries in proxy mode: only it gets the proxy verbs.
		opOnly := mustHelmTemplate(t, root, "manta", namespace, map[string]any{"watchNamespaces": watch, "operator": map[string]any{"useKubernetesProxy": true}})
		for k := range proxyRules(opOnly) {
			if strings.Contains(k, "apiserver") {
				t.Errorf("watchNamespaces %v, only the operator in proxy mode: the chart renders %s", watch, k)
			}
		}
	}
	// Whatever the values, no role lists or watches Secrets: the API server gets Ray auth token Secrets by name;
	// the operator also creates and updates them (the token Secret it makes, tlsOptions' CA), never by listing.
	for _, o := range kinds(mustHelmTemplate(t, root, "manta", namespace, map[string]any{}), "ClusterRole") {
		var r rbacv1.ClusterRole
		if err := runtimeFrom(o, &r); err != nil {
			t.Fatal(err)
		}
		for _, rule := range r.Rules {
			want := []string{"get"}
			if r.Name == "manta-operator" {
				want = []string{"create", "get", "update"}
			}
			if slices.Contains(rule.Resources, "secrets") && !slices.Equal(rule.Verbs, want) {
				t.Errorf("ClusterRole %s grants %v on secrets: want %v, by name (no list or watch)", r.Name, rule.Verbs, want)
			}
		}
	}
}

// TestSecurityChartMetrics: the ServiceMonitor scrapes https with Prometheus' bearer token, and the chart ships
// the ClusterRole that token's ServiceAccount needs.
func TestSecurityChartMetrics(t *testing.T) {
	root := testutil.MustRepoRoot(t)
	objs := mustHelmTemplate(t, root, "manta", namespace, map[string]any{"serviceMonitor": map[string]any{"enabled": true}})
	sms := kinds(objs, "ServiceMonitor")
	if len(sms) != 1 {
		t.Fatalf("%d ServiceMonitors", len(sms))
	}
	eps, _, _ := unstructured.NestedSlice(sms[0].Object, "spec", "endpoints")
	if len(eps) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v", eps)
	}
	ep := eps[0].(map[string]any)
	if ep["scheme"] != "https" || ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
		t.Errorf("ServiceMonitor endpoint %v: want scheme https with the ServiceAccount token", ep)
	}
	reader := typed[rbacv1.ClusterRole](t, objs, "ClusterRole", "manta-metrics-reader")
	if !equalJSON(reader.Rules, []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}) {
		t.Errorf("ClusterRole manta-metrics-reader rules %v: want get on /metrics", reader.Rules)
	}
	op := onlyContainer(t, typed[appsv1.Deployment](t, objs, "Deployment", "manta-operator"))
	if v, ok := flagValues(op.Args)["--metrics-secure"]; ok && v != "true" {
		t.Errorf("the chart runs the operator with --metrics-secure=%s", v)
	}
}
