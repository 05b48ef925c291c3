package real

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	"github.com/manta-dev/manta/internal/controller/imagepulljob"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/devcluster/images"
	"github.com/manta-dev/manta/internal/testutil"
)

// movingRepo is the repository whose tag the ImagePullJob step moves; the registry sees it as library/moving.
const (
	movingImage = "docker.io/library/moving:v1"
	movingRepo  = "library/moving"
)

// testImagePullJob: ImagePullJobs pull onto the real node from the dev cluster's registry, with Manta's puller image
// (built here from cmd/puller and pushed under the operator's default --puller-image). The tag moves under the
// jobs, and the registry's request log and containerd's image store on the node tell what the node fetched:
//   - Always, first pull: the node fetches the tag's manifest and layer;
//   - the tag moved, Always again: the node fetches the new manifest and layer, and containerd's moving:v1 names the
//     new digest;
//   - the tag moved once more, IfNotPresent: the job completes with no manifest request for the repository
//     (the job's completion is the barrier), and containerd's moving:v1 still names the previous digest;
//   - a tag the registry lacks: the node fails with ImageNotFound, naming the pull's "not found", after the
//     registry answered 404 for that manifest.
func testImagePullJob(t *testing.T, ctx context.Context, e *env) {
	ns := e.namespace(t, ctx, "imagepull")
	dir := t.TempDir()
	e.pushPullerImage(t, ctx, dir)

	push := func(name, content string) v1.Image {
		t.Helper()
		img, err := images.FromFiles(filepath.Join(dir, name), movingImage,
			[]images.File{{Name: "version", Mode: 0o644, Data: []byte(content + "\n")}}, v1.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := images.Push(ctx, img, e.cluster.RegistryHost(), &http.Transport{Proxy: nil}); err != nil {
			t.Fatal(err)
		}
		return testutil.LayoutImage(t, img.Path)
	}
	run := func(name string, policy mantav1alpha1.ImagePullPolicy) (requests []devcluster.RegistryRequest, took time.Duration) {
		t.Helper()
		mark := len(e.cluster.RegistryRequests())
		start := time.Now()
		job := e.runImagePullJob(t, ctx, ns, name, movingImage, policy, 1)
		if job.Status.Succeeded != 1 || job.Status.Failed != 0 {
			t.Fatalf("ImagePullJob %s: %d succeeded, %d failed, want 1, 0: %+v", name, job.Status.Succeeded, job.Status.Failed, job.Status)
		}
		return registryRequestsOf(e.cluster.RegistryRequests()[mark:], movingRepo), time.Since(start)
	}

	// Each phase moves the tag to new content, then runs a job; the node holds the content of the phase named by
	// onNode afterwards, and fetched it from the registry when onNode is the phase itself.
	phases := []struct {
		job, content string
		policy       mantav1alpha1.ImagePullPolicy
		onNode       int
	}{
		{"always-a", "a", mantav1alpha1.PullAlways, 0},
		{"always-b", "b", mantav1alpha1.PullAlways, 1},
		{"ifnotpresent-c", "c", mantav1alpha1.PullIfNotPresent, 1},
	}
	var pushed []v1.Image
	for i, p := range phases {
		pushed = append(pushed, push(p.content, p.content))
		reqs, took := run(p.job, p.policy)
		t.Logf("%s, %s pushed under %s (%s): %s", p.job, digestOf(t, pushed[i]), movingImage, took.Round(time.Millisecond), summarize(reqs))
		if p.onNode == i {
			wantFetched(t, p.job, reqs, pushed[i])
		} else {
			for _, r := range reqs {
				if r.Kind() == "manifests" || r.Kind() == "blobs" {
					t.Errorf("%s with the image on the node: the registry served %s %s", p.job, r.Method, r.Path)
				}
			}
		}
		if got, want := e.containerdDigest(t, ctx, movingImage), digestOf(t, pushed[p.onNode]); got != want {
			t.Errorf("after %s containerd's %s is %s, want %s (pushed for %s)", p.job, movingImage, got, want, phases[p.onNode].job)
		}
	}

	// A tag the registry lacks: one attempt, which the kubelet reports as ErrImagePull with containerd's words.
	const missing = "docker.io/library/moving:missing"
	mark := len(e.cluster.RegistryRequests())
	start := time.Now()
	job := e.runImagePullJob(t, ctx, ns, "missing", missing, mantav1alpha1.PullAlways, 0)
	took := time.Since(start)
	reqs := registryRequestsOf(e.cluster.RegistryRequests()[mark:], movingRepo)
	t.Logf("missing tag (%s): %s; failed nodes %+v", took.Round(time.Millisecond), summarize(reqs), job.Status.FailedNodes)
	if len(job.Status.FailedNodes) != 1 || job.Status.FailedNodes[0].Name != devcluster.RealNodeName ||
		job.Status.FailedNodes[0].Reason != imagepulljob.ReasonImageNotFound || !strings.Contains(job.Status.FailedNodes[0].Message, "not found") {
		t.Errorf("missing tag: failed nodes %+v, want %s with reason %s and the pull's \"not found\"", job.Status.FailedNodes, devcluster.RealNodeName, imagepulljob.ReasonImageNotFound)
	}
	notFound := 0
	for _, r := range reqs {
		if r.Kind() == "manifests" && r.Ref() == "missing" && r.Status == http.StatusNotFound {
			notFound++
		}
	}
	if notFound == 0 {
		t.Errorf("the registry answered no 404 for manifests/missing: %s", summarize(reqs))
	}
	// The recorder sends events after the status write, asynchronously.
	waitFor(t, ctx, time.Minute, "PullFailed event naming "+imagepulljob.ReasonImageNotFound+" on ImagePullJob missing", func() (bool, string) {
		evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=missing"})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range evs.Items {
			if ev.Reason == "PullFailed" && strings.Contains(ev.Message, imagepulljob.ReasonImageNotFound) {
				t.Logf("event %s: %s", ev.Reason, ev.Message)
				return true, ""
			}
			seen = append(seen, ev.Reason+": "+ev.Message)
		}
		return false, fmt.Sprintf("events: %q", seen)
	})
	e.deleteNamespace(t, ctx, ns)
}

// pushPullerImage builds the puller (as Manta's Dockerfile does) into a one-file image and pushes it under the
// operator's default --puller-image, which the dev cluster's registry does not otherwise serve.
func (e *env) pushPullerImage(t *testing.T, ctx context.Context, dir string) {
	t.Helper()
	bin := filepath.Join(dir, "puller")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/puller")
	cmd.Dir = testutil.MustRepoRoot(t)
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/puller: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.FromFiles(filepath.Join(dir, "manta-image"), imagepulljob.DefaultPullerImage,
		[]images.File{{Name: strings.TrimPrefix(imagepulljob.DefaultPullerBinaryPath, "/"), Mode: 0o755, Data: data}},
		v1.Config{User: "65532:65532"})
	if err != nil {
		t.Fatal(err)
	}
	if err := images.Push(ctx, img, e.cluster.RegistryHost(), &http.Transport{Proxy: nil}); err != nil {
		t.Fatal(err)
	}
}

// runImagePullJob creates an ImagePullJob for the real node and waits for it to complete.
func (e *env) runImagePullJob(t *testing.T, ctx context.Context, ns, name, image string, policy mantav1alpha1.ImagePullPolicy, backoff int32) *mantav1alpha1.ImagePullJob {
	t.Helper()
	job := &mantav1alpha1.ImagePullJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: mantav1alpha1.ImagePullJobSpec{
			Image:           image,
			ImagePullPolicy: policy,
			Selector:        &mantav1alpha1.ImagePullJobNodeSelector{Names: []string{devcluster.RealNodeName}},
			PullPolicy:      &mantav1alpha1.PullPolicy{TimeoutSeconds: ptrTo(int32(120)), BackoffLimit: &backoff},
		},
	}
	if err := e.cl.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	var got mantav1alpha1.ImagePullJob
	waitFor(t, ctx, 4*time.Minute, "ImagePullJob "+name+" complete", func() (bool, string) {
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(job), &got); err != nil {
			return false, err.Error()
		}
		for _, c := range got.Status.Conditions {
			if c.Type == imagepulljob.ConditionComplete && c.Status == metav1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("status %+v; %s", got.Status, e.nsReport(ctx, ns))
	})
	return &got
}

// containerdDigest is the digest containerd on the real node holds for ref (ctr images ls in the kubelet's
// namespace), "" when it has none.
func (e *env) containerdDigest(t testing.TB, ctx context.Context, ref string) string {
	t.Helper()
	ctr := filepath.Join(filepath.Dir(e.kubectl), "ctr")
	out, err := exec.CommandContext(ctx, ctr, "--address", e.cluster.ContainerdSocket(), "-n", "k8s.io", "images", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images ls: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == ref {
			return f[2]
		}
	}
	return ""
}

func digestOf(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// wantFetched checks that the node fetched img: its manifest (GET by tag or by its digest) and its one layer.
func wantFetched(t *testing.T, what string, reqs []devcluster.RegistryRequest, img v1.Image) {
	t.Helper()
	ls, err := img.Layers()
	if err != nil || len(ls) != 1 {
		t.Fatalf("%d layers: %v", len(ls), err)
	}
	layer, err := ls[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	manifest, gotLayer := false, false
	for _, r := range reqs {
		if r.Method != http.MethodGet || r.Status != http.StatusOK {
			continue
		}
		manifest = manifest || (r.Kind() == "manifests" && (r.Ref() == "v1" || r.Ref() == digestOf(t, img)))
		gotLayer = gotLayer || (r.Kind() == "blobs" && r.Ref() == layer.String())
	}
	if !manifest || !gotLayer {
		t.Errorf("%s: manifest fetched %v, layer %s fetched %v: %s", what, manifest, layer, gotLayer, summarize(reqs))
	}
}

func registryRequestsOf(reqs []devcluster.RegistryRequest, repo string) []devcluster.RegistryRequest {
	var out []devcluster.RegistryRequest
	for _, r := range reqs {
		if r.Repo() == repo {
			out = append(out, r)
		}
	}
	return out
}

// summarize counts requests by method, kind and status: "GET manifests 200 ×1, HEAD manifests 200 ×1, ...".
func summarize(reqs []devcluster.RegistryRequest) string {
	counts := map[string]int{}
	var order []string
	for _, r := range reqs {
		k := fmt.Sprintf("%s %s %d", r.Method, r.Kind(), r.Status)
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	if len(order) == 0 {
		return "no requests"
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%s ×%d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}
