// Package oracle is the differential test of issue 11: KubeRay's own operator (bin/kuberay-operator, built from the
// module pinned in hack/tools/kuberay) and Manta's RayCluster controller each run against their own kube-apiserver,
// get the same RayClusters (every sample of the pinned module), and what they write (pods, Services, RBAC, events,
// status) is normalised and compared field by field. A difference fails the test unless differences.yaml lists it
// with its reason.
package oracle

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/builder"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

const kuberayModule = "github.com/ray-project/kuberay/ray-operator"

// side is one operator with its own control plane.
type side struct {
	name string
	cl   client.Client
}

func TestOracle(t *testing.T) {
	root := testutil.MustRepoRoot(t)
	modDir := kuberayModuleDir(t, root)
	diffs, err := loadDifferences(filepath.Join(root, "test", "oracle", "differences.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	samples := loadSamples(t, filepath.Join(modDir, "config", "samples"), "")
	if len(samples) < 30 {
		t.Fatalf("only %d RayCluster specs found in the pinned module's samples", len(samples))
	}
	// The RayClusters the e2e tests run: the compatibility corpus (test/e2e/raycluster_samples_test.go) and the
	// clusters the e2e tests build.
	samples = append(samples, loadSamples(t, filepath.Join(root, "..", "shared", "compat", "kuberay", "samples"), "e2e/")...)
	samples = append(samples, e2eClusters(t)...)

	var kuberay, manta side
	var wg sync.WaitGroup
	wg.Go(func() { kuberay = startKubeRay(t, root, modDir) })
	wg.Go(func() { manta = startManta(t) })
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	var mu sync.Mutex
	var report []sampleReport
	t.Run("samples", func(t *testing.T) {
		for i, s := range samples {
			t.Run(s.name, func(t *testing.T) {
				t.Parallel()
				ns := fmt.Sprintf("s%02d", i)
				found := runSample(t, ns, s, kuberay, manta)
				var unlisted []string
				for _, d := range found {
					if !diffs.allows(s.name, d) {
						unlisted = append(unlisted, d.String())
					}
				}
				mu.Lock()
				report = append(report, sampleReport{Sample: s.name, Diffs: found})
				mu.Unlock()
				if len(unlisted) > 0 {
					t.Errorf("%d differences from KubeRay not in differences.yaml:\n%s", len(unlisted), strings.Join(unlisted, "\n"))
				}
			})
		}
	})
	t.Run("scenarios", func(t *testing.T) {
		for i, sc := range scenarios() {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				ns := fmt.Sprintf("c%02d", i)
				for stepName, found := range runScenario(t, ns, sc, kuberay, manta) {
					name := "scenario/" + sc.name + "/" + stepName
					var unlisted []string
					for _, d := range found {
						if !diffs.allows(name, d) {
							unlisted = append(unlisted, d.String())
						}
					}
					mu.Lock()
					report = append(report, sampleReport{Sample: name, Diffs: found})
					mu.Unlock()
					if len(unlisted) > 0 {
						t.Errorf("%s: %d differences from KubeRay not in differences.yaml:\n%s", stepName, len(unlisted), strings.Join(unlisted, "\n"))
					}
				}
			})
		}
	})
	if p := os.Getenv("ORACLE_REPORT"); p != "" {
		sort.Slice(report, func(i, j int) bool { return report[i].Sample < report[j].Sample })
		b, _ := json.MarshalIndent(report, "", "  ")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Error(err)
		}
	}
	if !t.Failed() {
		// An entry nothing matched any more is a fixed difference: the table must shrink with it.
		for _, a := range slices.Concat(diffs.Deliberate, diffs.Pending) {
			if !a.used && !a.Random {
				t.Errorf("differences.yaml: %q matched nothing; remove it", a.Match)
			}
		}
	}
	t.Logf("compared %d RayCluster specs from %s and %d scenarios", len(samples), modDir, len(scenarios()))
}

type sampleReport struct {
	Sample string `json:"sample"`
	Diffs  []diff `json:"diffs"`
}

// kuberayModuleDir is the pinned KubeRay module in the module cache (downloaded by hack/build-kuberay.sh).
func kuberayModuleDir(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", kuberayModule)
	cmd.Dir = filepath.Join(root, "hack", "tools", "kuberay")
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("locating %s (run make tools): %v", kuberayModule, err)
	}
	return dir
}

// sample is one RayCluster spec taken from a sample file.
type sample struct {
	name    string
	cluster *unstructured.Unstructured
	extra   []*unstructured.Unstructured // ConfigMaps and Secrets the sample ships with
}

// loadSamples reads every YAML of the samples tree: RayClusters as they are, RayJobs and RayServices for the
// cluster they describe (until Manta's controllers for them are compared whole).
func loadSamples(t *testing.T, dir, prefix string) []sample {
	t.Helper()
	var out []sample
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		var objs []*unstructured.Unstructured
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("%s: %w", rel, err)
			}
			if len(u.Object) > 0 {
				objs = append(objs, u)
			}
		}
		var extra []*unstructured.Unstructured
		for _, u := range objs {
			if u.GetAPIVersion() == "v1" && (u.GetKind() == "ConfigMap" || u.GetKind() == "Secret") {
				extra = append(extra, u)
			}
		}
		for _, u := range objs {
			var spec map[string]any
			switch u.GetKind() {
			case "RayCluster":
				spec, _, _ = unstructured.NestedMap(u.Object, "spec")
			case "RayJob":
				spec, _, _ = unstructured.NestedMap(u.Object, "spec", "rayClusterSpec")
			case "RayService":
				spec, _, _ = unstructured.NestedMap(u.Object, "spec", "rayClusterConfig")
			}
			if spec == nil {
				continue
			}
			c := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": spec}}
			name := u.GetName()
			if name == "" {
				// Samples meant for kubectl create use generateName; the oracle needs one name on both sides.
				name = strings.TrimSuffix(u.GetGenerateName(), "-")
			}
			c.SetName(name)
			if u.GetKind() == "RayCluster" {
				c.SetLabels(u.GetLabels())
				c.SetAnnotations(u.GetAnnotations())
			}
			sname := prefix + strings.TrimSuffix(rel, ".yaml")
			if u.GetKind() != "RayCluster" {
				sname += "/" + name
			}
			out = append(out, sample{name: sname, cluster: c, extra: extra})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// e2eClusters are the RayClusters test/e2e builds with testutil.
func e2eClusters(t *testing.T) []sample {
	var out []sample
	for name, rc := range map[string]*rayv1.RayCluster{
		"e2e/scale-100-workers": testutil.MakeRayCluster("", "big").Workers("workers", 100).Obj(),
		"e2e/autoscaled":        testutil.MakeRayCluster("", "autoscaled").Workers("small", 2).Autoscaling().Obj(),
		"e2e/prepulled":         testutil.MakeRayCluster("", "prepulled").Workers("small", 1).Obj(),
	} {
		out = append(out, sample{name: name, cluster: toUnstructured(t, rc)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func toUnstructured(t *testing.T, rc *rayv1.RayCluster) *unstructured.Unstructured {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rc)
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: u}
	obj.SetAPIVersion("ray.io/v1")
	obj.SetKind("RayCluster")
	delete(obj.Object, "status")
	unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
	return obj
}

// startKubeRay starts a control plane with KubeRay's CRDs and KubeRay's operator (a subprocess) against it.
func startKubeRay(t *testing.T, root, modDir string) side {
	cfg, cl := testutil.StartEnvtestWithCRDs(t, filepath.Join(modDir, "config", "crd", "bases"))
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(cfg, kubeconfig); err != nil {
		t.Error(err)
		return side{}
	}
	logPath := filepath.Join(dir, "kuberay-operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Error(err)
		return side{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "kuberay-operator"),
		"--kubeconfig="+kubeconfig, "--enable-leader-election=false", "--metrics-addr=0", "--health-probe-bind-address=0",
		"--reconcile-concurrency=4",
		// On by default in KubeRay after v1.5.0 (beta), and what Manta implements: the replica labels of workers.
		"--feature-gates=RayMultiHostIndexing=true")
	cmd.Env = append(os.Environ(), "RAYCLUSTER_DEFAULT_REQUEUE_SECONDS_ENV=2")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Errorf("starting bin/kuberay-operator (run make tools): %v", err)
		cancel()
		return side{}
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			t.Logf("kuberay-operator log tail:\n%s", tail(logPath, 40))
		}
	})
	return side{name: "kuberay", cl: cl}
}

func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// startManta starts a control plane with Manta's CRDs and Manta's RayCluster controller in this process.
func startManta(t *testing.T) side {
	cfg, cl := testutil.StartEnvtest(t)
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Error(err)
		return side{}
	}
	req, _ := labels.NewRequirement(builder.LabelNodeType, selection.Exists, nil)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.NewSelector().Add(*req)}}},
	})
	if err != nil {
		t.Error(err)
		return side{}
	}
	if err := raycluster.NewReconciler(mgr, raycluster.Options{MaxConcurrentReconciles: 4, ResyncPeriod: 2 * time.Second}).SetupWithManager(mgr); err != nil {
		t.Error(err)
		return side{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return side{name: "manta", cl: cl}
}

var rayClusterGVK = schema.GroupVersionKind{Group: "ray.io", Version: "v1", Kind: "RayCluster"}

// runSample applies one spec to both sides, drives the pods to Running and Ready, waits for both to settle and
// returns the differences.
func runSample(t *testing.T, ns string, s sample, sides ...side) []diff {
	ctx := context.Background()
	accepted := make([]string, len(sides))
	for i, sd := range sides {
		if err := sd.cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatalf("%s: %v", sd.name, err)
		}
		accepted[i] = "true"
		for _, o := range append(slices.Clone(s.extra), s.cluster) {
			u := o.DeepCopy()
			u.SetNamespace(ns)
			err := sd.cl.Create(ctx, u)
			if apierrors.IsInvalid(err) && u.GetKind() == "RayCluster" {
				// One schema refuses what the other accepts: that is the difference, nothing to settle.
				accepted[i] = "false"
				t.Logf("%s refuses the RayCluster: %v", sd.name, err)
				continue
			}
			if err != nil {
				t.Fatalf("%s: create %s %s: %v", sd.name, u.GetKind(), u.GetName(), err)
			}
		}
	}
	if accepted[0] != accepted[1] {
		return []diff{{Object: "admission", Path: "accepted", KubeRay: accepted[0], Manta: accepted[1]}}
	}
	if accepted[0] == "false" {
		return nil
	}
	return settle(t, ns, s.cluster.GetName(), sides...)
}

// settle plays the kubelet on both sides until both have the pods their spec asks for, all Running and Ready, and a
// status written for the current generation, three polls in a row (or a minute passed: a spec one operator refuses
// never settles), then compares what they wrote.
func settle(t *testing.T, ns, cluster string, sides ...side) []diff {
	snaps := make([]*snapshot, len(sides))
	deadline := time.Now().Add(time.Minute)
	stable := 0
	for {
		for i, sd := range sides {
			driveReady(t, sd, ns)
			snaps[i] = takeSnapshot(t, sd, ns, cluster)
		}
		if snaps[0].settled() && snaps[1].settled() {
			stable++
		} else {
			stable = 0
		}
		if stable >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	return snaps[0].compare(snaps[1])
}

// driveReady plays the kubelet: every pod of the namespace becomes Running and Ready, with an IP.
func driveReady(t *testing.T, sd side, ns string) {
	ctx := context.Background()
	pods := &corev1.PodList{}
	if err := sd.cl.List(ctx, pods, client.InNamespace(ns)); err != nil {
		t.Fatalf("%s: list pods: %v", sd.name, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if (p.Status.Phase != "" && p.Status.Phase != corev1.PodPending) || p.DeletionTimestamp != nil {
			continue // running, or finished on purpose (a scenario failed it)
		}
		now := metav1.Now()
		ip := fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = ip
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		p.Status.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, Ready: true, Started: ptrTo(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			})
		}
		if err := sd.cl.Status().Update(ctx, p); err != nil && !strings.Contains(err.Error(), "not found") {
			// A conflict is retried by the next poll.
			t.Logf("%s: pod %s status: %v", sd.name, p.Name, err)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// snapshot is what one operator wrote into a namespace, normalised.
type snapshot struct {
	side     string
	pods     map[string][]map[string]any // by pod/<node-type>[:group]
	objects  map[string]map[string]any   // services, serviceaccounts, roles, rolebindings, the cluster status
	events   map[string]bool             // Type/Reason of the events about the cluster
	statusOK bool
	want     int // pods the spec asks for
	have     int
}

func (s *snapshot) settled() bool {
	if !s.statusOK || s.have != s.want {
		return false
	}
	for _, ps := range s.pods {
		for _, p := range ps {
			if p["_ready"] != true {
				return false
			}
		}
	}
	return true
}

var uidRe = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

func takeSnapshot(t *testing.T, sd side, ns, cluster string) *snapshot {
	ctx := context.Background()
	s := &snapshot{side: sd.name, pods: map[string][]map[string]any{}, objects: map[string]map[string]any{}, events: map[string]bool{}}
	toMap := func(o any) map[string]any {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]any{}
		if err := json.Unmarshal(uidRe.ReplaceAll(b, []byte("UID")), &m); err != nil {
			t.Fatal(err)
		}
		deleteFields(m, "metadata.uid", "metadata.resourceVersion", "metadata.creationTimestamp", "metadata.managedFields",
			"metadata.generation", "metadata.namespace", "metadata.deletionTimestamp", "metadata.deletionGracePeriodSeconds")
		return m
	}

	pods := &corev1.PodList{}
	if err := sd.cl.List(ctx, pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		key := "pod/" + p.Labels[builder.LabelNodeType]
		if g := p.Labels[builder.LabelGroup]; p.Labels[builder.LabelNodeType] == builder.NodeTypeWorker {
			key += ":" + g
		}
		ready := p.Status.Phase == corev1.PodRunning
		m := toMap(p)
		deleteFields(m, "metadata.name", "status", "spec.nodeName")
		if v, ok := p.Labels[builder.LabelReplicaName]; ok {
			m["metadata"].(map[string]any)["labels"].(map[string]any)[builder.LabelReplicaName] = regexp.MustCompile(`-[a-z0-9]{5}$`).ReplaceAllString(v, "-XXXXX")
		}
		m["_ready"] = ready
		s.pods[key] = append(s.pods[key], m)
	}

	svcs := &corev1.ServiceList{}
	if err := sd.cl.List(ctx, svcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range svcs.Items {
		m := toMap(&svcs.Items[i])
		if svcs.Items[i].Spec.ClusterIP != corev1.ClusterIPNone {
			deleteFields(m, "spec.clusterIP", "spec.clusterIPs")
		}
		deleteFields(m, "spec.ports.nodePort", "status")
		s.objects["service/"+svcs.Items[i].Name] = m
	}
	for _, l := range []client.ObjectList{&corev1.ServiceAccountList{}, &rbacRoleList{}, &rbacRoleBindingList{}, &batchv1.JobList{}} {
		listInto(t, sd.cl, ns, l, s.objects, toMap)
	}

	rc := &unstructured.Unstructured{}
	rc.SetGroupVersionKind(rayClusterGVK)
	if err := sd.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster}, rc); err != nil {
		t.Fatal(err)
	}
	status, _, _ := unstructured.NestedMap(rc.Object, "status")
	if status == nil {
		status = map[string]any{}
	}
	deleteFields(status, "lastUpdateTime", "stateTransitionTimes", "conditions.lastTransitionTime", "head.podIP", "head.podName", "head.serviceIP")
	if eps, ok := status["endpoints"].(map[string]any); ok {
		// Node ports are allocated at random by each API server.
		for k, v := range eps {
			if n, err := strconv.Atoi(fmt.Sprint(v)); err == nil && n >= 30000 && n <= 32767 {
				eps[k] = "<nodePort>"
			}
		}
	}
	s.objects["raycluster/"+cluster+".status"] = status
	state, _, _ := unstructured.NestedString(rc.Object, "status", "state")
	observed, _, _ := unstructured.NestedInt64(rc.Object, "status", "observedGeneration")
	s.want = wantPods(rc)
	for _, ps := range s.pods {
		s.have += len(ps)
	}
	s.statusOK = observed == rc.GetGeneration() && (state == "ready" || (s.want == 0 && state == "suspended"))
	s.objects["raycluster/"+cluster+".metadata"] = map[string]any{"finalizers": toAny(rc.GetFinalizers())}

	events := &corev1.EventList{}
	if err := sd.cl.List(ctx, events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "RayCluster" {
			s.events[e.Type+"/"+e.Reason] = true
		}
	}
	return s
}

// wantPods is how many pods a RayCluster asks for: a head and each group's replicas (clamped to min and max) times
// its hosts; none when suspended.
func wantPods(rc *unstructured.Unstructured) int {
	if v, _, _ := unstructured.NestedBool(rc.Object, "spec", "suspend"); v {
		return 0
	}
	n := 1
	groups, _, _ := unstructured.NestedSlice(rc.Object, "spec", "workerGroupSpecs")
	for _, g := range groups {
		gm := g.(map[string]any)
		get := func(k string, def int64) int64 {
			v, ok, _ := unstructured.NestedInt64(gm, k)
			if !ok {
				return def
			}
			return v
		}
		if v, _, _ := unstructured.NestedBool(gm, "suspend"); v {
			continue
		}
		r := max(get("replicas", 0), get("minReplicas", 0))
		r = min(r, get("maxReplicas", 1<<31-1))
		n += int(r * max(get("numOfHosts", 1), 1))
	}
	return n
}

func toAny(l []string) []any {
	out := make([]any, len(l))
	for i, s := range l {
		out[i] = s
	}
	return out
}

// compare lists what m (Manta) wrote differently from s (KubeRay).
func (s *snapshot) compare(m *snapshot) []diff {
	var out []diff
	keys := map[string]bool{}
	for k := range s.pods {
		keys[k] = true
	}
	for k := range m.pods {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		a, b := s.pods[k], m.pods[k]
		if len(a) != len(b) {
			out = append(out, diff{Object: k, Path: "count", KubeRay: fmt.Sprint(len(a)), Manta: fmt.Sprint(len(b))})
		}
		if len(a) == 0 || len(b) == 0 {
			continue
		}
		// Pods of one group are alike but for their replica labels: compare the first of each side.
		pa, pb := podRepresentative(a), podRepresentative(b)
		out = append(out, compareObjects(k, pa, pb)...)
	}
	okeys := map[string]bool{}
	for k := range s.objects {
		okeys[k] = true
	}
	for k := range m.objects {
		okeys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(okeys)) {
		a, b := s.objects[k], m.objects[k]
		switch {
		case a == nil:
			out = append(out, diff{Object: k, Path: "exists", KubeRay: "false", Manta: "true"})
		case b == nil:
			out = append(out, diff{Object: k, Path: "exists", KubeRay: "true", Manta: "false"})
		default:
			out = append(out, compareObjects(k, a, b)...)
		}
	}
	for _, e := range slices.Sorted(maps.Keys(s.events)) {
		if !m.events[e] {
			out = append(out, diff{Object: "events", Path: e, KubeRay: "recorded", Manta: "<absent>"})
		}
	}
	for _, e := range slices.Sorted(maps.Keys(m.events)) {
		if !s.events[e] {
			out = append(out, diff{Object: "events", Path: e, KubeRay: "<absent>", Manta: "recorded"})
		}
	}
	return out
}

func podRepresentative(ps []map[string]any) map[string]any {
	sorted := slices.Clone(ps)
	idx := func(p map[string]any) string {
		l, _ := p["metadata"].(map[string]any)["labels"].(map[string]any)
		return fmt.Sprint(l[builder.LabelReplicaIndex], "/", l[builder.LabelHostIndex])
	}
	slices.SortFunc(sorted, func(a, b map[string]any) int { return strings.Compare(idx(a), idx(b)) })
	p := sorted[0]
	delete(p, "_ready")
	return p
}
