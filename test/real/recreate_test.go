package real

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/devcluster/images"
	"github.com/manta-dev/manta/internal/testutil"
)

// retaggedRay is a second tag of the dev cluster's Ray image, which the test pushes to the node's registry: a
// real image change for the kubelet to pull, with the same Ray inside.
const retaggedRay = "rayproject/ray:2.52.0-retagged"

// testRayClusterRecreate: a RayCluster (head and one worker) with upgradeStrategy Recreate reaches ready; changing
// its Ray image's tag deletes every pod and makes new ones (new UIDs, a new template hash annotation, the new
// image, which the kubelet's Pulled events name: pulled, or already present on the node),
// which run and pass their readiness probes, and the cluster is ready again with its worker.
func testRayClusterRecreate(t *testing.T, ctx context.Context, e *env) {
	pushRetaggedRay(t, ctx, e)
	ns := e.namespace(t, ctx, "recreate")
	var rc rayv1.RayCluster
	readSample(t, "raycluster.yaml", &rc)
	rc.Name, rc.Namespace = "recreate", ns
	rc.Spec.WorkerGroupSpecs[0].Replicas = ptr.To(int32(1))
	rc.Spec.UpgradeStrategy = &rayv1.RayClusterUpgradeStrategy{Type: ptr.To(rayv1.RayClusterRecreate)}
	fitRayResources(&rc.Spec)
	if err := e.cl.Create(ctx, &rc); err != nil {
		t.Fatal(err)
	}
	e.waitClusterReady(t, ctx, &rc, 1)
	before := e.clusterPods(t, ctx, &rc)
	if len(before) != 2 {
		t.Fatalf("%d pods before the change, want a head and a worker: %s", len(before), e.nsReport(ctx, ns))
	}

	var cur rayv1.RayCluster
	if err := e.cl.Get(ctx, client.ObjectKeyFromObject(&rc), &cur); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.HeadGroupSpec.Template.Spec.Containers[0].Image = retaggedRay
	cur.Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Image = retaggedRay
	if err := e.cl.Patch(ctx, &cur, patch); err != nil {
		t.Fatal(err)
	}
	oldByType := map[string]corev1.Pod{}
	for _, p := range before {
		oldByType[p.Labels[rayv1.LabelNodeType]] = p
	}
	waitFor(t, ctx, 10*time.Minute, "new head and worker pods of the new image, ready", func() (bool, string) {
		var got rayv1.RayCluster
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(&rc), &got); err != nil {
			return false, err.Error()
		}
		all, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: rayv1.LabelCluster + "=" + rc.Name})
		if err != nil {
			return false, err.Error()
		}
		if len(all.Items) != 2 {
			return false, fmt.Sprintf("%d pods (old ones terminating included); %s", len(all.Items), e.nsReport(ctx, ns))
		}
		for _, p := range all.Items {
			old := oldByType[p.Labels[rayv1.LabelNodeType]]
			switch {
			case p.UID == old.UID:
				return false, fmt.Sprintf("%s pod %s is still the old one; %s", p.Labels[rayv1.LabelNodeType], p.Name, e.nsReport(ctx, ns))
			case !testutil.PodReady(&p):
				return false, fmt.Sprintf("new pod %s not ready; %s", p.Name, e.nsReport(ctx, ns))
			}
		}
		return got.Status.State == rayv1.Ready && got.Status.ReadyWorkerReplicas == 1,
			fmt.Sprintf("cluster state %q, %d ready workers", got.Status.State, got.Status.ReadyWorkerReplicas)
	})
	for _, p := range e.clusterPods(t, ctx, &rc) {
		typ := p.Labels[rayv1.LabelNodeType]
		old := oldByType[typ]
		oldHash, newHash := old.Annotations[clusterbuild.AnnotationPodTemplateHash], p.Annotations[clusterbuild.AnnotationPodTemplateHash]
		if newHash == "" || newHash == oldHash {
			t.Errorf("%s pod %s: template hash %q, was %q; want a new one", typ, p.Name, newHash, oldHash)
		}
		if img := p.Spec.Containers[0].Image; img != retaggedRay {
			t.Errorf("%s pod %s has image %q, want %s", typ, p.Name, img, retaggedRay)
		}
		// The container status names the image by whichever of its tags containerd lists first (both tags are one
		// image), so the kubelet's Pulled event is what says the new tag was resolved.
		evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name + ",reason=Pulled"})
		if err != nil {
			t.Fatal(err)
		}
		pulled := ""
		for _, ev := range evs.Items {
			if strings.Contains(ev.Message, `"`+retaggedRay+`"`) {
				pulled = ev.Message
			}
		}
		if pulled == "" {
			t.Errorf("%s pod %s: no Pulled event for %s: %s", typ, p.Name, retaggedRay, e.podReport(ctx, ns, p.Name))
		}
		t.Logf("%s: pod %s (uid %s, hash %s) replaced by %s (uid %s, hash %s); kubelet: %s", typ, old.Name, old.UID, oldHash, p.Name, p.UID, newHash, pulled)
	}
	e.deleteNamespace(t, ctx, ns)
}

// clusterPods lists the cluster's pods that are not being deleted.
func (e *env) clusterPods(t *testing.T, ctx context.Context, rc *rayv1.RayCluster) []corev1.Pod {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(rc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: rayv1.LabelCluster + "=" + rc.Name})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// pushRetaggedRay pushes the dev cluster's Ray image (built already: Ensure only checks its stamp) under a second
// tag to the node's registry.
func pushRetaggedRay(t *testing.T, ctx context.Context, e *env) {
	t.Helper()
	imgs, err := images.Ensure(ctx, filepath.Join(testutil.MustRepoRoot(t), "bin"), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		if img.Ref != images.RayRef {
			continue
		}
		img.Ref = "docker.io/" + retaggedRay
		tr := &http.Transport{Proxy: nil}
		defer tr.CloseIdleConnections()
		if err := images.Push(ctx, img, e.cluster.RegistryHost(), tr); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("the dev cluster's images hold no %s", images.RayRef)
}
