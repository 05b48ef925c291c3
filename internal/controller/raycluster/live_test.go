package raycluster

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// countingReader answers every Get with the cluster's metadata, counting the calls.
type countingReader struct {
	client.Reader
	uid  types.UID
	gets int
}

func (c *countingReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	c.gets++
	obj.SetName(key.Name)
	obj.SetNamespace(key.Namespace)
	obj.SetUID(c.uid)
	return nil
}

// A new cluster's first pods are created without reading the cluster from the API server; a cluster that has had
// pods (made by this process, or reported in its status) or is older than newClusterAge is read first.
func TestClusterLiveReadsOnlyWhenPodsCouldHaveExisted(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "rc"}
	newCluster := func() *rayv1.RayCluster {
		return &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: "u1",
			CreationTimestamp: metav1.NewTime(time.Now().Add(-5 * time.Second))}}
	}
	for _, tc := range []struct {
		name     string
		change   func(r *Reconciler, run *run)
		wantRead bool
	}{
		{"new cluster", func(*Reconciler, *run) {}, false},
		{"status reported", func(_ *Reconciler, run *run) { run.c.Status.State = rayv1.Ready }, true},
		{"conditions reported", func(_ *Reconciler, run *run) {
			run.c.Status.Conditions = []metav1.Condition{{Type: string(rayv1.HeadPodReady), Status: metav1.ConditionFalse}}
		}, true},
		{"status reported without conditions (RayClusterStatusConditions off)", func(_ *Reconciler, run *run) {
			run.c.Generation, run.c.Status.ObservedGeneration = 1, 1
		}, true},
		{"pods observed", func(_ *Reconciler, run *run) { run.obs.pods = []corev1.Pod{{}} }, true},
		{"pods made by this process", func(r *Reconciler, run *run) { r.madePods.Store(key, types.UID("u1")) }, true},
		{"pods made for an older cluster of the same name", func(r *Reconciler, run *run) { r.madePods.Store(key, types.UID("u0")) }, false},
		{"older than newClusterAge", func(_ *Reconciler, run *run) {
			run.c.CreationTimestamp = metav1.NewTime(time.Now().Add(-2 * newClusterAge))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reader := &countingReader{uid: "u1"}
			r := newReconciler(nil, reader, nil, Options{})
			run := newRun(newCluster(), key)
			tc.change(r, run)
			live, err := r.clusterLive(context.Background(), run)
			if err != nil || !live {
				t.Fatalf("clusterLive = %v, %v; want live", live, err)
			}
			if read := reader.gets > 0; read != tc.wantRead {
				t.Errorf("read the cluster from the API server: %v, want %v", read, tc.wantRead)
			}
		})
	}
	// A cluster the API server no longer has (another UID under the name) is not live.
	r := newReconciler(nil, &countingReader{uid: "other"}, nil, Options{})
	run := newRun(newCluster(), key)
	run.c.Status.State = rayv1.Ready
	if live, err := r.clusterLive(context.Background(), run); err != nil || live {
		t.Errorf("clusterLive of a replaced cluster = %v, %v; want not live", live, err)
	}
}
