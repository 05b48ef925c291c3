package operator

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
)

// benchLikeCluster is the bench's RayCluster (test/bench/harness_test.go rayCluster) as the API server returns it
// once the operator has made it ready.
func benchLikeCluster(i int) *rayv1.RayCluster {
	podTemplate := func(container, cpu, mem string) corev1.PodTemplateSpec {
		rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: container, Image: "rayproject/ray:2.52.0",
			Resources: corev1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()},
		}}}}
	}
	now := metav1.NewTime(time.Unix(1780000000, 0))
	name := fmt.Sprintf("bench-%d", i)
	return &rayv1.RayCluster{
		TypeMeta: metav1.TypeMeta{APIVersion: "ray.io/v1", Kind: "RayCluster"},
		ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("bench-ns-%d", i%10), Name: name,
			Labels: map[string]string{"manta.dev/bench-run": "run-1"}, UID: types.UID(fmt.Sprintf("0a1b2c3d-0000-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprint(100000 + i), Generation: 1, CreationTimestamp: now},
		Spec: rayv1.RayClusterSpec{
			RayVersion: "2.52.0",
			HeadGroupSpec: rayv1.HeadGroupSpec{
				RayStartParams: map[string]string{"dashboard-host": "0.0.0.0"},
				Template:       podTemplate("ray-head", "1", "2Gi"),
			},
			WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{
				GroupName: "small-group", Replicas: ptr.To[int32](3), MinReplicas: ptr.To[int32](3), MaxReplicas: ptr.To[int32](3),
				NumOfHosts: 1, RayStartParams: map[string]string{}, Template: podTemplate("ray-worker", "1", "1Gi"),
			}},
		},
		Status: rayv1.RayClusterStatus{
			State: rayv1.Ready, DesiredCPU: resource.MustParse("4"), DesiredMemory: resource.MustParse("5Gi"),
			DesiredGPU: resource.MustParse("0"), DesiredTPU: resource.MustParse("0"), LastUpdateTime: &now,
			StateTransitionTimes: map[rayv1.ClusterState]*metav1.Time{rayv1.Ready: &now},
			Endpoints:            map[string]string{"client": "10001", "dashboard": "8265", "gcs-server": "6379", "metrics": "8080"},
			Head:                 rayv1.HeadInfo{PodIP: fmt.Sprintf("10.1.%d.%d", i/250, i%250), ServiceIP: "None", PodName: name + "-head-x7k2p", ServiceName: name + "-head-svc"},
			Conditions: []metav1.Condition{
				{Type: "HeadPodReady", Status: "True", Reason: "HeadPodRunningAndReady", LastTransitionTime: now},
				{Type: "RayClusterProvisioned", Status: "True", Reason: "AllPodRunningAndReadyFirstTime", Message: "All Ray Pods are ready for the first time", LastTransitionTime: now},
				{Type: "RayClusterReplicaFailure", Status: "False", Reason: "", LastTransitionTime: now},
			},
			ReadyWorkerReplicas: 3, AvailableWorkerReplicas: 3, DesiredWorkerReplicas: 3, MinWorkerReplicas: 3, MaxWorkerReplicas: 3,
			ObservedGeneration: 1,
		},
	}
}

// benchLikePod is a pod of c as the API server returns it once a (fake) kubelet has made it ready: the operator's
// pod with the API server's defaults and a status.
func benchLikePod(c *rayv1.RayCluster, worker int) *corev1.Pod {
	var p *corev1.Pod
	if worker < 0 {
		p = clusterbuild.HeadPod(c, clusterbuild.PodOptions{TemplateHash: "5d8f7c9b4"})
		p.Name = c.Name + "-head-x7k2p"
	} else {
		p = clusterbuild.WorkerPod(c, &c.Spec.WorkerGroupSpecs[0], clusterbuild.PodOptions{TemplateHash: "6c9d8e7f5"})
		p.Name = fmt.Sprintf("%s-small-group-worker-%d", c.Name, worker)
	}
	now := metav1.NewTime(time.Unix(1780000000, 0))
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	p.Namespace = c.Namespace
	p.UID = types.UID(fmt.Sprintf("9f8e7d6c-0000-4000-8000-%012d", worker+10))
	p.ResourceVersion = "123456"
	p.CreationTimestamp = now
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "manta", Operation: "Update", APIVersion: "v1", Time: &now}}
	p.Spec.NodeName = "kwok-node-3"
	p.Spec.SchedulerName = "default-scheduler"
	p.Spec.ServiceAccountName = "default"
	p.Spec.DeprecatedServiceAccount = "default"
	p.Spec.DNSPolicy = corev1.DNSClusterFirst
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	p.Spec.Priority = ptr.To[int32](0)
	p.Spec.EnableServiceLinks = ptr.To(true)
	p.Spec.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
	for i := range p.Spec.Containers {
		ct := &p.Spec.Containers[i]
		ct.TerminationMessagePath = "/dev/termination-log"
		ct.TerminationMessagePolicy = corev1.TerminationMessageReadFile
		ct.ImagePullPolicy = corev1.PullIfNotPresent
	}
	p.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, HostIP: "10.0.0.3", PodIP: fmt.Sprintf("10.1.0.%d", worker+10), StartTime: &now, QOSClass: corev1.PodQOSGuaranteed,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	for _, ct := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: ct.Name, Image: ct.Image, ImageID: "docker.io/" + ct.Image + "@sha256:0123", ContainerID: "containerd://abc",
			Ready: true, Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return p
}

// heapPer is the heap each of n objects made by mk retains, in bytes.
func heapPer(n int, mk func(i int) any) float64 {
	keep := make([]any, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = mk(i)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// What a cached pod, RayCluster and Service of the bench take in the heap, stripped alone (stripPod, stripUnread)
// and as the caches' transforms make them (interned, the RayClusters' ResourceLists shared, the pods' unread
// conditions dropped), measured on 2,000 of each.
func TestCachedObjectSizes(t *testing.T) {
	const n = 2000
	pb := protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme)
	var podBytes [2]bytes.Buffer
	c := benchLikeCluster(7)
	for i, p := range []*corev1.Pod{benchLikePod(c, -1), benchLikePod(c, 1)} {
		if err := pb.Encode(p, &podBytes[i]); err != nil {
			t.Fatal(err)
		}
	}
	decodePod := func(i int) *corev1.Pod {
		obj, _, err := pb.Decode(podBytes[i%2].Bytes(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*corev1.Pod)
	}
	js, rcs := clusterJSON(t, 16)
	decodeRC := func(i int) *rayv1.RayCluster {
		obj, _, err := js.Decode(rcs[i%len(rcs)], nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*rayv1.RayCluster)
	}
	svc := clusterbuild.HeadService(c)
	svc.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
	svc.UID, svc.ResourceVersion, svc.CreationTimestamp = "5e4d3c2b-0000-4000-8000-000000000001", "123456", metav1.Now()
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "None", []string{"None"}
	svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = []corev1.IPFamily{corev1.IPv4Protocol}, ptr.To(corev1.IPFamilyPolicySingleStack)
	var svcBytes bytes.Buffer
	if err := pb.Encode(svc, &svcBytes); err != nil {
		t.Fatal(err)
	}
	decodeSvc := func(int) any {
		obj, _, err := pb.Decode(svcBytes.Bytes(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	measure := func(what string, before, after func(i int) any, most float64) {
		t.Helper()
		b, a := heapPer(n, before), heapPer(n, after)
		t.Logf("a cached %s: %5.0f B stripped alone, %5.0f B as the cache's transform makes it (%.0f%%)", what, b, a, 100*a/b)
		if a > most*b {
			t.Errorf("a cached %s takes %.0f B, more than %.0f%% of the %.0f B it took", what, a, 100*most, b)
		}
	}
	// The bounds are well above what is measured (pod 70%, RayCluster 62%, Service 85%): they catch a transform
	// that stops interning, not noise.
	measure("pod", func(i int) any { o, _ := stripPod(decodePod(i)); return o },
		func(i int) any { o, _ := cachePod(decodePod(i)); return o }, 0.85)
	measure("RayCluster", func(i int) any { o, _ := stripUnread(decodeRC(i)); return o },
		func(i int) any { o, _ := cacheObject(decodeRC(i)); return o }, 0.75)
	measure("Service", func(i int) any { o, _ := stripUnread(decodeSvc(i)); return o },
		func(i int) any { o, _ := cacheObject(decodeSvc(i)); return o }, 0.95)
}

// clusterJSON is n bench RayClusters as the API server sends them, and the serializer client-go decodes them with.
func clusterJSON(t *testing.T, n int) (*json.Serializer, [][]byte) {
	t.Helper()
	sch, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	js := json.NewSerializerWithOptions(json.DefaultMetaFactory, sch, sch, json.SerializerOptions{})
	rcs := make([][]byte, n)
	for i := range rcs {
		var b bytes.Buffer
		if err := js.Encode(benchLikeCluster(i), &b); err != nil {
			t.Fatal(err)
		}
		rcs[i] = b.Bytes()
	}
	return js, rcs
}

// decodedJSONClusters is n bench RayClusters (their names and UIDs differ), decoded from JSON.
func decodedJSONClusters(t *testing.T, n int) []*rayv1.RayCluster {
	t.Helper()
	js, raw := clusterJSON(t, n)
	out := make([]*rayv1.RayCluster, n)
	for i := range out {
		obj, _, err := js.Decode(raw[i], nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = obj.(*rayv1.RayCluster)
	}
	return out
}

func runtimeEncode(s *protobuf.Serializer, obj any) ([]byte, error) {
	var b bytes.Buffer
	err := s.Encode(obj.(k8sruntime.Object), &b)
	return b.Bytes(), err
}
