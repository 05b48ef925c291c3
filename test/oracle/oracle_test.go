// Package oracle is the differential test of issue 11: on one dev cluster (internal/devcluster, the cluster `manta
// dev` and test/e2e run), KubeRay's own operator (bin/kuberay-operator, built from the module pinned in
// hack/tools/kuberay) watches one namespace of each pair and Manta's operator (every controller, in-process)
// the other. Both get the same objects (every sample of the pinned module, RayJobs and RayServices whole, and the
// clusters the e2e tests build); what each operator writes (RayClusters, pods, Services, submitter Jobs, RBAC,
// events, status) is normalised and compared field by field. A difference fails the test unless differences.yaml
// lists it with its reason.
//
// Both operators reach Ray the same way, through the API server's service and pod proxy (--use-kubernetes-proxy):
// internal/testutil/podnet makes every fake pod's IP answer in one network namespace, and a fake Ray head
// (internal/testutil/fakeray, held to real Ray by test/ray) answers there for each head pod. The oracle plays the
// submitters (a submitter Job's pod, SidecarMode's container): it submits the RayJob's entrypoint and ends the submitter as `ray job submit` would once the job ended. So RayJobs are compared at their
// terminal status (jobs end as their entrypoint implies), after their TTL and deletion rules, and RayServices once
// Ready. Each comparison waits for both sides to settle (see settle): the operators' work queues drained per their
// /metrics, no write since, nothing on its way; the deadline is a failure. Needs root (network namespaces).
package oracle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// parallel is how many samples and scenarios run at once.
const parallel = 32

func TestOracle(t *testing.T) {
	root := testutil.MustRepoRoot(t)
	modDir := testutil.KubeRayModuleDir(t)
	diffs, err := loadDifferences(filepath.Join(root, "test", "oracle", "differences.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	samples := loadSamples(t, filepath.Join(modDir, "config", "samples"))
	kinds := map[string]int{}
	for _, s := range samples {
		kinds[s.kind()]++
	}
	if kinds["RayCluster"] < 30 || kinds["RayJob"] < 15 || kinds["RayService"] < 10 {
		t.Fatalf("too few samples in the pinned module: %v", kinds)
	}
	samples = append(samples, e2eClusters(t)...)
	kinds["RayCluster"] += 3
	// RayJobs no sample has (jobs.go): failing ones, retries, each deletion rule, a deadline.
	jobs := oracleJobs(t)
	samples = append(samples, jobs...)
	kinds["RayJob"] += len(jobs)
	scs := scenarios(t, samples)

	var nss []string
	for i := range samples {
		nss = append(nss, sampleNS(i))
	}
	for i := range scs {
		nss = append(nss, scenarioNS(i))
	}
	var objs []*unstructured.Unstructured
	for _, s := range samples {
		objs = append(objs, s.objs...)
	}
	for _, sc := range scs {
		objs = append(objs, sc.objs...)
	}
	mantaBin := buildManta(t)
	kuberay, manta := startSides(t, root, objs, nss)
	env.diffs = diffs

	var mu sync.Mutex
	var report []sampleReport
	// ran counts the samples, scenarios and scheduler runs that -run let through: unused entries mean something
	// only when all did.
	var ran atomic.Int32
	record := func(name string, found []diff) []string {
		var unlisted []string
		for _, d := range found {
			if !diffs.allows(name, d) {
				unlisted = append(unlisted, d.String())
			}
		}
		mu.Lock()
		report = append(report, sampleReport{Sample: name, Diffs: found, Unlisted: len(unlisted)})
		mu.Unlock()
		return unlisted
	}
	// Every sample and scenario runs at once (t.Run from goroutines: t.Parallel would run -parallel, by default
	// GOMAXPROCS, at a time); most of their time is waiting for the operators.
	t.Run("all", func(t *testing.T) {
		var wg sync.WaitGroup
		// At most parallel at once: two operators on a small machine (and the kwok, scheduler and API server behind
		// them) fall behind when all start together, and a settle timed out there compares nothing useful.
		sem := make(chan struct{}, parallel)
		for i, sc := range scs {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				t.Run("scenario/"+sc.name, func(t *testing.T) {
					ran.Add(1)
					for _, st := range runScenario(t, scenarioNS(i), sc, kuberay, manta) {
						if unlisted := record("scenario/"+sc.name+"/"+st.name, st.diffs); len(unlisted) > 0 {
							t.Errorf("%s: %d differences from KubeRay not in differences.yaml:\n%s", st.name, len(unlisted), strings.Join(unlisted, "\n"))
						}
					}
				})
			})
		}
		for i, s := range samples {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				t.Run("sample/"+s.name, func(t *testing.T) {
					ran.Add(1)
					if unlisted := record(s.name, runSample(t, sampleNS(i), s.name, s, kuberay, manta)); len(unlisted) > 0 {
						t.Errorf("%d differences from KubeRay not in differences.yaml:\n%s", len(unlisted), strings.Join(unlisted, "\n"))
					}
				})
			})
		}
		wg.Wait()
	})
	// The batch schedulers' pairs, once the main pair's samples are done (so neither slows the other).
	t.Run("batch-scheduler", func(t *testing.T) { runBatchSchedulers(t, mantaBin(), samples, kuberay.cl, record, &ran) })
	sort.Slice(report, func(i, j int) bool { return report[i].Sample < report[j].Sample })
	if p := os.Getenv("ORACLE_REPORT"); p != "" {
		b, _ := json.MarshalIndent(report, "", "  ")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Error(err)
		}
	}
	all := len(scs) + len(samples) + len(schedulerRuns)
	if n := int(ran.Load()); n < all {
		t.Logf("differences.yaml: unused entries not looked for: -run let %d of %d samples, scenarios and scheduler runs through", n, all)
	} else if !t.Failed() {
		// An entry nothing matched any more is a fixed difference: the table must shrink with it.
		for _, a := range slices.Concat(diffs.Deliberate, diffs.Pending) {
			if !a.used && !a.Random && !a.Transient {
				t.Errorf("differences.yaml: %q matched nothing; remove it", a.Match)
			}
		}
	}
	var lines []string
	total := 0
	for _, r := range report {
		total += len(r.Diffs)
		if len(r.Diffs) > 0 {
			lines = append(lines, fmt.Sprintf("  %-70s %3d differences (%d not listed)", r.Sample, len(r.Diffs), r.Unlisted))
		}
	}
	t.Logf("oracle: compared %d samples (%d RayCluster, %d RayJob, %d RayService; pinned module %s and the e2e clusters) "+
		"and %d scenarios (%d steps); %d differences found, %d entries in differences.yaml; per sample:\n%s",
		len(samples), kinds["RayCluster"], kinds["RayJob"], kinds["RayService"], modDir, len(scs), len(report)-len(samples),
		total, len(diffs.Deliberate)+len(diffs.Pending), strings.Join(lines, "\n"))
}

type sampleReport struct {
	Sample   string `json:"sample"`
	Diffs    []diff `json:"diffs"`
	Unlisted int    `json:"unlisted"`
}

// Each sample and scenario gets a namespace pair: k-<name> watched by KubeRay, m-<name> by Manta.
func sampleNS(i int) string   { return fmt.Sprintf("s%02d", i) }
func scenarioNS(i int) string { return fmt.Sprintf("c%02d", i) }

// sample is one sample file: its Ray objects (applied as they are) and the ConfigMaps, Secrets and
// ServiceAccounts it ships with.
type sample struct {
	name  string
	objs  []*unstructured.Unstructured
	extra []*unstructured.Unstructured
}

// kind is the kind of the sample's first Ray object.
func (s sample) kind() string { return s.objs[0].GetKind() }

// loadSamples reads every YAML of the samples tree: one sample per file that holds a RayCluster, RayJob or
// RayService.
func loadSamples(t *testing.T, dir string) []sample {
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
		s := sample{name: strings.TrimSuffix(rel, ".yaml")}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("%s: %w", rel, err)
			}
			switch {
			case u.GetAPIVersion() == "ray.io/v1" && slices.Contains([]string{"RayCluster", "RayJob", "RayService"}, u.GetKind()):
				if u.GetName() == "" {
					// Samples meant for kubectl create use generateName; the oracle needs one name on both sides.
					u.SetName(strings.TrimSuffix(u.GetGenerateName(), "-"))
					u.SetGenerateName("")
				}
				s.objs = append(s.objs, u)
			case u.GetAPIVersion() == "v1" && slices.Contains([]string{"ConfigMap", "Secret", "ServiceAccount"}, u.GetKind()):
				s.extra = append(s.extra, u)
			}
		}
		if len(s.objs) > 0 {
			out = append(out, s)
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
		out = append(out, sample{name: name, objs: []*unstructured.Unstructured{toUnstructured(t, rc)}})
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
