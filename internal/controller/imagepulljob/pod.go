package imagepulljob

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
)

// PodOptions shape the puller pods.
type PodOptions struct {
	// PullerImage is Manta's own image, which holds the puller binary.
	PullerImage string
	// PullerBinaryPath is the path of the puller binary inside PullerImage.
	PullerBinaryPath string
	// Policy bounds where pullers go and what they may claim, whatever the job says.
	Policy Policy
}

func (o PodOptions) withDefaults() PodOptions {
	if o.PullerImage == "" {
		o.PullerImage = DefaultPullerImage
	}
	if o.PullerBinaryPath == "" {
		o.PullerBinaryPath = DefaultPullerBinaryPath
	}
	return o
}

// PodName is the deterministic name of the puller pod for (job, node, attempt). Deterministic names make a create
// from a stale cache fail with AlreadyExists instead of producing a second pod. The hash covers the full job and node
// names, so truncation cannot make two names collide.
func PodName(jobName, node string, attempt int32) string {
	sum := sha256.Sum256([]byte(jobName + "/" + node))
	prefix := jobName
	if len(prefix) > 40 {
		prefix = strings.TrimRight(prefix[:40], "-.")
	}
	return fmt.Sprintf("%s-%s-%d", prefix, hex.EncodeToString(sum[:5]), attempt)
}

func podAttempt(pod *corev1.Pod) int32 {
	n, err := strconv.ParseInt(pod.Annotations[AnnotationAttempt], 10, 32)
	if err != nil || n < 1 {
		return 1
	}
	return int32(n)
}

var defaultPullerResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
	Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
}

// BuildPullerPod returns the puller pod for one attempt on one node. The init container copies the static puller
// binary from Manta's image into an emptyDir; the main container runs the target image with that binary as its
// command, so images without a shell or libc work. Pods run as a fixed non-root user with a read-only root
// filesystem, no service account token and no privileges, which the "restricted" Pod Security Standard admits.
func BuildPullerPod(job *mantav1alpha1.ImagePullJob, node string, attempt int32, opts PodOptions) *corev1.Pod {
	opts = opts.withDefaults()
	resources := defaultPullerResources
	if job.Spec.Resources != nil {
		resources = *job.Spec.Resources
	}
	policy := corev1.PullIfNotPresent
	if job.Spec.ImagePullPolicy == mantav1alpha1.PullAlways {
		policy = corev1.PullAlways
	}
	containerSecurity := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	mounts := []corev1.VolumeMount{{Name: pullerVolumeName, MountPath: pullerMountPath}}
	var secrets []corev1.LocalObjectReference
	for _, s := range job.Spec.PullSecrets {
		secrets = append(secrets, corev1.LocalObjectReference{Name: s})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      PodName(job.Name, node, attempt),
			Namespace: job.Namespace,
			Labels: map[string]string{
				LabelImagePuller: "true",
				LabelJobUID:      string(job.UID),
			},
			Annotations: map[string]string{AnnotationAttempt: strconv.Itoa(int(attempt))},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         mantav1alpha1.GroupVersion.String(),
				Kind:               "ImagePullJob",
				Name:               job.Name,
				UID:                job.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			ActiveDeadlineSeconds:         ptr.To(int64(timeoutSeconds(job))),
			PriorityClassName:             opts.Policy.PriorityClassName,
			ImagePullSecrets:              secrets,
			Tolerations:                   pullerTolerations(job, opts.Policy),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To(pullerUID),
				RunAsGroup:     ptr.To(pullerUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: []corev1.Volume{{
				Name:         pullerVolumeName,
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("32Mi"))}},
			}},
			InitContainers: []corev1.Container{{
				Name:            InstallContainerName,
				Image:           opts.PullerImage,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{opts.PullerBinaryPath, "install", pullerBinary},
				VolumeMounts:    mounts,
				Resources:       resources,
				SecurityContext: containerSecurity,
			}},
			Containers: []corev1.Container{{
				Name:            PullerContainerName,
				Image:           job.Spec.Image,
				ImagePullPolicy: policy,
				Command:         []string{pullerBinary},
				WorkingDir:      pullerMountPath,
				VolumeMounts:    mounts,
				Resources:       resources,
				SecurityContext: containerSecurity.DeepCopy(),
			}},
		},
	}
	return pod
}

func timeoutSeconds(job *mantav1alpha1.ImagePullJob) int32 {
	if p := job.Spec.PullPolicy; p != nil && p.TimeoutSeconds != nil {
		return *p.TimeoutSeconds
	}
	return mantav1alpha1.DefaultTimeoutSeconds
}

func backoffLimit(job *mantav1alpha1.ImagePullJob) int32 {
	if p := job.Spec.PullPolicy; p != nil && p.BackoffLimit != nil {
		return *p.BackoffLimit
	}
	return mantav1alpha1.DefaultBackoffLimit
}

func parallelism(job *mantav1alpha1.ImagePullJob) int32 {
	if job.Spec.Parallelism != nil {
		return *job.Spec.Parallelism
	}
	return mantav1alpha1.DefaultParallelism
}

// attemptResult is what one puller pod tells about its attempt.
type attemptResult int

const (
	attemptRunning attemptResult = iota
	attemptSucceeded
	attemptFailed
)

// pullErrorReasons are the waiting reasons the kubelet reports when it cannot get the image.
var pullErrorReasons = map[string]bool{
	"ErrImagePull":              true,
	"ImagePullBackOff":          true,
	"InvalidImageName":          true,
	"ErrImageNeverPull":         true,
	"RegistryUnavailable":       true,
	"SignatureValidationFailed": true,
}

// containerCreateReasons come after the kubelet has the image: the pull is done even though the container did not
// start (e.g. an image for another architecture).
var containerCreateReasons = map[string]bool{
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
}

// classifyAttempt reads one puller pod: the image is on the node once the main container was created (running,
// terminated, or an error that only happens after the pull); a pull error, a failed pod without a created
// container, or timeoutSeconds passing fail the attempt.
func classifyAttempt(pod *corev1.Pod, now time.Time, timeout time.Duration) (result attemptResult, reason, message string) {
	var main *corev1.ContainerStatus
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == PullerContainerName {
			main = &pod.Status.ContainerStatuses[i]
		}
	}
	if pod.Status.Phase == corev1.PodSucceeded {
		return attemptSucceeded, "", ""
	}
	if main != nil {
		if main.State.Running != nil || main.State.Terminated != nil || main.LastTerminationState.Terminated != nil || main.ImageID != "" {
			return attemptSucceeded, "", ""
		}
		if w := main.State.Waiting; w != nil {
			if containerCreateReasons[w.Reason] {
				return attemptSucceeded, "", ""
			}
			if pullErrorReasons[w.Reason] {
				return attemptFailed, pullFailureReason(w.Reason, w.Message, pullerImage(pod)), shorten(w.Message)
			}
		}
	}
	if pod.Status.Phase == corev1.PodFailed {
		reason := pod.Status.Reason
		if reason == "DeadlineExceeded" {
			return attemptFailed, ReasonTimeout, shorten(fmt.Sprintf("pull did not finish within %s", timeout))
		}
		if reason == "" {
			reason = ReasonPodFailed
		}
		return attemptFailed, reason, shorten(pod.Status.Message)
	}
	if !pod.CreationTimestamp.IsZero() && now.Sub(pod.CreationTimestamp.Time) >= timeout {
		msg := fmt.Sprintf("pull did not finish within %s", timeout)
		if main != nil && main.State.Waiting != nil && main.State.Waiting.Reason != "" {
			msg += " (container " + main.State.Waiting.Reason + ")"
		} else if pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "" {
			msg += " (pod " + podPendingHint(pod) + ")"
		}
		return attemptFailed, ReasonTimeout, msg
	}
	return attemptRunning, "", ""
}

func podPendingHint(pod *corev1.Pod) string {
	if pod.Status.Phase == "" {
		return "not picked up by the node; check that the node is ready"
	}
	return "pending"
}

// pullerImage is the image the puller container pulls.
func pullerImage(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == PullerContainerName {
			return c.Image
		}
	}
	return ""
}

// pullFailureReason turns the kubelet's waiting reason and message into a short reason users can act on. The
// kubelet's message quotes the image, whose name, tag or digest may contain "401", "403" or "notfound"; those are
// removed before the message is read.
func pullFailureReason(waitingReason, message, image string) string {
	m := stripImageRefs(message, image)
	switch {
	case waitingReason == "InvalidImageName":
		return waitingReason
	case strings.Contains(m, "unauthorized") || strings.Contains(m, "401") || strings.Contains(m, "403") ||
		strings.Contains(m, "denied") || strings.Contains(m, "authorization failed") || strings.Contains(m, "forbidden"):
		return ReasonUnauthorized
	case strings.Contains(m, "not found") || strings.Contains(m, "manifest unknown") || strings.Contains(m, "notfound"):
		return ReasonImageNotFound
	case waitingReason == "ImagePullBackOff":
		return "ErrImagePull"
	}
	return waitingReason
}

// stripImageRefs removes the image reference, as written and as the runtime normalizes it, from a kubelet message,
// and lower-cases the rest.
func stripImageRefs(message, image string) string {
	m := strings.ToLower(message)
	if image == "" {
		return m
	}
	k := parseImage(image)
	refs := []string{image, k.repo}
	if k.tag != "" {
		refs = append(refs, k.repo+":"+k.tag, strings.TrimPrefix(k.repo, "docker.io/library/")+":"+k.tag)
	}
	if k.digest != "" {
		refs = append(refs, k.digest)
	}
	// Longest first, so a short form does not leave pieces of a longer one behind.
	sort.Slice(refs, func(i, j int) bool { return len(refs[i]) > len(refs[j]) })
	for _, r := range refs {
		if r != "" {
			m = strings.ReplaceAll(m, strings.ToLower(r), "<image>")
		}
	}
	return m
}

func shorten(s string) string {
	if len(s) <= maxMessageLength {
		return s
	}
	return s[:maxMessageLength-3] + "..."
}

// retryBackoff is how long after an attempt started the next one may start: base, 2×base, 4×base, ... capped.
func retryBackoff(base time.Duration, failedAttempt int32) time.Duration {
	d := base
	for i := int32(1); i < failedAttempt && d < maxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, maxRetryBackoff)
}
