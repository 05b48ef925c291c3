package envtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

// Against a real API server: the operator's pod cache, fed through the pruned watch that podWatchDecoder decodes,
// holds what stripPod makes of each pod as the API server has it (the cache of client-go's own decoding of a plain
// watch), through creates and status updates.
func TestRayPodCacheFromPrunedWatch(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	// Two operators' managers: mgr's pod watch is pruned and decoded by podWatchDecoder, plain's is neither, so
	// plain's cache holds what stripPod (the pod cache's transform) makes of each pod as client-go decoded it.
	sw := optimize.Off()
	mgr, err := operator.NewManager(cfg, operator.Options{Optimizations: sw})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := operator.NewManager(cfg, operator.Options{Optimizations: optimize.Off(optimize.PodWatchPruning, optimize.PodWatchDecoding)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.RunManager(t, mgr)
	testutil.RunManager(t, plain)
	before, decodedBefore := sw.Count(optimize.PodWatchPruning), sw.Count(optimize.PodWatchDecoding)
	// Informers start with the cache: ask for the pod informer first so that it watches from the start.
	for _, m := range []ctrl.Manager{mgr, plain} {
		if _, err := m.GetCache().GetInformer(ctx, &corev1.Pod{}); err != nil {
			t.Fatal(err)
		}
		m.GetCache().WaitForCacheSync(ctx)
	}
	var pods []*corev1.Pod
	for i := range 3 {
		p := &corev1.Pod{}
		p.Spec = corev1.PodSpec{
			Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray:2.52.0",
				Command: []string{"/bin/bash", "-c"}, Args: []string{"ray start --head"},
				Env:          []corev1.EnvVar{{Name: "RAY_CLUSTER_NAME", Value: "c"}, {Name: "RAY_PORT", Value: "6379"}},
				Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
				Ports:        []corev1.ContainerPort{{Name: "gcs", ContainerPort: 6379}},
				VolumeMounts: []corev1.VolumeMount{{Name: "shm", MountPath: "/dev/shm"}}}},
			Volumes:     []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
			Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}},
		}
		p.ObjectMeta = metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("ray-%d", i),
			Labels: map[string]string{rayv1.LabelNodeType: "head", rayv1.LabelCluster: "c"}}
		if err := cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", HostIP: "192.168.0.1",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "ray-head", Ready: true, ImageID: "sha256:1", ContainerID: "containerd://1"}}}
		if err := cl.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	for _, p := range pods {
		testutil.Eventually(t, 30*time.Second, "the cache holds "+p.Name+" as stripPod makes it", func() (bool, string) {
			server := &corev1.Pod{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(p), server); err != nil {
				return false, err.Error()
			}
			want := &corev1.Pod{}
			if err := plain.GetClient().Get(ctx, client.ObjectKeyFromObject(p), want); err != nil {
				return false, err.Error()
			}
			if want.ResourceVersion != server.ResourceVersion {
				return false, "the unpruned cache is at " + want.ResourceVersion + ", the API server at " + server.ResourceVersion
			}
			got := &corev1.Pod{}
			if err := mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
				return false, err.Error()
			}
			got.TypeMeta = metav1.TypeMeta{}
			want.TypeMeta = metav1.TypeMeta{}
			if diff := cmp.Diff(want, got); diff != "" {
				return false, diff
			}
			return true, ""
		})
	}
	if n := sw.Count(optimize.PodWatchPruning) - before; n < int64(len(pods)) {
		t.Errorf("%d pod watch events pruned, want at least %d", n, len(pods))
	}
	if n := sw.Count(optimize.PodWatchDecoding) - decodedBefore; n < int64(len(pods)) {
		t.Errorf("%d pod watch events decoded by podWatchDecoder, want at least %d", n, len(pods))
	}
}
