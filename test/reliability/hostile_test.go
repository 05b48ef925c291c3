package reliability

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// hostileInputs is how many mutated objects TestHostileInput sends through admission.
const hostileInputs = 400

// hostileValues replace a field's value: wrong types, out-of-range numbers, odd strings, empty containers.
var hostileValues = []any{
	nil, true, false, 0, -1, 1, 2147483648, -9223372036854775807, 1e300, -0.5, 0.5,
	"", " ", "-1", "0", "1e400", "1Gi", "-1Gi", "🙂", "a b/c", "../../etc/passwd", strings.Repeat("x", 300), "$(rm -rf /)",
	"Always", "Never", "HTTPMode", "K8sJobMode", "SidecarMode", "InteractiveMode", "Recreate", "None",
	[]any{}, []any{nil}, []any{1, "a"}, map[string]any{}, map[string]any{"bogus": "x"},
}

// TestHostileInput sends randomly mutated RayClusters, RayJobs, RayServices and ImagePullJobs to the real API
// server while an operator process runs (through a proxy that counts its writes, injecting nothing). Every
// refusal must name a field; of what is accepted, nothing may crash the operator or make it write in a loop.
// Then very large objects: a RayCluster with 50 worker groups and a RayService with a 1 MiB serveConfigV2 are
// handled, a 3 MiB one is refused with a clear error.
func TestHostileInput(t *testing.T) {
	dc, cl := devCluster(t)
	start := time.Now()
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 422))
	ns := namespace(t, cl, "hostile")
	// A quota keeps an accepted RayCluster with 2^31 replicas from filling the dev cluster: the operator must cope
	// with the refusals quietly.
	if err := cl.Create(t.Context(), &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("60")}}}); err != nil {
		t.Fatal(err)
	}
	fray := newFakeRay(seed)
	counter := startClusterProxy(t, dc.RESTConfig(), fray)
	large := namespace(t, cl, "hostile-large")
	op := startOperator(t, "hostile", operatorConfig{kubeconfig: counter.kubeconfig(t), namespaces: []string{ns, large}})
	dynCfg := dc.RESTConfig()
	dynCfg.WarningHandler = rest.NoWarnings{} // unknown fields are pruned with a warning: expected here
	dyn, err := dynamic.NewForConfig(dynCfg)
	if err != nil {
		t.Fatal(err)
	}

	bases := hostileBases(t, ns)
	fieldPath := regexp.MustCompile(`spec(\.[A-Za-z]|\[|:)`)
	accepted, refused := map[string]int{}, map[string]int{}
	var acceptedObjs []*unstructured.Unstructured
	for i := range hostileInputs {
		base := bases[i%len(bases)]
		u := base.obj.DeepCopy()
		u.SetName(fmt.Sprintf("%s-%03d", strings.ToLower(u.GetKind()), i))
		var muts []string
		for range 1 + rng.IntN(3) {
			muts = append(muts, mutate(rng, u.Object["spec"]))
		}
		got, err := dyn.Resource(base.gvr).Namespace(ns).Create(t.Context(), u, metav1.CreateOptions{})
		switch {
		case err == nil:
			accepted[u.GetKind()]++
			acceptedObjs = append(acceptedObjs, got)
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			refused[u.GetKind()]++
			if !namesField(err, fieldPath) {
				t.Errorf("%s %s (%s): refusal names no field: %v", u.GetKind(), u.GetName(), strings.Join(muts, "; "), err)
			}
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "quota"):
			refused[u.GetKind()]++
		default:
			t.Errorf("%s %s (%s): %v", u.GetKind(), u.GetName(), strings.Join(muts, "; "), err)
		}
	}
	t.Logf("seed %d: %d mutated objects: accepted %v, refused %v", seed, hostileInputs, accepted, refused)

	// The operator has seen every accepted RayCluster and RayJob once status.observedGeneration equals its
	// generation. Then its writes are counted over a window: a loop writes many times a second; a cluster whose
	// pods the quota refuses retries with a doubling backoff (1 s, 2 s, 4 s …) and keeps a status that no longer
	// changes, so it makes a handful of create attempts in the window and no status write.
	testutil.Eventually(t, convergeTimeout, "the operator to have observed every accepted RayCluster and RayJob", func() (bool, string) {
		for _, u := range acceptedObjs {
			if u.GetKind() != "RayCluster" && u.GetKind() != "RayJob" {
				continue
			}
			got, err := dyn.Resource(gvrOf(u)).Namespace(ns).Get(t.Context(), u.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if og, _, _ := unstructured.NestedInt64(got.Object, "status", "observedGeneration"); og != got.GetGeneration() {
				return false, fmt.Sprintf("%s %s: observedGeneration %d of %d", u.GetKind(), u.GetName(), og, got.GetGeneration())
			}
		}
		return true, ""
	})
	counter.takeWrites()
	// A measurement window, not a wait for a condition: the write rate over it is what is checked.
	window := 10 * time.Second
	time.Sleep(window)
	busiest, most, total := "", 0, 0
	for path, n := range counter.takeWrites() {
		if strings.Contains(path, "/leases/") || strings.HasSuffix(path, "/events") {
			continue
		}
		// A loop writes many times a second. An owner whose pods the quota refuses (pod creates keyed #<cluster>
		// for a RayCluster, #<job uid> for an ImagePullJob's pullers) waits 1, 2, 4, 8 s … between refused tries:
		// at most 4 refused tries in a 10 s window (a try may be several creates sent together; a create the quota
		// lets through when a slot frees is progress, not part of that count, and only a reconcile whose creates
		// all go through starts the backoff again). Any object's writes, refused or not: at most 10.
		limit := 10
		if strings.HasSuffix(path, refusedSuffix) {
			limit = 4
		} else {
			total += n
			if n > most {
				busiest, most = path, n
			}
		}
		if n > limit {
			t.Errorf("the operator wrote %s %d times in %s (limit %d): a loop", path, n, window, limit)
			if _, o, ok := strings.Cut(strings.TrimSuffix(path, refusedSuffix), "/pods#"); ok {
				logLines(t, op.logPath, `"name":"`+o+`"`, "pod create")
			}
		}
	}
	t.Logf("operator writes in a %s window after settling: %d in all, at most %d for one object (%s)", window, total, most, busiest)
	if !op.alive() {
		t.Fatal("the operator process exited")
	}
	if log, err := os.ReadFile(op.logPath); err != nil {
		t.Fatal(err)
	} else if strings.Contains(strings.ToLower(string(log)), "panic") {
		t.Errorf("the operator log mentions a panic: see %s", op.logPath)
	}

	t.Run("large objects", func(t *testing.T) {
		// 50 worker groups of one tiny pod each: all 51 pods, ready.
		big := smallCluster(ns, "fifty-groups", 1)
		g := big.Spec.WorkerGroupSpecs[0]
		big.Spec.WorkerGroupSpecs = nil
		for i := range 50 {
			gi := *g.DeepCopy()
			gi.GroupName = fmt.Sprintf("group-%02d", i)
			big.Spec.WorkerGroupSpecs = append(big.Spec.WorkerGroupSpecs, gi)
		}
		// The first namespace's quota is for the fuzzed objects.
		big.Namespace = large
		if err := cl.Create(t.Context(), big); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, convergeTimeout, "the 50-group RayCluster ready with 51 pods", func() (bool, string) {
			rc := &rayv1.RayCluster{}
			if err := cl.Get(t.Context(), client.ObjectKeyFromObject(big), rc); err != nil {
				return false, err.Error()
			}
			pods := &corev1.PodList{}
			if err := cl.List(t.Context(), pods, client.InNamespace(big.Namespace)); err != nil {
				return false, err.Error()
			}
			return rc.Status.State == rayv1.Ready && len(pods.Items) == 51 && rc.Status.ObservedGeneration == rc.Generation,
				fmt.Sprintf("state %q, %d pods", rc.Status.State, len(pods.Items))
		})
		// A 1 MiB serveConfigV2 is stored whole; a 3 MiB one is refused, saying why.
		svc := func(name string, size int) *rayv1.RayService {
			cfg := "applications:\n- name: app\n  import_path: m:app\n  runtime_env:\n    env_vars:\n      PAD: \"" + strings.Repeat("p", size) + "\"\n"
			return &rayv1.RayService{ObjectMeta: metav1.ObjectMeta{Namespace: big.Namespace, Name: name},
				Spec: rayv1.RayServiceSpec{ServeConfigV2: cfg, RayClusterSpec: smallCluster("", "", 1).Spec}}
		}
		mib := svc("one-mib", 1<<20)
		if err := cl.Create(t.Context(), mib); err != nil {
			t.Fatalf("1 MiB serveConfigV2: %v", err)
		}
		back := &rayv1.RayService{}
		if err := cl.Get(t.Context(), client.ObjectKeyFromObject(mib), back); err != nil || back.Spec.ServeConfigV2 != mib.Spec.ServeConfigV2 {
			t.Errorf("1 MiB serveConfigV2 read back: %d bytes, %v", len(back.Spec.ServeConfigV2), err)
		}
		err := cl.Create(t.Context(), svc("three-mib", 3<<20))
		var st apierrors.APIStatus
		if err == nil || !errors.As(err, &st) || !(apierrors.IsRequestEntityTooLargeError(err) || strings.Contains(err.Error(), "too large") || strings.Contains(err.Error(), "limit")) {
			t.Errorf("3 MiB RayService: %v; want a refusal saying it is too large", err)
		} else {
			t.Logf("3 MiB RayService refused: %d %s", st.Status().Code, truncateMsg(err.Error(), 160))
		}
		if !op.alive() {
			t.Fatal("the operator process exited")
		}
	})
	t.Logf("total %s", time.Since(start).Round(time.Millisecond))
}

// logLines logs the last lines of the operator log at path that hold every one of the strings (a failure's context).
func logLines(t *testing.T, path string, has ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Log(err)
		return
	}
	var lines []string
	for l := range strings.Lines(string(b)) {
		if slices.ContainsFunc(has, func(s string) bool { return !strings.Contains(l, s) }) {
			continue
		}
		// The line's time, message, and what it says beyond the controller's context fields.
		var f map[string]any
		if json.Unmarshal([]byte(l), &f) != nil {
			lines = append(lines, truncateMsg(strings.TrimSpace(l), 300))
			continue
		}
		out := fmt.Sprintf("%v %v", f["ts"], f["msg"])
		for _, k := range []string{"retryAfter", "error"} {
			if v, ok := f[k]; ok {
				out += fmt.Sprintf(" %s=%v", k, v)
			}
		}
		lines = append(lines, truncateMsg(out, 300))
	}
	t.Logf("operator log, lines with %q (last 12 of %d):\n%s", has, len(lines), strings.Join(lines[max(0, len(lines)-12):], "\n"))
}

type hostileBase struct {
	gvr schema.GroupVersionResource
	obj *unstructured.Unstructured
}

func gvrOf(u *unstructured.Unstructured) schema.GroupVersionResource {
	gv := schema.FromAPIVersionAndKind(u.GetAPIVersion(), u.GetKind()).GroupVersion()
	return gv.WithResource(strings.ToLower(u.GetKind()) + "s")
}

// hostileBases are valid objects of each kind, the starting points of the mutations.
func hostileBases(t *testing.T, ns string) []hostileBase {
	t.Helper()
	svc := &rayv1.RayService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "base"},
		Spec: rayv1.RayServiceSpec{ServeConfigV2: "applications: []\n", RayClusterSpec: smallCluster("", "", 1).Spec}}
	ipj := &mantav1alpha1.ImagePullJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "base"},
		Spec: mantav1alpha1.ImagePullJobSpec{Image: "example/app:v1", Selector: &mantav1alpha1.ImagePullJobNodeSelector{Names: []string{"kwok-node-0"}}}}
	job := smallJob(ns, "base", true)
	var out []hostileBase
	for _, o := range []struct {
		obj  runtime.Object
		kind schema.GroupVersionKind
	}{
		{smallCluster(ns, "base", 1), rayv1.GroupVersion.WithKind("RayCluster")},
		{job, rayv1.GroupVersion.WithKind("RayJob")},
		{svc, rayv1.GroupVersion.WithKind("RayService")},
		{ipj, mantav1alpha1.GroupVersion.WithKind("ImagePullJob")},
	} {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.obj)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetGroupVersionKind(o.kind)
		delete(u.Object, "status")
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		out = append(out, hostileBase{gvr: gvrOf(u), obj: u})
	}
	return out
}

// mutate changes one random place under v: it replaces a value with a hostile one, or adds or removes a key or
// list item. It returns where and what, for failure messages.
func mutate(rng *rand.Rand, v any) string {
	path := "spec"
	for {
		switch c := v.(type) {
		case map[string]any:
			keys := sortedKeys(c)
			if len(keys) == 0 || rng.IntN(8) == 0 {
				val := hostileValue(rng)
				c["bogus"] = val
				return fmt.Sprintf("%s.bogus = %s", path, short(val))
			}
			k := keys[rng.IntN(len(keys))]
			child := c[k]
			_, isMap := child.(map[string]any)
			_, isList := child.([]any)
			if (isMap || isList) && rng.IntN(4) != 0 {
				path += "." + k
				v = child
				continue
			}
			if rng.IntN(10) == 0 {
				delete(c, k)
				return "removed " + path + "." + k
			}
			val := hostileValue(rng)
			c[k] = val
			return fmt.Sprintf("%s.%s = %s", path, k, short(val))
		case []any:
			if len(c) == 0 {
				return path + " (empty list, left)"
			}
			i := rng.IntN(len(c))
			path += fmt.Sprintf("[%d]", i)
			v = c[i]
		default:
			return path + " (leaf)"
		}
	}
}

// hostileValue is a copy of a random hostile value: mutations go on inside it, so it must not be shared.
func hostileValue(rng *rand.Rand) any {
	v := hostileValues[rng.IntN(len(hostileValues))]
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

func short(v any) string {
	b, _ := json.Marshal(v)
	return truncateMsg(string(b), 40)
}

func truncateMsg(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// namesField reports whether a refusal names a field: in its causes or in its message.
func namesField(err error, fieldPath *regexp.Regexp) bool {
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Details != nil {
		for _, c := range st.Status().Details.Causes {
			if c.Field != "" && c.Field != "<nil>" {
				return true
			}
		}
	}
	return fieldPath.MatchString(err.Error())
}
