package podtrouble

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

var created = time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)

// pod is a Ray pod as the cache holds it, with the container statuses given.
func pod(name, nodeType string, statuses ...corev1.ContainerStatus) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{rayv1.LabelNodeType: nodeType},
			CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray:2.52.0"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: statuses,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}},
	}
}

func waiting(name, reason, msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Image: "rayproject/ray:2.52.0",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
}

// The messages below are in the forms kubelet v1.37 and containerd v2 write (pkg/kubelet/images, kubelet_pods.go,
// kuberuntime); pullNotFound is the dev cluster's real node's, for a tag its registry does not have (test/real).
const (
	pullNotFound = `rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/rayproject/ray:nope": failed to resolve image: docker.io/rayproject/ray:nope: not found`
	pullNoHost   = `failed to pull and unpack image "docker.io/rayproject/ray:2.52.0": failed to resolve reference "docker.io/rayproject/ray:2.52.0": failed to do request: Head "https://registry-1.docker.io/v2/rayproject/ray/manifests/2.52.0": dial tcp: lookup registry-1.docker.io: no such host`
)

func TestClassify(t *testing.T) {
	crashed := waiting("ray-head", "CrashLoopBackOff", `back-off 20s restarting failed container=ray-head pod=c-head-x_ns(uid)`)
	crashed.RestartCount = 2
	crashed.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error",
		Message: "starting\nTraceback (most recent call last):\n  boom\nValueError: bad config\n"}
	crashedQuiet := waiting("ray-head", "CrashLoopBackOff", "back-off 10s restarting failed container")
	crashedQuiet.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}
	unschedulable := pod("c-head-u", rayv1.NodeTypeHead)
	unschedulable.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable,
		Message: "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {kwok.x-k8s.io/node: fake}. " +
			"preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod,\n1 Preemption is not helpful for scheduling."}}
	initPull := pod("c-worker-i", rayv1.NodeTypeWorker)
	initPull.Spec.InitContainers = []corev1.Container{{Name: "wait-gcs", Image: "busybox:nope"}}
	initPull.Status.InitContainerStatuses = []corev1.ContainerStatus{waiting("wait-gcs", "ErrImagePull", pullNotFound)}
	initPull.Status.InitContainerStatuses[0].Image = "busybox:nope"
	deleting := pod("c-head-d", rayv1.NodeTypeHead, waiting("ray-head", "ErrImagePull", pullNotFound))
	deleting.DeletionTimestamp = &metav1.Time{Time: created}

	tests := []struct {
		name string
		pod  *corev1.Pod
		want *Cause
	}{
		{"running", pod("c-head-r", rayv1.NodeTypeHead, corev1.ContainerStatus{Name: "ray-head",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}), nil},
		{"creating", pod("c-head-c", rayv1.NodeTypeHead, waiting("ray-head", "ContainerCreating", "")), nil},
		{"not scheduled yet", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, nil},
		{"being deleted", deleting, nil},
		{"ErrImagePull, tag not found", pod("c-head-a", rayv1.NodeTypeHead, waiting("ray-head", "ErrImagePull", pullNotFound)), &Cause{
			Reason: ReasonImagePull, Pod: "c-head-a", Head: true, Container: "ray-head", Image: "rayproject/ray:2.52.0", ImageNotFound: true,
			Message: `container ray-head cannot pull image "rayproject/ray:2.52.0": ` + pullNotFound}},
		{"ImagePullBackOff carries the last pull's error", pod("c-head-b", rayv1.NodeTypeHead, waiting("ray-head", "ImagePullBackOff",
			`Back-off pulling image "rayproject/ray:2.52.0": ErrImagePull: `+pullNotFound)), &Cause{
			Reason: ReasonImagePull, Pod: "c-head-b", Head: true, Container: "ray-head", Image: "rayproject/ray:2.52.0", ImageNotFound: true,
			Message: `container ray-head cannot pull image "rayproject/ray:2.52.0": ` + pullNotFound}},
		{"ImagePullBackOff before any error is kept", pod("c-head-b", rayv1.NodeTypeHead, waiting("ray-head", "ImagePullBackOff",
			`Back-off pulling image "rayproject/ray:2.52.0"`)), &Cause{
			Reason: ReasonImagePull, Pod: "c-head-b", Head: true, Container: "ray-head", Image: "rayproject/ray:2.52.0",
			Message: `container ray-head cannot pull image "rayproject/ray:2.52.0": the kubelet is backing off after a failed pull`}},
		{"registry unreachable is not 'not found'", pod("c-head-n", rayv1.NodeTypeHead, waiting("ray-head", "ErrImagePull", pullNoHost)), &Cause{
			Reason: ReasonImagePull, Pod: "c-head-n", Head: true, Container: "ray-head", Image: "rayproject/ray:2.52.0",
			Message: `container ray-head cannot pull image "rayproject/ray:2.52.0": ` + pullNoHost}},
		{"RegistryUnavailable", pod("c-head-ru", rayv1.NodeTypeHead, waiting("ray-head", "RegistryUnavailable",
			"image pull failed for rayproject/ray:2.52.0 because the registry is unavailable: dial tcp 10.0.0.1:443: i/o timeout")), &Cause{
			Reason: ReasonImagePull, Pod: "c-head-ru", Head: true, Container: "ray-head", Image: "rayproject/ray:2.52.0",
			Message: `container ray-head cannot pull image "rayproject/ray:2.52.0": image pull failed for rayproject/ray:2.52.0 because the registry is unavailable: dial tcp 10.0.0.1:443: i/o timeout`}},
		{"init container's pull", initPull, &Cause{
			Reason: ReasonImagePull, Pod: "c-worker-i", Container: "wait-gcs", Image: "busybox:nope", ImageNotFound: true,
			Message: `container wait-gcs cannot pull image "busybox:nope": ` + pullNotFound}},
		{"InvalidImageName", pod("c-head-v", rayv1.NodeTypeHead, waiting("ray-head", "InvalidImageName",
			`Failed to apply default image tag "rayproject/Ray:2.52.0": couldn't parse image name "rayproject/Ray:2.52.0": invalid reference format: repository name (rayproject/Ray) must be lowercase`)), &Cause{
			Reason: ReasonInvalidImageName, Pod: "c-head-v", Head: true, Container: "ray-head", Image: "rayproject/ray:2.52.0",
			Message: `container ray-head has an invalid image name "rayproject/ray:2.52.0": Failed to apply default image tag "rayproject/Ray:2.52.0": couldn't parse image name "rayproject/Ray:2.52.0": invalid reference format: repository name (rayproject/Ray) must be lowercase`}},
		{"CrashLoopBackOff with a termination message", pod("c-head-x", rayv1.NodeTypeHead, crashed), &Cause{
			Reason: ReasonCrashLoop, Pod: "c-head-x", Head: true, Container: "ray-head", Image: "rayproject/ray:2.52.0",
			Message: `container ray-head keeps exiting: last exit code 3 (Error), termination message: starting | Traceback (most recent call last): | boom | ValueError: bad config`}},
		{"CrashLoopBackOff, OOMKilled", pod("c-head-o", rayv1.NodeTypeHead, crashedQuiet), &Cause{
			Reason: ReasonCrashLoop, Pod: "c-head-o", Head: true, Container: "ray-head", Image: "rayproject/ray:2.52.0",
			Message: `container ray-head keeps exiting: last exit code 137 (OOMKilled)`}},
		{"Unschedulable", unschedulable, &Cause{
			Reason: ReasonUnschedulable, Pod: "c-head-u", Head: true,
			Message: "no node can run it: 0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {kwok.x-k8s.io/node: fake}. " +
				"preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."}},
		{"missing Secret", pod("c-head-s", rayv1.NodeTypeHead, waiting("ray-head", "CreateContainerConfigError", `secret "db-password" not found`)), &Cause{
			Reason: ReasonCreateConfigError, Pod: "c-head-s", Head: true, Container: "ray-head", Image: "rayproject/ray:2.52.0",
			Missing: "Secret db-password", Message: `container ray-head cannot be created: secret "db-password" not found`}},
		{"missing ConfigMap", pod("c-head-m", rayv1.NodeTypeHead, waiting("ray-head", "CreateContainerConfigError", `configmap "ray-env" not found`)), &Cause{
			Reason: ReasonCreateConfigError, Pod: "c-head-m", Head: true, Container: "ray-head", Image: "rayproject/ray:2.52.0",
			Missing: "ConfigMap ray-env", Message: `container ray-head cannot be created: configmap "ray-env" not found`}},
		{"missing key of a Secret", pod("c-head-k", rayv1.NodeTypeHead, waiting("ray-head", "CreateContainerConfigError", `couldn't find key token in Secret ns1/creds`)), &Cause{
			Reason: ReasonCreateConfigError, Pod: "c-head-k", Head: true, Container: "ray-head", Image: "rayproject/ray:2.52.0",
			Missing: "key token of Secret creds", Message: `container ray-head cannot be created: couldn't find key token in Secret ns1/creds`}},
		{"other config error names nothing missing", pod("c-head-e", rayv1.NodeTypeHead, waiting("ray-head", "CreateContainerConfigError",
			`container has runAsNonRoot and image will run as root (pod: "c-head-e_ns(uid)", container: ray-head)`)), &Cause{
			Reason: ReasonCreateConfigError, Pod: "c-head-e", Head: true, Container: "ray-head", Image: "rayproject/ray:2.52.0",
			Message: `container ray-head cannot be created: container has runAsNonRoot and image will run as root (pod: "c-head-e_ns(uid)", container: ray-head)`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(tc.pod)
			if tc.want != nil && got != nil {
				tc.want.Created = tc.pod.CreationTimestamp.Time
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Classify (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPermanent(t *testing.T) {
	grace := 2 * time.Minute
	tests := []struct {
		name     string
		c        Cause
		now      time.Time
		want     bool
		wantWait time.Duration
	}{
		{"invalid image name", Cause{Reason: ReasonInvalidImageName}, created, true, 0},
		{"image not found", Cause{Reason: ReasonImagePull, ImageNotFound: true}, created, true, 0},
		{"registry unreachable", Cause{Reason: ReasonImagePull}, created.Add(time.Hour), false, 0},
		{"crash loop", Cause{Reason: ReasonCrashLoop}, created.Add(time.Hour), false, 0},
		{"unschedulable", Cause{Reason: ReasonUnschedulable}, created.Add(time.Hour), false, 0},
		{"missing Secret within the grace", Cause{Reason: ReasonCreateConfigError, Missing: "Secret x", Created: created}, created.Add(90 * time.Second), false, 30 * time.Second},
		{"missing Secret at the grace's end", Cause{Reason: ReasonCreateConfigError, Missing: "Secret x", Created: created}, created.Add(grace), true, 0},
		{"config error naming nothing missing", Cause{Reason: ReasonCreateConfigError, Created: created}, created.Add(time.Hour), false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, wait := tc.c.Permanent(tc.now, grace)
			if got != tc.want || wait != tc.wantWait {
				t.Errorf("Permanent = %v, %s; want %v, %s", got, wait, tc.want, tc.wantWait)
			}
		})
	}
}

func TestSummaryAndNew(t *testing.T) {
	var pods []corev1.Pod
	for _, n := range []string{"c-worker-g", "c-worker-f", "c-worker-e", "c-worker-d", "c-worker-c", "c-worker-b"} {
		pods = append(pods, *pod(n, rayv1.NodeTypeWorker, waiting("ray-worker", "ErrImagePull", pullNotFound)))
	}
	pods = append(pods, *pod("c-head-a", rayv1.NodeTypeHead, waiting("ray-head", "CrashLoopBackOff", "back-off")))
	pods = append(pods, *pod("c-worker-ok", rayv1.NodeTypeWorker))
	causes := Pods(pods)
	if len(causes) != 7 || causes[0].Pod != "c-head-a" || causes[1].Pod != "c-worker-b" {
		t.Fatalf("causes not the head's first, then by name: %+v", causes)
	}
	sum := Summary(causes)
	want := "pod c-head-a: CrashLoopBackOff: container ray-head keeps exiting; " +
		`pod c-worker-b: ErrImagePull: container ray-worker cannot pull image "rayproject/ray:2.52.0": ` + pullNotFound + "; "
	if !strings.HasPrefix(sum, want) || !strings.HasSuffix(sum, "; and 2 more pods cannot start") || strings.Contains(sum, "c-worker-f") {
		t.Errorf("Summary = %q", sum)
	}
	if got := New("", causes); len(got) != MaxListed {
		t.Errorf("New from nothing: %d causes, want %d", len(got), MaxListed)
	}
	if got := New(sum, causes); len(got) != 0 {
		t.Errorf("New from the same summary: %+v", got)
	}
	// The head's cause changes (its image is fixed, its command still fails): that is news; the workers' are not.
	head := *pod("c-head-a", rayv1.NodeTypeHead, waiting("ray-head", "ErrImagePull", pullNoHost))
	causes2 := Pods(append(pods[:6:6], head))
	got := New(sum, causes2)
	if len(got) != 1 || got[0].Pod != "c-head-a" || got[0].Reason != ReasonImagePull {
		t.Errorf("New after the head's cause changed: %+v", got)
	}
	if Summary(nil) != "" {
		t.Error("Summary of nothing is not empty")
	}
}

func TestTail(t *testing.T) {
	long := strings.Repeat("é", 150) // 300 bytes
	got := Tail(long, 200)
	if !strings.HasPrefix(got, "...") || len(got) > 203 || !strings.HasSuffix(got, "é") || strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("Tail cut a rune or kept too much: %q (%d bytes)", got, len(got))
	}
	if got := Tail("\n a \n\n b \n", 200); got != "a | b" {
		t.Errorf("Tail = %q", got)
	}
}
