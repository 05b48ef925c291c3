package real

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/controller/shared/podtrouble"
)

// testStartTrouble: four RayJobs whose heads cannot start, on a real kubelet and scheduler, each reported with its
// cause in the RayJob's status.message, in its cluster's status.reason and in a Warning event about each:
//   - a tag the registry does not have (the node's registry answers 404): ErrImagePull with containerd's
//     "not found"; the job is opted in (manta.dev/fail-on-permanent-start-error) and fails at once,
//     PermanentStartError;
//   - an image name the kubelet cannot parse (upper case): InvalidImageName; opted in, it fails at once too;
//   - a head whose command writes a termination message and exits 3: CrashLoopBackOff with exit code 3 and that
//     message; the job keeps waiting (no opt-in);
//   - a head asking for 1000 CPUs: Unschedulable with the scheduler's words.
//
// Each is timed from the RayJob's creation to the message naming its cause.
func testStartTrouble(t *testing.T, ctx context.Context, e *env) {
	ns := e.namespace(t, ctx, "start-trouble")
	jobs := map[string]func(*rayv1.RayJob){
		"wrong-tag": func(j *rayv1.RayJob) {
			j.Annotations = map[string]string{rayjob.AnnotationFailOnPermanentStartError: "true"}
			j.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "rayproject/ray:no-such-tag"
		},
		"bad-name": func(j *rayv1.RayJob) {
			j.Annotations = map[string]string{rayjob.AnnotationFailOnPermanentStartError: "true"}
			j.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "rayproject/Ray:2.52.0"
		},
		"crash": func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec.HeadGroupSpec.Template.Annotations = map[string]string{clusterbuild.AnnotationOverwriteContainerCmd: "true"}
			c := &j.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0]
			c.Command = []string{"bash", "-c", "echo 'ray head: bad config' > /dev/termination-log; exit 3"}
		},
		"huge": func(j *rayv1.RayJob) {
			j.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1000")
		},
	}
	created := map[string]time.Time{}
	for name, mutate := range jobs {
		var j rayv1.RayJob
		readSample(t, "rayjob.yaml", &j)
		j.Name, j.Namespace = name, ns
		j.Spec.ShutdownAfterJobFinishes, j.Spec.TTLSecondsAfterFinished = false, 0 // keep the cluster, to read its status
		j.Spec.RayClusterSpec.WorkerGroupSpecs = nil
		fitRayResources(j.Spec.RayClusterSpec)
		head := &j.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0]
		head.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("256Mi")
		head.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("256Mi")
		mutate(&j)
		if err := e.cl.Create(ctx, &j); err != nil {
			t.Fatal(err)
		}
		created[name] = time.Now()
	}

	// want is, per job, what its message must say, and whether it ends Failed.
	type want struct {
		reason string
		parts  []string
		failed bool
	}
	wants := map[string]want{
		"wrong-tag": {podtrouble.ReasonImagePull, []string{`cannot pull image "rayproject/ray:no-such-tag"`, "not found"}, true},
		"bad-name":  {podtrouble.ReasonInvalidImageName, []string{`has an invalid image name "rayproject/Ray:2.52.0"`}, true},
		"crash":     {podtrouble.ReasonCrashLoop, []string{"keeps exiting: last exit code 3 (Error), termination message: ray head: bad config"}, false},
		"huge":      {podtrouble.ReasonUnschedulable, []string{"no node can run it: 0/", "Insufficient cpu"}, false},
	}
	// All at once, so each one's time is when its cause was first reported.
	seen := map[string]rayv1.RayJob{}
	// The crash loop comes last: its container must start (the Ray image unpacked, on a fresh node) and exit first.
	waitFor(t, ctx, 5*time.Minute, "every RayJob naming its cause", func() (bool, string) {
		var missing []string
		for name, w := range wants {
			if _, ok := seen[name]; ok {
				continue
			}
			var got rayv1.RayJob
			if err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &got); err != nil {
				return false, err.Error()
			}
			ok := strings.Contains(got.Status.Message, ": "+w.reason+": ")
			for _, p := range w.parts {
				ok = ok && strings.Contains(got.Status.Message, p)
			}
			if w.failed {
				ok = ok && got.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusFailed && got.Status.Reason == rayjob.PermanentStartError
			}
			if !ok {
				missing = append(missing, fmt.Sprintf("%s: %s %s: %q", name, got.Status.JobDeploymentStatus, got.Status.Reason, got.Status.Message))
				continue
			}
			seen[name] = got
			t.Logf("%s: %s %s %s after creation: %s", name, got.Status.JobDeploymentStatus, got.Status.Reason,
				time.Since(created[name]).Round(100*time.Millisecond), got.Status.Message)
		}
		return len(missing) == 0, strings.Join(missing, "; ")
	})
	for name, w := range wants {
		got := seen[name]
		if !w.failed && got.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusInitializing {
			t.Errorf("%s: jobDeploymentStatus %s, want Initializing (not opted in)", name, got.Status.JobDeploymentStatus)
		}
		var rc rayv1.RayCluster
		waitFor(t, ctx, time.Minute, "RayCluster of "+name+" naming "+w.reason, func() (bool, string) {
			if err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: got.Status.RayClusterName}, &rc); err != nil {
				return false, err.Error()
			}
			return strings.Contains(rc.Status.Reason, ": "+w.reason+": ") && strings.Contains(rc.Status.Reason, w.parts[0]), rc.Status.Reason
		})
		for _, obj := range []string{name, got.Status.RayClusterName} {
			waitFor(t, ctx, time.Minute, "Warning "+w.reason+" event about "+obj, func() (bool, string) {
				evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + obj})
				if err != nil {
					return false, err.Error()
				}
				var have []string
				for _, ev := range evs.Items {
					if ev.Type == corev1.EventTypeWarning && ev.Reason == w.reason && strings.Contains(ev.Message, w.parts[0]) {
						return true, ""
					}
					have = append(have, ev.Type+" "+ev.Reason)
				}
				return false, fmt.Sprint("events: ", have)
			})
		}
	}
	e.deleteNamespace(t, ctx, ns)
}
