package e2e

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// wantUnsupported is, per sample file, exactly the fields Manta must report as unsupported for the sample's
// RayCluster (for a RayJob or RayService sample, the cluster of its spec: the parent's metadata is not part of it).
// It is written by hand from reading the samples of the pinned KubeRay (v1.5.0), not computed with the code under
// test.
var wantUnsupported = map[string][]string{
	"ray-cluster.kai-gpu-sharing.yaml":   {"metadata.labels[kai.scheduler/queue] (read by kai-scheduler; " + noScheduler + ")"},
	"ray-cluster.kai-scheduler.yaml":     {"metadata.labels[kai.scheduler/queue] (read by kai-scheduler; " + noScheduler + ")"},
	"ray-cluster.scheduler-plugins.yaml": {"metadata.labels[ray.io/gang-scheduling-enabled] (read by yunikorn or scheduler-plugins; " + noScheduler + ")"},
	"ray-cluster.volcano-scheduler.yaml": {"metadata.labels[ray.io/scheduler-name]=volcano (" + noScheduler + ")"},
	"ray-cluster.volcano-scheduler-queue.yaml": {"metadata.labels[ray.io/scheduler-name]=volcano (" + noScheduler + ")",
		"metadata.labels[volcano.sh/queue-name] (read by volcano; " + noScheduler + ")"},
	"ray-cluster.yunikorn-scheduler.yaml": {"metadata.labels[ray.io/gang-scheduling-enabled] (read by yunikorn or scheduler-plugins; " + noScheduler + ")",
		"metadata.labels[yunikorn.apache.org/queue] (read by yunikorn; " + noScheduler + ")", "metadata.labels[yunikorn.apache.org/app-id] (read by yunikorn; " + noScheduler + ")"},
}

// noScheduler ends each scheduler key's report: the dev cluster's operator runs no batch scheduler.
const noScheduler = "the operator runs none: --batch-scheduler is unset"

// sample is one RayCluster taken from a KubeRay sample file.
type sample struct {
	file    string
	kind    string // the kind it came from: RayCluster, RayJob or RayService
	cluster *rayv1.RayCluster
}

// loadSamples reads every RayCluster in the samples, and the RayCluster spec inside every RayJob and RayService
// (with the parent's name).
func loadSamples() ([]sample, error) {
	var out []sample
	err := forEachSample(func(file, kind string, doc []byte) error {
		rc := &rayv1.RayCluster{}
		switch kind {
		case "RayCluster":
			if err := yaml.Unmarshal(doc, rc); err != nil {
				return err
			}
		case "RayJob":
			job := &rayv1.RayJob{}
			if err := yaml.Unmarshal(doc, job); err != nil {
				return err
			}
			if job.Spec.RayClusterSpec == nil {
				return nil
			}
			rc.Name, rc.Spec = job.Name, *job.Spec.RayClusterSpec
			if rc.Name == "" {
				rc.Name = job.GenerateName + "sample"
			}
		case "RayService":
			svc := &rayv1.RayService{}
			if err := yaml.Unmarshal(doc, svc); err != nil {
				return err
			}
			rc.Name, rc.Spec = svc.Name, svc.Spec.RayClusterSpec
		default:
			return nil
		}
		out = append(out, sample{file: file, kind: kind, cluster: rc})
		return nil
	})
	return out, err
}

// forEachSample calls fn with every ray.io/v1 document of the KubeRay sample files (those of the pinned module, in
// its subdirectories too): the file's base name, the document's kind and its YAML.
func forEachSample(fn func(file, kind string, doc []byte) error) error {
	files, err := testutil.KubeRaySampleFiles()
	if err != nil {
		return err
	}
	// The tests name samples by their base name (wantUnsupported, the namespaces).
	seen := map[string]string{}
	for _, f := range files {
		if other, dup := seen[filepath.Base(f)]; dup {
			return fmt.Errorf("two samples named %s: %s and %s", filepath.Base(f), other, f)
		}
		seen[filepath.Base(f)] = f
	}
	for _, f := range files {
		data, err := testutil.ReadKubeRaySample(f)
		if err != nil {
			return err
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if head.APIVersion != "ray.io/v1" {
				continue
			}
			if err := fn(filepath.Base(f), head.Kind, []byte(doc)); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	return nil
}

func templates(rc *rayv1.RayCluster) []corev1.PodTemplateSpec {
	t := []corev1.PodTemplateSpec{rc.Spec.HeadGroupSpec.Template}
	for _, g := range rc.Spec.WorkerGroupSpecs {
		t = append(t, g.Template)
	}
	return t
}

// samplePools shapes fake nodes for the samples: one pool per distinct nodeSelector, with as many nodes as pods
// select it, and a general pool. Every node offers GPUs, TPUs and any other extended resource the samples ask for,
// enough for several sample pods each: the selector pools are not tainted, so the scheduler may also put pods
// without a nodeSelector there (seen: a GPU pod took the only nvidia-b200 node's 8 GPUs, and the sample whose
// worker selects that node and asks for 8 stayed Pending).
func samplePools() ([]devcluster.NodePool, error) {
	samples, err := loadSamples()
	if err != nil {
		return nil, err
	}
	const perNode = "64"
	extra := map[string]string{"ephemeral-storage": "10Ti", "nvidia.com/gpu": perNode, "google.com/tpu": perNode, "aws.amazon.com/neuroncore": perNode}
	bySelector := map[string]map[string]string{}
	count := map[string]int{}
	for _, s := range samples {
		rc := s.cluster
		pods := []int{1}
		for _, g := range rc.Spec.WorkerGroupSpecs {
			n := int(ptr.Deref(g.Replicas, 0))
			if g.MinReplicas != nil && n < int(*g.MinReplicas) {
				n = int(*g.MinReplicas)
			}
			pods = append(pods, n*int(max(1, g.NumOfHosts)))
		}
		// A RayService sample's cluster runs twice: as a RayCluster in TestRayClusterSamples and under its
		// RayService in TestRayServiceSamples.
		copies := 1
		if s.kind == "RayService" {
			copies = 2
		}
		for i, tmpl := range templates(rc) {
			for _, c := range tmpl.Spec.Containers {
				for name := range c.Resources.Limits {
					if n := string(name); n != "cpu" && n != "memory" && n != "ephemeral-storage" && extra[n] == "" {
						extra[n] = perNode
					}
				}
			}
			if len(tmpl.Spec.NodeSelector) == 0 {
				continue
			}
			keys := make([]string, 0, len(tmpl.Spec.NodeSelector))
			for k, v := range tmpl.Spec.NodeSelector {
				keys = append(keys, k+"="+v)
			}
			sort.Strings(keys)
			key := strings.Join(keys, ",")
			bySelector[key] = tmpl.Spec.NodeSelector
			count[key] += pods[i] * copies
		}
	}
	pools := []devcluster.NodePool{{Name: "general", Count: 12, CPU: "256", Memory: "2Ti", Pods: 110, Extra: extra}}
	keys := make([]string, 0, len(bySelector))
	for k := range bySelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		pools = append(pools, devcluster.NodePool{
			Name: fmt.Sprintf("sel%d", i), Count: max(1, count[k]), CPU: "256", Memory: "2Ti", Pods: 110,
			Extra: extra, Labels: bySelector[k],
		})
	}
	return pools, nil
}

var dnsUnsafe = regexp.MustCompile(`[^a-z0-9-]+`)

// TestRayClusterSamples applies every sample's RayCluster, each in its own namespace, all at once, and waits for
// each to be ready with all pods Running and Ready, reporting exactly the fields it does not support.
func TestRayClusterSamples(t *testing.T) {
	_, cl := devCluster(t)
	samples, err := loadSamples()
	if err != nil {
		t.Fatal(err)
	}
	// KubeRay v1.5.0's samples describe 66 RayClusters (on their own or in a RayJob or RayService); fewer means the
	// reading went wrong.
	if len(samples) < 66 {
		t.Fatalf("%d RayClusters in the samples, want 66", len(samples))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()

	type result struct {
		s           sample
		ready       bool
		unsupported []string
		err         string
		took        time.Duration
	}
	results := make([]result, len(samples))
	var wg sync.WaitGroup
	for i, s := range samples {
		wg.Go(func() {
			r := result{s: s}
			r.ready, r.unsupported, r.err = runSample(ctx, cl, i, s)
			r.took = time.Since(start)
			results[i] = r
		})
	}
	wg.Wait()

	var ready, readyUnsupported, failed int
	seenFiles := map[string]bool{}
	for _, r := range results {
		seenFiles[r.s.file] = true
		want := wantUnsupported[r.s.file]
		ok := r.ready && r.err == "" && slices.Equal(want, r.unsupported)
		switch {
		case !ok:
			failed++
			t.Errorf("%s (%s %s): ready=%v unsupported=%v want unsupported=%v %s", r.s.file, r.s.kind, r.s.cluster.Name, r.ready, r.unsupported, want, r.err)
		case len(r.unsupported) > 0:
			readyUnsupported++
			t.Logf("ready, reports unsupported %v: %s (%s %s) in %s", r.unsupported, r.s.file, r.s.kind, r.s.cluster.Name, r.took.Round(time.Millisecond))
		default:
			ready++
			t.Logf("ready: %s (%s %s) in %s", r.s.file, r.s.kind, r.s.cluster.Name, r.took.Round(time.Millisecond))
		}
	}
	for f := range wantUnsupported {
		if !seenFiles[f] {
			t.Errorf("sample %s listed in wantUnsupported has no RayCluster", f)
		}
	}
	t.Logf("sample tally: %d RayClusters from %d files: %d ready, %d ready and reporting UnsupportedFeature, %d failed; all done in %s",
		len(results), len(seenFiles), ready, readyUnsupported, failed, time.Since(start).Round(time.Millisecond))
}

// runSample applies one sample's RayCluster in a fresh namespace and waits for it.
func runSample(ctx context.Context, cl client.Client, i int, s sample) (bool, []string, string) {
	ns := strings.Trim(dnsUnsafe.ReplaceAllString(strings.ToLower(fmt.Sprintf("s%02d-%s", i, strings.TrimSuffix(s.file, ".yaml"))), "-"), "-")
	if len(ns) > 63 {
		ns = strings.TrimRight(ns[:63], "-")
	}
	if err := testutil.CreateNamespace(ctx, cl, ns); err != nil {
		return false, nil, "create namespace: " + err.Error()
	}
	rc := s.cluster.DeepCopy()
	rc.Namespace = ns
	// Service accounts the templates name must exist, or admission rejects the pods; the samples create them
	// alongside with RBAC the dev cluster does not need.
	for _, tmpl := range templates(rc) {
		if sa := tmpl.Spec.ServiceAccountName; sa != "" {
			err := cl.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}})
			if err != nil && !strings.Contains(err.Error(), "already exists") {
				return false, nil, "create service account: " + err.Error()
			}
		}
	}
	if err := cl.Create(ctx, rc); err != nil {
		return false, nil, "create RayCluster: " + err.Error()
	}
	var last string
	for {
		got := &rayv1.RayCluster{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(rc), got); err != nil {
			return false, nil, err.Error()
		}
		var unsupported []string
		if c := meta.FindStatusCondition(got.Status.Conditions, raycluster.ConditionUnsupportedFeature); c != nil && c.Status == metav1.ConditionTrue {
			unsupported = parseUnsupported(c.Message)
		}
		pods := &corev1.PodList{}
		if err := cl.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{rayv1.LabelCluster: rc.Name}); err != nil {
			return false, nil, err.Error()
		}
		allReady := len(pods.Items) == int(got.Status.DesiredWorkerReplicas)+1
		for _, p := range pods.Items {
			allReady = allReady && podReady(&p)
		}
		if got.Status.State == rayv1.Ready && allReady {
			return true, unsupported, ""
		}
		last = fmt.Sprintf("state %q, %d pods (%d desired workers), conditions %s", got.Status.State, len(pods.Items), got.Status.DesiredWorkerReplicas, conditionSummary(got.Status.Conditions))
		for _, p := range pods.Items {
			if !podReady(&p) {
				last += fmt.Sprintf("; pod %s %s %s", p.Name, p.Status.Phase, podMessage(&p))
				break
			}
		}
		select {
		case <-ctx.Done():
			return false, unsupported, "timed out: " + last
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func parseUnsupported(msg string) []string {
	_, list, ok := strings.Cut(msg, ": ")
	if !ok {
		return []string{msg}
	}
	return strings.Split(list, ", ")
}

func conditionSummary(cs []metav1.Condition) string {
	var b bytes.Buffer
	for _, c := range cs {
		fmt.Fprintf(&b, "%s=%s(%s) ", c.Type, c.Status, c.Reason)
	}
	return b.String()
}

func podMessage(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return c.Message
		}
	}
	return ""
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
