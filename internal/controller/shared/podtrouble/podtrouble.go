// Package podtrouble names why a Ray pod cannot start, from what the kubelet and the scheduler wrote in the pod's
// status: a container's waiting reason and message, its last termination, and the PodScheduled condition. It
// reads nothing else (no events, no API calls), so it works on the operator's stripped pod cache
// (internal/operator's podCacheDrops keeps the states, the images and the conditions), and it is pure.
//
// The causes it names, by Reason (also the reason of the Warning events the controllers record):
//
//   - ErrImagePull: the image cannot be pulled (the kubelet's ErrImagePull and ImagePullBackOff, which alternate
//     while it retries, and RegistryUnavailable, SignatureValidationFailed, ErrImageNeverPull), with the image and
//     the registry's error as the kubelet reports it;
//   - InvalidImageName: the image reference does not parse;
//   - CrashLoopBackOff: a container keeps exiting, with its last exit code and the tail of its termination message;
//   - Unschedulable: the scheduler found no node, with its reason;
//   - CreateContainerConfigError: the container cannot be created from its spec, typically a Secret or ConfigMap
//     (or a key of one) its environment names is missing, named as the kubelet names it.
//
// A Secret or ConfigMap mounted as a volume that is missing shows only in the kubelet's FailedMount events, not in
// the pod's status: this package does not see it (the pod waits in ContainerCreating).
package podtrouble

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// Reasons of the causes: the kubelet's and the scheduler's own words, so users find them in `kubectl get pods`.
const (
	ReasonImagePull         = "ErrImagePull"
	ReasonInvalidImageName  = "InvalidImageName"
	ReasonCrashLoop         = "CrashLoopBackOff"
	ReasonUnschedulable     = "Unschedulable"
	ReasonCreateConfigError = "CreateContainerConfigError"
)

// imagePullReasons are the kubelet's waiting reasons of a pull that failed (pkg/kubelet/images): one cause, so a
// pod that alternates between them does not read as a new trouble at every retry.
var imagePullReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "RegistryUnavailable": true, "SignatureValidationFailed": true,
	"ErrImageNeverPull": true,
}

// MaxTail bounds the tail of a termination message a cause quotes, in bytes.
const MaxTail = 200

// Cause is why one pod cannot start.
type Cause struct {
	// Reason is one of the Reason constants.
	Reason string
	// Pod is the pod's name; Head says it is its cluster's head.
	Pod  string
	Head bool
	// Container is the container at fault (empty for Unschedulable); Image its image.
	Container, Image string
	// Message says what is wrong in one line, with the kubelet's or the scheduler's words.
	Message string
	// ImageNotFound says the registry answered that the image (or its tag) does not exist.
	ImageNotFound bool
	// Missing names the Secret or ConfigMap a CreateContainerConfigError reports missing ("Secret x"), if any.
	Missing string
	// Created is when the pod was created: the start of a missing Secret's grace period.
	Created time.Time
}

// Line is the cause as the controllers write it in a status message: "pod <name>: <reason>: <message>".
func (c Cause) Line() string { return c.key() + " " + c.Message }

// key identifies the cause of the pod, whatever its message says: the start of Line.
func (c Cause) key() string { return "pod " + c.Pod + ": " + c.Reason + ":" }

// Classify names why pod cannot start, or returns nil when nothing in its status says it cannot (it may still be
// starting). A pod being deleted has no cause.
func Classify(pod *corev1.Pod) *Cause {
	if pod.DeletionTimestamp != nil {
		return nil
	}
	base := Cause{Pod: pod.Name, Head: pod.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead, Created: pod.CreationTimestamp.Time}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			c := base
			c.Reason, c.Message = ReasonUnschedulable, "no node can run it: "+oneLine(cond.Message)
			return &c
		}
	}
	// No map of the images, nor a joined copy of the lists: this runs for every pod at each status computation,
	// and most pods have no waiting container.
	for _, statuses := range [2][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range statuses {
			cs := &statuses[i]
			if cs.State.Waiting == nil {
				continue // what classifyContainer would say
			}
			image := specImage(pod, cs.Name)
			if image == "" {
				image = cs.Image
			}
			if c := classifyContainer(base, *cs, image); c != nil {
				return c
			}
		}
	}
	return nil
}

// specImage is the image of the pod's container (or init container) named name: the last one so named, the
// containers after the init containers.
func specImage(pod *corev1.Pod, name string) string {
	for _, ctrs := range [2][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := len(ctrs) - 1; i >= 0; i-- {
			if ctrs[i].Name == name {
				return ctrs[i].Image
			}
		}
	}
	return ""
}

func classifyContainer(base Cause, cs corev1.ContainerStatus, image string) *Cause {
	w := cs.State.Waiting
	if w == nil {
		return nil
	}
	c := base
	c.Container, c.Image = cs.Name, image
	switch {
	case imagePullReasons[w.Reason]:
		detail := pullError(w.Reason, w.Message, image)
		c.Reason = ReasonImagePull
		c.Message = fmt.Sprintf("container %s cannot pull image %q: %s", cs.Name, image, detail)
		c.ImageNotFound = imageNotFound(detail)
	case w.Reason == ReasonInvalidImageName:
		c.Reason = ReasonInvalidImageName
		c.Message = fmt.Sprintf("container %s has an invalid image name %q: %s", cs.Name, image, oneLine(w.Message))
	case w.Reason == ReasonCrashLoop:
		c.Reason = ReasonCrashLoop
		c.Message = fmt.Sprintf("container %s keeps exiting", cs.Name)
		if t := cs.LastTerminationState.Terminated; t != nil {
			c.Message += fmt.Sprintf(": last exit code %d", t.ExitCode)
			if t.Reason != "" {
				c.Message += " (" + t.Reason + ")"
			}
			if tail := Tail(t.Message, MaxTail); tail != "" {
				c.Message += ", termination message: " + tail
			}
		}
	case w.Reason == ReasonCreateConfigError:
		c.Reason = ReasonCreateConfigError
		c.Message = fmt.Sprintf("container %s cannot be created: %s", cs.Name, oneLine(w.Message))
		c.Missing = missingObject(w.Message)
	default:
		return nil
	}
	return &c
}

// pullError is the registry's error in a waiting message: ImagePullBackOff's message is `Back-off pulling image
// "<image>": <reason>: <the last pull's error>` (pkg/kubelet/images), ErrImagePull's is the pull's error itself;
// both read the same once the prefixes are gone.
func pullError(reason, msg, image string) string {
	msg = strings.TrimSpace(msg)
	if reason == "ImagePullBackOff" {
		rest, ok := strings.CutPrefix(msg, "Back-off pulling image ")
		if ok {
			if i := strings.Index(rest, ": "); i >= 0 {
				rest = rest[i+2:]
			} else {
				return "the kubelet is backing off after a failed pull"
			}
			for r := range imagePullReasons {
				if after, ok := strings.CutPrefix(rest, r+": "); ok {
					rest = after
					break
				}
			}
			msg = rest
		}
	}
	if msg == "" {
		return reason
	}
	return oneLine(msg)
}

// imageNotFound says whether a pull's error is the registry saying the image does not exist: containerd reports
// a missing tag or repository as "...: not found", a registry's manifest answer as MANIFEST_UNKNOWN / "manifest
// unknown", and Docker Hub's as "repository does not exist". A registry that cannot be reached says something else.
func imageNotFound(detail string) bool {
	d := strings.ToLower(detail)
	return strings.HasSuffix(d, ": not found") || strings.Contains(d, "manifest unknown") ||
		strings.Contains(d, "repository does not exist") || strings.Contains(d, "name unknown")
}

// missingRef matches the kubelet's errors for an env source that is missing (pkg/kubelet/kubelet_pods.go):
// `secret "x" not found`, `configmap "x" not found`, and the key forms `couldn't find key k in Secret ns/x`.
var (
	missingRef = regexp.MustCompile(`(?i)\b(secret|configmap) "([^"]+)" not found`)
	missingKey = regexp.MustCompile(`couldn't find key (\S+) in (Secret|ConfigMap) (\S+)`)
)

func missingObject(msg string) string {
	if m := missingRef.FindStringSubmatch(msg); m != nil {
		kind := "Secret"
		if strings.EqualFold(m[1], "configmap") {
			kind = "ConfigMap"
		}
		return kind + " " + m[2]
	}
	if m := missingKey.FindStringSubmatch(msg); m != nil {
		name := m[3]
		if _, after, ok := strings.Cut(name, "/"); ok {
			name = after
		}
		return fmt.Sprintf("key %s of %s %s", m[1], m[2], name)
	}
	return ""
}

// Tail is the end of a termination message: its last non-empty lines joined with " | ", at most max bytes (cut at
// the front, marked with "...").
func Tail(msg string, max int) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(msg), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	s := strings.Join(lines, " | ")
	if len(s) <= max {
		return s
	}
	cut := len(s) - max
	for cut < len(s) && s[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		cut++
	}
	return "..." + s[cut:]
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Permanent says whether the cause will not clear by waiting: an invalid image name, an image the registry says
// does not exist, or a Secret or ConfigMap still missing grace after the pod was created (one created meanwhile
// lets the kubelet go on). While a missing object's grace runs, wait is what is left of it.
func (c Cause) Permanent(now time.Time, grace time.Duration) (permanent bool, wait time.Duration) {
	switch {
	case c.Reason == ReasonInvalidImageName, c.Reason == ReasonImagePull && c.ImageNotFound:
		return true, 0
	case c.Reason == ReasonCreateConfigError && c.Missing != "":
		if left := c.Created.Add(grace).Sub(now); left > 0 {
			return false, left
		}
		return true, 0
	}
	return false, 0
}

// Pods classifies pods and returns their causes, the head's first, then by pod name.
func Pods(pods []corev1.Pod) []Cause {
	var out []Cause
	for i := range pods {
		if c := Classify(&pods[i]); c != nil {
			out = append(out, *c)
		}
	}
	slices.SortFunc(out, func(a, b Cause) int {
		if a.Head != b.Head {
			if a.Head {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Pod, b.Pod)
	})
	return out
}

// MaxListed is how many pods' causes a summary names; the rest are counted. It bounds the status message (a
// RayJob copies its cluster's status) and the events: a group of a hundred workers with a bad image is one cause
// for the user, not a hundred.
const MaxListed = 5

// Listed is the causes a summary names: the first MaxListed.
func Listed(causes []Cause) []Cause {
	if len(causes) > MaxListed {
		return causes[:MaxListed]
	}
	return causes
}

// Summary is the status message of causes: each listed cause's Line, joined with "; ", and how many more pods
// have one. Empty when there is none.
func Summary(causes []Cause) string {
	listed := Listed(causes)
	lines := make([]string, 0, len(listed)+1)
	for _, c := range listed {
		lines = append(lines, c.Line())
	}
	if n := len(causes) - len(listed); n > 0 {
		lines = append(lines, fmt.Sprintf("and %d more pods cannot start", n))
	}
	return strings.Join(lines, "; ")
}

// New returns the listed causes that the summary old does not name (for the same pod and reason): those to
// report in an event. A controller records them only once the status carrying the new summary is stored, so each
// is reported once per pod and reason, however many reconciles see it.
func New(old string, causes []Cause) []Cause {
	var out []Cause
	for _, c := range Listed(causes) {
		if !strings.Contains(old, c.key()) {
			out = append(out, c)
		}
	}
	return out
}
