package imagepulljob

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
)

// imageKey is a normalized image reference: the repository with its registry made explicit, and either a tag or
// a digest. Kubelets report node images in normalized form ("docker.io/library/busybox:1.36"), users write short
// forms ("busybox:1.36").
type imageKey struct {
	repo, tag, digest string
}

func parseImage(ref string) imageKey {
	var k imageKey
	if i := strings.Index(ref, "@"); i >= 0 {
		ref, k.digest = ref[:i], ref[i+1:]
	}
	if i := strings.LastIndex(ref, ":"); i >= 0 && !strings.Contains(ref[i:], "/") {
		ref, k.tag = ref[:i], ref[i+1:]
	}
	first, rest, found := strings.Cut(ref, "/")
	switch {
	case !found:
		ref = "docker.io/library/" + ref
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		ref = "docker.io/" + ref
	case first == "index.docker.io":
		ref = "docker.io/" + rest
	}
	if strings.HasPrefix(ref, "docker.io/") && !strings.Contains(strings.TrimPrefix(ref, "docker.io/"), "/") {
		ref = "docker.io/library/" + strings.TrimPrefix(ref, "docker.io/")
	}
	if k.tag == "" && k.digest == "" {
		k.tag = "latest"
	}
	k.repo = ref
	return k
}

// nodeHasImage reports whether the node lists image in status.images. A reference with a digest matches only that
// digest; a tag matches the same repository and tag.
func nodeHasImage(node *corev1.Node, image string) bool {
	want := parseImage(image)
	for _, img := range node.Status.Images {
		for _, name := range img.Names {
			got := parseImage(name)
			if got.repo != want.repo {
				continue
			}
			if want.digest != "" {
				if got.digest == want.digest {
					return true
				}
				continue
			}
			if got.tag == want.tag {
				return true
			}
		}
	}
	return false
}

// Policy is what the operator lets every ImagePullJob do. Creating an ImagePullJob runs pods on nodes past the
// scheduler (spec.nodeName is set), so a namespace user could otherwise fill every node's disk: the bounds are the
// platform's, set by operator flags, and a job can only narrow them.
type Policy struct {
	// NodeSelector limits the nodes pullers may go to; it ANDs with the job's own selection. Nil: every node.
	NodeSelector labels.Selector
	// PriorityClassName is the priority class of every puller pod, none when empty. The job's
	// spec.priorityClassName is not used: a user could pick a class meant for system pods.
	PriorityClassName string
	// TolerateAllTaints lets pullers tolerate every taint (narrowed by the job's spec.tolerations when set).
	TolerateAllTaints bool
	// Tolerations are the taints pullers may tolerate when TolerateAllTaints is false: a node with a NoSchedule or
	// NoExecute taint outside them is not targeted. The job's spec.tolerations, when set, narrows them further.
	Tolerations []corev1.Toleration
}

// Excluded counts the nodes a job selects that the operator's Policy keeps pullers off.
type Excluded struct {
	// OutsideSelector are outside Policy.NodeSelector; Tainted have a taint the Policy does not let pullers
	// tolerate (and the job would).
	OutsideSelector, Tainted int
}

// Message says what was excluded, or "" when nothing was.
func (e Excluded) Message() string {
	var parts []string
	if e.OutsideSelector > 0 {
		parts = append(parts, fmt.Sprintf("%d node(s) outside the operator's image-pull node selector", e.OutsideSelector))
	}
	if e.Tainted > 0 {
		parts = append(parts, fmt.Sprintf("%d node(s) with taints the operator does not let pullers tolerate", e.Tainted))
	}
	if len(parts) == 0 {
		return ""
	}
	return "not pulling on " + strings.Join(parts, " and ")
}

// effectiveTolerations are the tolerations the job asks for: every taint unless it says otherwise.
func effectiveTolerations(job *mantav1alpha1.ImagePullJob) []corev1.Toleration {
	if job.Spec.Tolerations == nil {
		return []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
	return job.Spec.Tolerations
}

// pullerTolerations are the tolerations of the puller pods: the job's when the operator lets pullers tolerate every
// taint, else the operator's list (node selection has already left out the nodes the job's own would not tolerate).
func pullerTolerations(job *mantav1alpha1.ImagePullJob, p Policy) []corev1.Toleration {
	if p.TolerateAllTaints {
		return effectiveTolerations(job)
	}
	if len(p.Tolerations) == 0 {
		return nil
	}
	return slices.Clone(p.Tolerations)
}

// ParseTolerations reads the tolerations of --image-pull-tolerations, in kubectl taint's syntax:
// key[=value][:effect]. Without a value any value is tolerated; without an effect, every effect.
func ParseTolerations(specs []string) ([]corev1.Toleration, error) {
	var out []corev1.Toleration
	for _, s := range specs {
		kv, effect, _ := strings.Cut(s, ":")
		key, value, hasValue := strings.Cut(kv, "=")
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return nil, fmt.Errorf("toleration %q: key %q: %s", s, key, strings.Join(errs, "; "))
		}
		t := corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffect(effect)}
		if hasValue {
			if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
				return nil, fmt.Errorf("toleration %q: value %q: %s", s, value, strings.Join(errs, "; "))
			}
			t.Operator, t.Value = corev1.TolerationOpEqual, value
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, fmt.Errorf("toleration %q: effect %q is not NoSchedule, PreferNoSchedule or NoExecute", s, effect)
		}
		out = append(out, t)
	}
	return out, nil
}

// toleratesNode reports whether pods with these tolerations may run on the node: every NoSchedule and NoExecute
// taint must be tolerated. PreferNoSchedule taints are ignored, as the scheduler does.
func toleratesNode(tolerations []corev1.Toleration, node *corev1.Node) bool {
	for i := range node.Spec.Taints {
		taint := &node.Spec.Taints[i]
		// The node lifecycle controller's not-ready/unreachable taints are transient and follow the Ready
		// condition, which callers check; they must not make nodes flap in and out of a job.
		if taint.Effect == corev1.TaintEffectPreferNoSchedule || taint.Key == corev1.TaintNodeNotReady || taint.Key == corev1.TaintNodeUnreachable {
			continue
		}
		tolerated := false
		for j := range tolerations {
			if tolerations[j].ToleratesTaint(klog.Background(), taint, false) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return false
		}
	}
	return true
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// eligibleNode says whether a puller pod can run on the node now, taints aside: Ready, not being deleted, and Linux
// (the puller binary is a Linux executable).
func eligibleNode(node *corev1.Node) bool {
	if node.DeletionTimestamp != nil || !nodeReady(node) {
		return false
	}
	if os, ok := node.Labels[corev1.LabelOSStable]; ok && os != "linux" {
		return false
	}
	return true
}

// SelectNodes returns the sorted names of the eligible nodes the job targets: the nodes named in spec.selector, or
// matching its label selector, or running pods matched by spec.podSelector (podSelectorPods are the pods of the job's
// namespace), or every node; of those, only the ones the operator's policy allows, whose hard taints both the job
// and the policy tolerate. It counts the nodes the policy alone kept out.
func SelectNodes(job *mantav1alpha1.ImagePullJob, nodes []corev1.Node, podSelectorPods []corev1.Pod, policy Policy) ([]string, Excluded, error) {
	var excluded Excluded
	tolerations := effectiveTolerations(job)
	var match func(*corev1.Node) bool
	switch sel := job.Spec.Selector; {
	case job.Spec.PodSelector != nil:
		s, err := metav1.LabelSelectorAsSelector(job.Spec.PodSelector)
		if err != nil {
			return nil, excluded, err
		}
		hosts := sets.New[string]()
		for i := range podSelectorPods {
			p := &podSelectorPods[i]
			if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Labels[LabelImagePuller] != "" ||
				p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || !s.Matches(labels.Set(p.Labels)) {
				continue
			}
			hosts.Insert(p.Spec.NodeName)
		}
		match = func(n *corev1.Node) bool { return hosts.Has(n.Name) }
	case sel != nil && len(sel.Names) > 0:
		names := sets.New(sel.Names...)
		match = func(n *corev1.Node) bool { return names.Has(n.Name) }
	case sel != nil:
		s, err := metav1.LabelSelectorAsSelector(&sel.LabelSelector)
		if err != nil {
			return nil, excluded, err
		}
		match = func(n *corev1.Node) bool { return s.Matches(labels.Set(n.Labels)) }
	default:
		match = func(*corev1.Node) bool { return true }
	}
	var out []string
	for i := range nodes {
		n := &nodes[i]
		if !match(n) || !eligibleNode(n) {
			continue
		}
		if policy.NodeSelector != nil && !policy.NodeSelector.Matches(labels.Set(n.Labels)) {
			excluded.OutsideSelector++
			continue
		}
		if !toleratesNode(tolerations, n) {
			continue // the job's own choice
		}
		if !policy.TolerateAllTaints && !toleratesNode(policy.Tolerations, n) {
			excluded.Tainted++
			continue
		}
		out = append(out, n.Name)
	}
	sort.Strings(out)
	return out, excluded, nil
}
