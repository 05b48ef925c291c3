package imagepulljob

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestSelectNodes(t *testing.T) {
	all := nodes(
		makeNode("a").label("pool", "gpu").taint("nvidia.com/gpu", corev1.TaintEffectNoSchedule),
		makeNode("b").label("pool", "cpu"),
		makeNode("c").label("pool", "cpu").notReady(),
		makeNode("d").label("pool", "cpu").label(corev1.LabelOSStable, "windows"),
		makeNode("e").label("pool", "cpu").taint("soft", corev1.TaintEffectPreferNoSchedule),
	)
	podOn := func(name, node string, l map[string]string, phase corev1.PodPhase) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: l},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	}
	app := map[string]string{"app": "ray"}
	// The job's own selection, with the operator letting pullers tolerate every taint (--image-pull-tolerate-all-taints,
	// the behaviour before the policy existed); TestSecuritySelectNodesPolicy covers the operator's bounds.
	tolerateAll := Policy{TolerateAllTaints: true}
	cases := map[string]struct {
		job    *mantav1alpha1.ImagePullJob
		policy Policy
		pods   []corev1.Pod
		want   []string
	}{
		"unset selector: every eligible node, tainted ones too": {job: makeJob("j").obj(), policy: tolerateAll, want: []string{"a", "b", "e"}},
		"names":          {job: makeJob("j").names("b", "c", "zz").obj(), policy: tolerateAll, want: []string{"b"}},
		"label selector": {job: makeJob("j").matchLabels(map[string]string{"pool": "gpu"}).obj(), policy: tolerateAll, want: []string{"a"}},
		"explicit tolerations exclude untolerated NoSchedule taints": {
			job: makeJob("j").tolerations(corev1.Toleration{Key: "other", Operator: corev1.TolerationOpExists}).obj(), policy: tolerateAll, want: []string{"b", "e"}},
		"explicit empty tolerations": {job: makeJob("j").tolerations().obj(), policy: tolerateAll, want: []string{"b", "e"}},
		"gpu toleration": {
			job: makeJob("j").tolerations(corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}).obj(), policy: tolerateAll, want: []string{"a", "b", "e"}},
		// The operator's default: no taint is tolerated, whatever the job asks.
		"default policy: tainted nodes are not targeted": {job: makeJob("j").obj(), want: []string{"b", "e"}},
		"default policy: the job's gpu toleration does not reach the gpu node": {
			job: makeJob("j").tolerations(corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}).obj(), want: []string{"b", "e"}},
		"podSelector: nodes of running matching pods": {
			job: func() *mantav1alpha1.ImagePullJob {
				j := makeJob("j").obj()
				j.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: app}
				return j
			}(),
			pods: []corev1.Pod{
				podOn("p1", "b", app, corev1.PodRunning),
				podOn("p2", "e", app, corev1.PodSucceeded),
				podOn("p3", "a", map[string]string{"app": "other"}, corev1.PodRunning),
				podOn("p4", "", app, corev1.PodPending),
				podOn("p5", "a", app, corev1.PodPending),
			},
			policy: tolerateAll,
			want:   []string{"a", "b"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, _, err := SelectNodes(tc.job, all, tc.pods, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeHasImage(t *testing.T) {
	node := makeNode("n").images(
		"docker.io/rayproject/ray:2.9.0",
		"docker.io/rayproject/ray@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	).images("docker.io/library/busybox:latest").images("registry.example.com:5000/team/app:v1").obj()
	cases := map[string]bool{
		"rayproject/ray:2.9.0":                  true,
		"docker.io/rayproject/ray:2.9.0":        true,
		"index.docker.io/rayproject/ray:2.9.0":  true,
		"rayproject/ray:2.10.0":                 false,
		"rayproject/ray":                        false,
		"busybox":                               true,
		"busybox:latest":                        true,
		"library/busybox":                       true,
		"registry.example.com:5000/team/app:v1": true,
		"registry.example.com/team/app:v1":      false,
		"rayproject/ray@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef":       true,
		"rayproject/ray:2.9.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef": true,
		"rayproject/ray@sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff":       false,
	}
	for image, want := range cases {
		if got := nodeHasImage(&node, image); got != want {
			t.Errorf("nodeHasImage(%q) = %v, want %v", image, got, want)
		}
	}
}

func TestClassifyAttempt(t *testing.T) {
	job := makeJob("j").obj()
	digestJob := makeJob("j").obj()
	digestJob.Spec.Image = "example/app@sha256:4010af3c0b9e0d5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f"
	tagJob := makeJob("j").obj()
	tagJob.Spec.Image = "busybox:403"
	notFoundJob := makeJob("j").obj()
	notFoundJob.Spec.Image = "registry.example.com/notfound/app:v1"
	timeout := 10 * time.Minute
	cases := map[string]struct {
		pod                   corev1.Pod
		now                   time.Time
		want                  attemptResult
		wantReason, wantInMsg string
	}{
		"pending":              {pod: pullerPod(job, "n", 1, t0, nil), now: t0.Add(time.Minute), want: attemptRunning},
		"running means pulled": {pod: pullerPod(job, "n", 1, t0, running), now: t0, want: attemptSucceeded},
		"succeeded":            {pod: pullerPod(job, "n", 1, t0, succeededPod), now: t0, want: attemptSucceeded},
		"not found": {pod: pullerPod(job, "n", 1, t0, waiting("ErrImagePull", `failed to resolve reference "x": x: not found`)),
			now: t0, want: attemptFailed, wantReason: ReasonImageNotFound, wantInMsg: "not found"},
		"unauthorized": {pod: pullerPod(job, "n", 1, t0, waiting("ErrImagePull", "unexpected status: 401 Unauthorized")),
			now: t0, want: attemptFailed, wantReason: ReasonUnauthorized},
		// The image's digest or tag contains "401": the message still says not found.
		"not found, digest with 401": {pod: pullerPod(digestJob, "n", 1, t0, waiting("ErrImagePull",
			`Failed to pull image "example/app@sha256:4010af3c0b9e0d5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f": rpc error: code = NotFound desc = failed to resolve reference "docker.io/example/app@sha256:4010af3c0b9e0d5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f": not found`)),
			now: t0, want: attemptFailed, wantReason: ReasonImageNotFound},
		"not found, tag 403": {pod: pullerPod(tagJob, "n", 1, t0, waiting("ErrImagePull",
			`failed to resolve reference "docker.io/library/busybox:403": docker.io/library/busybox:403: not found`)),
			now: t0, want: attemptFailed, wantReason: ReasonImageNotFound},
		"unauthorized, image named notfound": {pod: pullerPod(notFoundJob, "n", 1, t0, waiting("ErrImagePull",
			`failed to resolve reference "registry.example.com/notfound/app:v1": pulling from host registry.example.com failed with status code [manifests v1]: 401 Unauthorized`)),
			now: t0, want: attemptFailed, wantReason: ReasonUnauthorized},
		"registry down, image named notfound": {pod: pullerPod(notFoundJob, "n", 1, t0, waiting("ErrImagePull",
			`failed to pull image "registry.example.com/notfound/app:v1": dial tcp 10.0.0.1:443: connect: connection refused`)),
			now: t0, want: attemptFailed, wantReason: "ErrImagePull"},
		"backoff": {pod: pullerPod(job, "n", 1, t0, waiting("ImagePullBackOff", "Back-off pulling image")),
			now: t0, want: attemptFailed, wantReason: "ErrImagePull"},
		"invalid name": {pod: pullerPod(job, "n", 1, t0, waiting("InvalidImageName", "bad")),
			now: t0, want: attemptFailed, wantReason: "InvalidImageName"},
		"create error after the pull counts as pulled": {pod: pullerPod(job, "n", 1, t0, waiting("CreateContainerError", "exec format error")),
			now: t0, want: attemptSucceeded},
		"timeout": {pod: pullerPod(job, "n", 1, t0, waiting("ContainerCreating", "")), now: t0.Add(timeout),
			want: attemptFailed, wantReason: ReasonTimeout, wantInMsg: "ContainerCreating"},
		"kubelet deadline": {pod: pullerPod(job, "n", 1, t0, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed; p.Status.Reason = "DeadlineExceeded" }),
			now: t0, want: attemptFailed, wantReason: ReasonTimeout},
		"evicted": {pod: pullerPod(job, "n", 1, t0, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed; p.Status.Reason = "Evicted" }),
			now: t0, want: attemptFailed, wantReason: "Evicted"},
		"failed after the container ran counts as pulled": {pod: pullerPod(job, "n", 1, t0, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: PullerContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
		}), now: t0, want: attemptSucceeded},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, reason, msg := classifyAttempt(&tc.pod, tc.now, timeout)
			if got != tc.want || reason != tc.wantReason {
				t.Fatalf("got (%v, %q, %q), want (%v, %q)", got, reason, msg, tc.want, tc.wantReason)
			}
			if tc.wantInMsg != "" && !contains(msg, tc.wantInMsg) {
				t.Errorf("message %q does not mention %q", msg, tc.wantInMsg)
			}
		})
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}
func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestStatusMessage(t *testing.T) {
	cases := []struct {
		st       mantav1alpha1.ImagePullJobStatus
		deadline bool
		want     string
	}{
		{mantav1alpha1.ImagePullJobStatus{Desired: 5, Succeeded: 1, Failed: 1}, false, "job is running, progress 40.0%"},
		{mantav1alpha1.ImagePullJobStatus{Desired: 3, Succeeded: 1}, false, "job is running, progress 33.3%"},
		{mantav1alpha1.ImagePullJobStatus{}, false, "job is running, no progress"},
		{mantav1alpha1.ImagePullJobStatus{Desired: 2, Succeeded: 2, CompletionTime: &metav1.Time{}}, false, "job has completed"},
		{mantav1alpha1.ImagePullJobStatus{Desired: 2, CompletionTime: &metav1.Time{}}, true, "job exceeds activeDeadlineSeconds"},
	}
	for _, tc := range cases {
		if got := StatusMessage(&tc.st, tc.deadline); got != tc.want {
			t.Errorf("StatusMessage(%+v) = %q, want %q", tc.st, got, tc.want)
		}
	}
}

func TestRetryBackoff(t *testing.T) {
	base := 10 * time.Second
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}
	for i, w := range want {
		if got := retryBackoff(base, int32(i+1)); got != w {
			t.Errorf("retryBackoff(attempt %d) = %s, want %s", i+1, got, w)
		}
	}
}

func TestTTLExpiry(t *testing.T) {
	j := makeJob("j").obj()
	if _, ok := ttlExpiry(j); ok {
		t.Fatal("active job has no TTL expiry")
	}
	j.Status.CompletionTime = &metav1.Time{Time: t0}
	if _, ok := ttlExpiry(j); ok {
		t.Fatal("no ttlSecondsAfterFinished: kept")
	}
	j.Spec.CompletionPolicy.TTLSecondsAfterFinished = ptr.To[int32](30)
	if got, ok := ttlExpiry(j); !ok || !got.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("expiry = %v %v", got, ok)
	}
}

func TestPodName(t *testing.T) {
	long := "a-very-long-image-pull-job-name-that-goes-on-and-on-and-on-and-on"
	n := PodName(long, "node-1", 3)
	if len(n) > 63 {
		t.Errorf("pod name %q is %d characters", n, len(n))
	}
	if PodName(long, "node-1", 3) != n || PodName(long, "node-2", 3) == n || PodName(long+"x", "node-1", 3) == n {
		t.Error("pod names must be deterministic and differ per job and node")
	}
}

func TestBuildPullerPod(t *testing.T) {
	job := makeJob("j").always().obj()
	job.Spec.PullSecrets = []string{"regcred"}
	job.Spec.PriorityClassName = "system-node-critical"
	p := BuildPullerPod(job, "node-1", 2, PodOptions{PullerImage: "example.com/manta:v1", Policy: Policy{PriorityClassName: "pullers"}})
	c, ic := p.Spec.Containers[0], p.Spec.InitContainers[0]
	checks := map[string]bool{
		"pinned to the node":            p.Spec.NodeName == "node-1",
		"target image":                  c.Image == job.Spec.Image && c.ImagePullPolicy == corev1.PullAlways,
		"puller command":                cmp.Equal(c.Command, []string{"/manta-puller/puller"}) && len(c.Args) == 0,
		"init copies the binary":        ic.Image == "example.com/manta:v1" && cmp.Equal(ic.Command, []string{"/puller", "install", "/manta-puller/puller"}),
		"no token":                      !*p.Spec.AutomountServiceAccountToken,
		"non-root fixed user":           *p.Spec.SecurityContext.RunAsNonRoot && *p.Spec.SecurityContext.RunAsUser == 65534,
		"no tolerations by default":     len(p.Spec.Tolerations) == 0,
		"restart never":                 p.Spec.RestartPolicy == corev1.RestartPolicyNever,
		"pull secrets":                  len(p.Spec.ImagePullSecrets) == 1 && p.Spec.ImagePullSecrets[0].Name == "regcred",
		"the operator's priority class": p.Spec.PriorityClassName == "pullers",
		"labels":                        p.Labels[LabelImagePuller] == "true" && p.Labels[LabelJobUID] == string(job.UID),
		"attempt":                       p.Annotations[AnnotationAttempt] == "2",
		"owner":                         p.OwnerReferences[0].UID == job.UID && *p.OwnerReferences[0].Controller,
		"tiny resources":                c.Resources.Requests.Cpu().MilliValue() == 10,
		"kubelet enforces the timeout":  *p.Spec.ActiveDeadlineSeconds == 600,
	}
	for what, ok := range checks {
		if !ok {
			t.Errorf("%s: not as expected", what)
		}
	}
}

// podsOf names the nodes of planned pods with their attempt.
func podsOf(ps []*corev1.Pod) []string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s#%d", p.Spec.NodeName, podAttempt(p)))
	}
	sort.Strings(out)
	return out
}

// retryingOf formats retry records as "node#attempts reason until +backoff from t0".
func retryingOf(rs []mantav1alpha1.RetryingNode, base time.Time) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s#%d %s until +%s", r.Name, r.Attempts, r.Reason, r.NextAttemptAfter.Sub(base)))
	}
	return out
}

func TestComputePlan(t *testing.T) {
	five := nodes(makeNode("n1"), makeNode("n2").images("rayproject/ray:2.9.0"), makeNode("n3"), makeNode("n4"), makeNode("n5"))
	type want struct {
		create, delete                     []string
		retrying                           []string
		desired, active, succeeded, failed int32
		failedNodes                        []mantav1alpha1.FailedNode
		complete                           bool
		message                            string
	}
	cases := map[string]struct {
		job     *mantav1alpha1.ImagePullJob
		nodes   []corev1.Node
		pods    func(*mantav1alpha1.ImagePullJob) []corev1.Pod
		pending []pendingPod
		now     time.Time
		want    want
	}{
		"IfNotPresent: node with the image succeeds without a pod; parallelism 2 starts two": {
			job: makeJob("j").parallelism(2).obj(), nodes: five, now: t0,
			want: want{create: []string{"n1#1", "n3#1"}, desired: 5, active: 2, succeeded: 1, message: "job is running, progress 20.0%"},
		},
		"Always: every node pulls": {
			job: makeJob("j").always().parallelism(10).obj(), nodes: five, now: t0,
			want: want{create: []string{"n1#1", "n2#1", "n3#1", "n4#1", "n5#1"}, desired: 5, active: 5, message: "job is running, progress 0.0%"},
		},
		"parallelism 0 pauses": {
			job: makeJob("j").always().parallelism(0).obj(), nodes: five, now: t0,
			want: want{desired: 5, message: "job is running, progress 0.0%"},
		},
		"running pods hold their slots": {
			job: makeJob("j").always().parallelism(2).started(t0).obj(), nodes: five, now: t0.Add(time.Second),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, nil)}
			},
			pending: []pendingPod{{name: "x", node: "n2", attempt: 1, created: t0}},
			want:    want{desired: 5, active: 2, message: "job is running, progress 0.0%"},
		},
		"finished pod: recorded first; it keeps its slot until it is gone": {
			job: makeJob("j").always().parallelism(1).started(t0).obj(), nodes: five, now: t0.Add(time.Second),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, succeededPod)}
			},
			want: want{desired: 5, succeeded: 1, message: "job is running, progress 20.0%"},
		},
		"recorded node: its pod is deleted": {
			job: makeJob("j").always().parallelism(1).started(t0).succeededNodes("n1").obj(), nodes: five, now: t0.Add(time.Second),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, succeededPod), pullerPod(j, "n2", 1, t0, nil)}
			},
			want: want{delete: []string{"n1#1"}, desired: 5, active: 1, succeeded: 1, message: "job is running, progress 20.0%"},
		},
		"failed attempt: recorded in status first, its pod stays until the record is stored": {
			job: makeJob("j").always().started(t0).obj(), nodes: five, now: t0.Add(5 * time.Second),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, waiting("ErrImagePull", "not found"))}
			},
			want: want{desired: 5, active: 1, retrying: []string{"n1#1 ImageNotFound until +10s"}, message: "job is running, progress 0.0%"},
		},
		"recorded failed attempt: its pod is deleted, no retry while it exists": {
			job: makeJob("j").always().started(t0).retrying("n1", 1, t0.Add(10*time.Second)).obj(), nodes: five, now: t0.Add(11 * time.Second),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, waiting("ErrImagePull", "not found"))}
			},
			want: want{delete: []string{"n1#1"}, desired: 5, active: 1, retrying: []string{"n1#1 ImageNotFound until +10s"}, message: "job is running, progress 0.0%"},
		},
		"recorded failed attempt: no retry while its pod is terminating": {
			job: makeJob("j").always().started(t0).retrying("n1", 1, t0.Add(10*time.Second)).obj(), nodes: five, now: t0.Add(11 * time.Second),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, terminating)}
			},
			want: want{desired: 5, active: 1, retrying: []string{"n1#1 ImageNotFound until +10s"}, message: "job is running, progress 0.0%"},
		},
		"pod gone: the retry waits for its backoff": {
			job: makeJob("j").always().started(t0).retrying("n1", 1, t0.Add(10*time.Second)).obj(), nodes: five, now: t0.Add(5 * time.Second),
			want: want{desired: 5, active: 1, retrying: []string{"n1#1 ImageNotFound until +10s"}, message: "job is running, progress 0.0%"},
		},
		"pod gone, backoff passed: the next attempt is created": {
			job: makeJob("j").always().started(t0).retrying("n1", 1, t0.Add(10*time.Second)).obj(), nodes: five, now: t0.Add(10 * time.Second),
			want: want{create: []string{"n1#2"}, desired: 5, active: 1, retrying: []string{"n1#1 ImageNotFound until +10s"}, message: "job is running, progress 0.0%"},
		},
		"next attempt in flight: nothing more": {
			job: makeJob("j").always().started(t0).retrying("n1", 1, t0.Add(10*time.Second)).obj(), nodes: five, now: t0.Add(11 * time.Second),
			pending: []pendingPod{{name: "x", node: "n1", attempt: 2, created: t0.Add(10 * time.Second)}},
			want:    want{desired: 5, active: 1, retrying: []string{"n1#1 ImageNotFound until +10s"}, message: "job is running, progress 0.0%"},
		},
		"second failure updates the record": {
			job: makeJob("j").always().started(t0).retrying("n1", 1, t0.Add(10*time.Second)).obj(), nodes: five, now: t0.Add(21 * time.Second),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 2, t0.Add(10*time.Second), waiting("ErrImagePull", "unexpected status: 401 Unauthorized"))}
			},
			want: want{desired: 5, active: 1, retrying: []string{"n1#2 Unauthorized until +30s"}, message: "job is running, progress 0.0%"},
		},
		"retry succeeds: the record goes": {
			job: makeJob("j").always().started(t0).retrying("n1", 1, t0.Add(10*time.Second)).obj(), nodes: five, now: t0.Add(21 * time.Second),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 2, t0.Add(10*time.Second), running)}
			},
			want: want{desired: 5, succeeded: 1, message: "job is running, progress 20.0%"},
		},
		"pods are bounded: retries wait while parallelism pods exist, terminating ones included": {
			job:   makeJob("j").always().parallelism(2).started(t0).retrying("n1", 1, t0.Add(10*time.Second)).retrying("n2", 1, t0.Add(10*time.Second)).obj(),
			nodes: five, now: t0.Add(11 * time.Second),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, terminating), pullerPod(j, "n3", 1, t0, succeededPod)}
			},
			want: want{desired: 5, active: 2, succeeded: 1,
				retrying: []string{"n1#1 ImageNotFound until +10s", "n2#1 ImageNotFound until +10s"}, message: "job is running, progress 20.0%"},
		},
		"pods are bounded: a retry takes the one free pod slot, no new node starts": {
			job:   makeJob("j").always().parallelism(2).started(t0).retrying("n1", 1, t0.Add(10*time.Second)).retrying("n2", 1, t0.Add(10*time.Second)).obj(),
			nodes: five, now: t0.Add(11 * time.Second),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, terminating)}
			},
			want: want{create: []string{"n2#2"}, desired: 5, active: 2,
				retrying: []string{"n1#1 ImageNotFound until +10s", "n2#1 ImageNotFound until +10s"}, message: "job is running, progress 0.0%"},
		},
		"leftover older attempt is deleted": {
			job: makeJob("j").always().started(t0).obj(), nodes: five, now: t0.Add(11 * time.Second),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, waiting("ErrImagePull", "not found")), pullerPod(j, "n1", 2, t0.Add(11*time.Second), nil)}
			},
			want: want{delete: []string{"n1#1"}, desired: 5, active: 1, message: "job is running, progress 0.0%"},
		},
		"last attempt failed: node fails with the reason": {
			job: makeJob("j").always().backoffLimit(2).started(t0).names("n1").retrying("n1", 2, t0.Add(30*time.Second)).obj(), nodes: five, now: t0.Add(time.Hour),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 3, t0, waiting("ErrImagePull", "x: not found"))}
			},
			want: want{desired: 1, failed: 1, complete: true, message: "job has completed",
				failedNodes: []mantav1alpha1.FailedNode{{Name: "n1", Reason: ReasonImageNotFound, Message: "x: not found", Attempts: 3}}},
		},
		"deadline: a retrying node fails with its attempts": {
			job: makeJob("j").always().deadline(600).started(t0).names("n1").retrying("n1", 2, t0.Add(700*time.Second)).obj(), nodes: five, now: t0.Add(600 * time.Second),
			want: want{desired: 1, failed: 1, complete: true, message: "job exceeds activeDeadlineSeconds",
				failedNodes: []mantav1alpha1.FailedNode{{Name: "n1", Reason: ReasonDeadlineExceeded, Message: MessageDeadlineExceeded, Attempts: 2}}},
		},
		"retry record of a node no longer selected is dropped with its pods": {
			job: makeJob("j").always().names("n2").started(t0).retrying("n1", 1, t0).obj(), nodes: five, now: t0.Add(time.Second),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, waiting("ErrImagePull", "not found"))}
			},
			want: want{delete: []string{"n1#1"}, desired: 1, active: 0, message: "job is running, progress 0.0%"},
		},
		"deadline: the rest fail": {
			job: makeJob("j").always().deadline(600).started(t0).succeededNodes("n1").obj(), nodes: five, now: t0.Add(600 * time.Second),
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n2", 1, t0, nil)}
			},
			want: want{desired: 5, succeeded: 1, failed: 4, complete: true, message: "job exceeds activeDeadlineSeconds",
				failedNodes: []mantav1alpha1.FailedNode{
					{Name: "n2", Reason: ReasonDeadlineExceeded, Message: MessageDeadlineExceeded, Attempts: 1},
					{Name: "n3", Reason: ReasonDeadlineExceeded, Message: MessageDeadlineExceeded},
					{Name: "n4", Reason: ReasonDeadlineExceeded, Message: MessageDeadlineExceeded},
					{Name: "n5", Reason: ReasonDeadlineExceeded, Message: MessageDeadlineExceeded},
				}},
		},
		"Never: all done stays active": {
			job: makeJob("j").never().started(t0).succeededNodes("n1", "n3", "n4", "n5").obj(), nodes: five, now: t0,
			want: want{desired: 5, succeeded: 5, message: "job is running, progress 100.0%"},
		},
		"Never: records of deleted nodes are dropped, a new node is pulled": {
			job: makeJob("j").never().started(t0).succeededNodes("gone", "n1").obj(), nodes: nodes(makeNode("n1"), makeNode("new")), now: t0,
			want: want{create: []string{"new#1"}, desired: 2, active: 1, succeeded: 1, message: "job is running, progress 50.0%"},
		},
		"Always with no nodes completes": {
			job: makeJob("j").obj(), now: t0,
			want: want{complete: true, message: "job has completed"},
		},
		"pods on nodes no longer selected are deleted": {
			job: makeJob("j").always().names("n1").started(t0).obj(), nodes: five, now: t0,
			pods: func(j *mantav1alpha1.ImagePullJob) []corev1.Pod {
				return []corev1.Pod{pullerPod(j, "n1", 1, t0, nil), pullerPod(j, "n3", 1, t0, nil)}
			},
			want: want{delete: []string{"n3#1"}, desired: 1, active: 1, message: "job is running, progress 0.0%"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var pods []corev1.Pod
			if tc.pods != nil {
				pods = tc.pods(tc.job)
			}
			p, err := computePlan(observed{job: tc.job, nodes: tc.nodes, pods: pods, pendingCreates: tc.pending, now: tc.now, retryBase: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			st := p.status
			got := want{create: podsOf(p.create), delete: podsOf(p.delete), desired: st.Desired, active: st.Active,
				succeeded: st.Succeeded, failed: st.Failed, failedNodes: st.FailedNodes, retrying: retryingOf(st.RetryingNodes, t0), complete: st.CompletionTime != nil, message: st.Message}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			if got.complete != p.completed {
				t.Errorf("completed flag %v, completionTime set %v", p.completed, got.complete)
			}
		})
	}
}

// TestComputePlanParallelismInvariant drives many nodes through random-free rounds: pods finish in creation order,
// and no round ever has more than parallelism nodes pulling.
func TestComputePlanParallelismInvariant(t *testing.T) {
	var ns []*nodeWrapper
	for i := range 100 {
		ns = append(ns, makeNode(fmt.Sprintf("n%03d", i)))
	}
	all := nodes(ns...)
	job := makeJob("j").always().parallelism(7).obj()
	var pods []corev1.Pod
	now := t0
	for round := 0; round < 100; round++ {
		p, err := computePlan(observed{job: job, nodes: all, pods: pods, now: now, retryBase: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		deleted := map[string]bool{}
		for _, d := range p.delete {
			deleted[d.Name] = true
		}
		var next []corev1.Pod
		for _, pod := range pods {
			if !deleted[pod.Name] {
				pod.Status.Phase = corev1.PodSucceeded // every pod finishes by the next round
				next = append(next, pod)
			}
		}
		for _, c := range p.create {
			c.CreationTimestamp = metav1.Time{Time: now}
			next = append(next, *c)
		}
		pulling := 0
		for _, pod := range next {
			if pod.Status.Phase != corev1.PodSucceeded {
				pulling++
			}
		}
		if pulling > 7 || p.status.Active > 7 {
			t.Fatalf("round %d: %d pods pulling, status.active %d, parallelism 7", round, pulling, p.status.Active)
		}
		pods = next
		job.Status = p.status
		now = now.Add(time.Second)
		if p.completed {
			if job.Status.Succeeded != 100 {
				t.Fatalf("completed with %d succeeded", job.Status.Succeeded)
			}
			return
		}
	}
	t.Fatal("job did not complete in 100 rounds")
}

// TestComputePlanPodBoundDuringRetries drives a job whose pulls all fail through the real expectations, with a pod
// cache two steps behind the API, a job cache that is sometimes one status write behind (so some status writes
// conflict), and deleted pods that stay terminating for a step. It checks after every step that no more than
// parallelism puller pods exist, terminating ones included, and that every node still gets exactly 1+backoffLimit
// attempts and ends in failedNodes with the reason.
func TestComputePlanPodBoundDuringRetries(t *testing.T) {
	const par, limit = 2, 3
	var ns []*nodeWrapper
	for i := range 6 {
		ns = append(ns, makeNode(fmt.Sprintf("n%d", i)))
	}
	all := nodes(ns...)
	job := makeJob("j").always().parallelism(par).backoffLimit(limit).obj()
	now := t0
	exp := newExpectations(func() time.Time { return now })

	truth := map[string]corev1.Pod{} // what the API server holds
	var podHistory [][]corev1.Pod    // truth at the end of each step; the cache reads two steps back
	statuses := []mantav1alpha1.ImagePullJobStatus{job.Status}
	lastRead := 0
	created := map[string]int{} // node -> pods created
	maxPods, conflicts := 0, 0
	for step := 0; step < 2000; step++ {
		// The API server: pods deleted in an earlier step are gone; the kubelet fails every new pull.
		for name, pod := range truth {
			if pod.DeletionTimestamp != nil {
				delete(truth, name)
				continue
			}
			if len(pod.Status.ContainerStatuses) == 0 && step%2 == 0 {
				waiting("ErrImagePull", "x: not found")(&pod)
				truth[name] = pod
			}
		}
		var cached []corev1.Pod
		if len(podHistory) >= 2 {
			cached = podHistory[len(podHistory)-2]
		}
		// The job cache is one write behind every third step, never older than what was read before.
		read := len(statuses) - 1
		if step%3 == 0 && read > 0 {
			read--
		}
		read = max(read, lastRead)
		lastRead = read
		observedJob := job.DeepCopy()
		observedJob.Status = *statuses[read].DeepCopy()

		pending, _ := exp.Observe(job.UID, cached)
		p, err := computePlan(observed{job: observedJob, nodes: all, pods: cached, pendingCreates: pending,
			now: now, retryBase: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range p.delete {
			if pod, ok := truth[d.Name]; ok && pod.UID == d.UID && exp.ExpectDelete(job.UID, d.UID) && pod.DeletionTimestamp == nil {
				pod.DeletionTimestamp = &metav1.Time{Time: now}
				truth[d.Name] = pod
			}
		}
		for _, c := range p.create {
			if _, exists := truth[c.Name]; !exists {
				c.UID = types.UID(fmt.Sprintf("%s-%d", c.Name, step))
				c.CreationTimestamp = metav1.Time{Time: now}
				c.Status.Phase = corev1.PodPending
				truth[c.Name] = *c
				created[c.Spec.NodeName]++
			}
			exp.ExpectCreate(job.UID, c.Name, pendingPod{name: c.Name, node: c.Spec.NodeName, attempt: podAttempt(c), created: now})
			if len(truth) > par {
				t.Fatalf("step %d: %d puller pods exist (terminating included), parallelism %d", step, len(truth), par)
			}
		}
		maxPods = max(maxPods, len(truth))
		if read == len(statuses)-1 {
			statuses = append(statuses, *p.status.DeepCopy())
		} else {
			conflicts++
		}
		snapshot := make([]corev1.Pod, 0, len(truth))
		for _, pod := range truth {
			snapshot = append(snapshot, *pod.DeepCopy())
		}
		podHistory = append(podHistory, snapshot)
		now = now.Add(500 * time.Millisecond)

		st := statuses[len(statuses)-1]
		if st.CompletionTime != nil && len(truth) == 0 {
			if st.Failed != 6 || len(st.FailedNodes) != 6 || len(st.RetryingNodes) != 0 {
				t.Fatalf("final status: %+v", st)
			}
			for _, f := range st.FailedNodes {
				if f.Attempts != 1+limit || f.Reason != ReasonImageNotFound || created[f.Name] != 1+limit {
					t.Errorf("node %s: %+v, %d pods created; want %d attempts", f.Name, f, created[f.Name], 1+limit)
				}
			}
			if maxPods != par {
				t.Errorf("at most %d pods at once: parallelism %d is not used", maxPods, par)
			}
			t.Logf("completed after %d steps, %d status writes conflicted, at most %d puller pods at once", step, conflicts, maxPods)
			return
		}
	}
	t.Fatalf("job did not complete: %+v", statuses[len(statuses)-1])
}
